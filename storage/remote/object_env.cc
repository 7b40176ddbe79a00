// The object-storage Env: URLs resolved, requests located (path-style or
// virtual-hosted, in the bucket's region), signed, sent and retried; HEAD,
// whole-object GETs, ranged GETs, listings and removals.
#include "storage/remote/object_env.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <random>
#include <set>

#include "base/clock.h"
#include "storage/remote/digest.h"
#include "storage/remote/object_file.h"
#include "storage/remote/sigv4.h"

namespace shardkit {
namespace {

// A bucket name that DNS takes as a host label: what virtual-hosted
// requests need (and, over https, no dots: the certificate covers one label).
bool DnsCompatible(const std::string& bucket, bool https) {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  for (char c : bucket) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-' || (c == '.' && !https))) {
      return false;
    }
  }
  return bucket.front() != '-' && bucket.back() != '-' && bucket.find("..") == std::string::npos;
}

bool Hex2(const std::string& s, size_t i) {
  return i + 2 < s.size() + 1 && std::isxdigit(static_cast<unsigned char>(s[i])) &&
         std::isxdigit(static_cast<unsigned char>(s[i + 1]));
}

// A URL path as sent: what RFC 3986 allows in a path kept (and %XX escapes
// already there), every other byte (spaces, quotes, '?', '#', non-ASCII,
// a '%' that escapes nothing) percent-encoded, so that a shard's name is
// the object requested.
std::string EncodeUrlPath(const std::string& path) {
  static const char kDigits[] = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(path[i]);
    const bool keep = std::isalnum(c) || std::strchr("-._~!$&'()*+,;=:@/", c) != nullptr ||
                      (c == '%' && Hex2(path, i + 1));
    if (keep && c != 0) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kDigits[c >> 4];
      out += kDigits[c & 15];
    }
  }
  return out;
}

std::string PercentDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && Hex2(s, i + 1)) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

ObjectStore::ObjectStore(const ObjectStoreOptions& o, bool s3) : o_(o), s3_(s3), client_(o.http) {
  const size_t scheme_end = o.endpoint.find("://");
  scheme_ = scheme_end == std::string::npos ? "https" : o.endpoint.substr(0, scheme_end);
  std::string rest = o.endpoint.substr(scheme_end == std::string::npos ? 0 : scheme_end + 3);
  const size_t slash = rest.find('/');
  host_ = rest.substr(0, slash);
  base_path_ = slash == std::string::npos ? "" : rest.substr(slash);
  while (!base_path_.empty() && base_path_.back() == '/') base_path_.pop_back();
}

Result<Target> ObjectStore::Resolve(const std::string& path) const {
  Target t;
  t.shown = path;
  if (!s3_) {
    const size_t scheme_end = path.find("://");
    if (scheme_end == std::string::npos) return Status::InvalidArgument(path + ": not a URL");
    const size_t host_at = scheme_end + 3;
    const size_t slash = std::min(path.find('/', host_at), path.size());
    std::string authority = path.substr(host_at, slash - host_at);
    std::string user;
    if (const size_t at = authority.rfind('@'); at != std::string::npos) {
      t.user_password = PercentDecode(authority.substr(0, at));
      user = authority.substr(0, std::min(at, authority.find(':')));
      authority = authority.substr(at + 1);
    }
    if (authority.empty()) return Status::InvalidArgument(path + ": no host in the URL");
    const std::string scheme = path.substr(0, host_at);
    t.url = scheme + authority + EncodeUrlPath(path.substr(slash));
    t.shown = scheme + (user.empty() ? "" : user + "@") + authority + path.substr(slash);
    return t;
  }
  if (path.rfind("s3://", 0) != 0) return Status::InvalidArgument(path + ": not an s3:// URL");
  const std::string rest = path.substr(5);
  const size_t slash = rest.find('/');
  t.bucket = rest.substr(0, slash);
  t.key = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (t.bucket.empty()) {
    return Status::InvalidArgument(path + ": no bucket (expected s3://BUCKET/PREFIX)");
  }
  if (o_.addressing == ObjectStoreOptions::Addressing::kVirtual &&
      !DnsCompatible(t.bucket, scheme_ == "https")) {
    return Status::InvalidArgument(path + ": bucket '" + t.bucket +
                                   "' cannot be addressed virtual-hosted (addressing_style = "
                                   "virtual): its name is no DNS label");
  }
  return t;
}

std::string ObjectStore::RegionOf(const std::string& bucket) const {
  std::lock_guard<std::mutex> lock(regions_mu_);
  auto it = regions_.find(bucket);
  return it == regions_.end() ? o_.region : it->second;
}

bool ObjectStore::Virtual(const std::string& bucket) const {
  switch (o_.addressing) {
    case ObjectStoreOptions::Addressing::kPath:
      return false;
    case ObjectStoreOptions::Addressing::kVirtual:
      return true;
    case ObjectStoreOptions::Addressing::kAuto:
      break;
  }
  return o_.aws_endpoint && DnsCompatible(bucket, scheme_ == "https");
}

ReplyContext ObjectStore::Context(const Target& t) const {
  ReplyContext c;
  if (!s3_) {
    c.where = "the server";
    c.credentials = "no AWS credentials (a web server)";
    return c;
  }
  c.region = RegionOf(t.bucket);
  c.where = o_.aws_endpoint
                ? scheme_ + "://s3." + c.region + ".amazonaws.com (" + o_.endpoint_source + ")"
                : o_.endpoint + ", from " + o_.endpoint_source;
  c.credentials = o_.credentials != nullptr ? "credentials from " + o_.credentials->Describe()
                                            : "unsigned requests (AWS_NO_SIGN_REQUEST)";
  return c;
}

Status ObjectStore::Prepare(const Target& t, HttpRequest* q, const Query& query,
                            const std::string& payload_sha256, SentAs* sent) {
  *sent = SentAs();
  const std::string query_text = query.empty() ? "" : "?" + sigv4::CanonicalQuery(query);
  if (!s3_) {
    q->url = t.url + query_text;
    q->user_password = t.user_password;
    return Status::OK();
  }
  sent->region = RegionOf(t.bucket);
  std::string host = o_.aws_endpoint ? "s3." + sent->region + ".amazonaws.com" : host_;
  std::string path = base_path_ + "/";
  if (Virtual(t.bucket)) {
    host = t.bucket + "." + host;
  } else {
    path += sigv4::UriEncode(t.bucket, true) + "/";
  }
  path += sigv4::UriEncode(t.key, false);
  q->url = scheme_ + "://" + host + path + query_text;
  std::vector<std::pair<std::string, std::string>> signed_headers;
  for (const std::string& h : q->headers) {
    const size_t colon = h.find(':');
    if (colon == std::string::npos) continue;
    std::string value = h.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    signed_headers.emplace_back(h.substr(0, colon), value);
  }
  q->headers.push_back("Host: " + host);
  if (o_.credentials == nullptr) return Status::OK();
  SK_ASSIGN_OR_RETURN(sent->credentials, o_.credentials->Get());
  sigv4::Request r;
  r.method = q->method;
  r.host = host;
  r.encoded_path = path;
  r.query = query;
  r.headers = std::move(signed_headers);
  r.payload_sha256 = payload_sha256;
  const sigv4::Signed s = sigv4::Sign(r, sent->credentials->keys, sent->region, std::time(nullptr));
  q->headers.insert(q->headers.end(), s.headers.begin(), s.headers.end());
  return Status::OK();
}

std::string ObjectStore::DiscoverRegion(const Target& t) {
  Target bucket = t;
  bucket.key.clear();
  HttpRequest q;
  q.method = "HEAD";
  SentAs sent;
  if (!Prepare(bucket, &q, {}, sigv4::kEmptyPayloadSha256, &sent).ok()) return "";
  return Perform(q, nullptr).header("x-amz-bucket-region");
}

Status ObjectStore::WithRetries(const Target& t, const std::atomic<bool>* abort,
                                const std::function<Attempt(SentAs*)>& once) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  RetryBudget budget(o_.retry, MonotonicNs());
  bool refreshed = false, redirected = false;
  for (;;) {
    if (abort != nullptr && abort->load()) return Status::Aborted(t.shown + ": read cancelled");
    SentAs sent;
    const Attempt a = once(&sent);
    if (a.verdict == Attempt::kDone) return Status::OK();
    if (a.verdict == Attempt::kFail) {
      if (a.credentials && sent.credentials != nullptr && !refreshed) {
        refreshed = true;  // once per request: new credentials, if there are any
        bool renewed = false;
        auto fresh = o_.credentials->Refresh(*sent.credentials, &renewed);
        if (fresh.ok() && renewed) continue;
      }
      if (a.wrong_region && s3_ && !redirected) {
        redirected = true;  // once: to the region S3 names, on a host we choose
        const std::string region = a.region.empty() ? DiscoverRegion(t) : a.region;
        if (!region.empty() && region != sent.region && region.size() <= 64 &&
            region.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") ==
                std::string::npos) {
          std::lock_guard<std::mutex> lock(regions_mu_);
          regions_[t.bucket] = region;
          continue;
        }
      }
      return a.error;
    }
    retries_.fetch_add(1, std::memory_order_relaxed);
    const RetryBudget::Next next =
        budget.After(a, MonotonicNs(), std::uniform_real_distribution<double>(0, 1)(rng), t.shown);
    if (next.give_up) return next.error;
    std::unique_lock<std::mutex> lock(backoff_mu_);
    backoff_cv_.wait_for(lock, std::chrono::duration<double>(next.wait_s),
                         [&] { return abort != nullptr && abort->load(); });
  }
}

bool ObjectStore::FileExists(const std::string& path) {
  auto t = Resolve(path);
  if (!t.ok()) return false;
  auto info = Head(*t, nullptr);
  return info.ok() || !info.status().IsNotFound();
}

Result<ObjectInfo> ObjectStore::Head(const Target& t, const std::atomic<bool>* abort) {
  ObjectInfo info;
  SK_RETURN_IF_ERROR(WithRetries(t, abort, [&](SentAs* sent) -> Attempt {
    HttpRequest q;
    q.method = "HEAD";
    q.follow_redirects = !s3_;
    if (Status s = Prepare(t, &q, {}, sigv4::kEmptyPayloadSha256, sent); !s.ok()) return Fail(s);
    const HttpResponse r = Perform(q, abort);
    Attempt a = Judge(r, t.shown, Context(t));
    if (a.verdict != Attempt::kDone) return a;
    if (!ParseSize(r.header("content-length"), &info.size)) {
      return Fail(Status::IOError(t.shown + ": the server gave no size (Content-Length) for it"));
    }
    info.etag = r.header("etag");
    info.last_modified = r.header("last-modified");
    const std::string crc = r.header("x-amz-meta-shardkit-crc32c");
    if (crc.size() == 8 && crc.find_first_not_of("0123456789abcdef") == std::string::npos) {
      info.stored_crc32c = static_cast<uint32_t>(std::stoul(crc, nullptr, 16));
    }
    return a;
  }));
  return info;
}

Result<HttpRequest> ObjectStore::RangeRequest(const Target& t, const ObjectInfo& info,
                                              uint64_t offset, size_t n, char* dst, SentAs* sent) {
  HttpRequest q;
  q.dst = dst;
  q.dst_capacity = n;
  q.follow_redirects = !s3_;
  q.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" +
                      std::to_string(offset + n - 1));
  if (!info.etag.empty()) {
    q.headers.push_back("If-Match: " + info.etag);
  } else if (!info.last_modified.empty()) {
    q.headers.push_back("If-Unmodified-Since: " + info.last_modified);
  }
  SK_RETURN_IF_ERROR(Prepare(t, &q, {}, sigv4::kEmptyPayloadSha256, sent));
  return q;
}

Status ObjectStore::GetRange(const Target& t, const ObjectInfo& info, uint64_t offset, size_t n,
                             char* dst, const std::atomic<bool>* abort) {
  size_t done = 0;
  return WithRetries(t, abort, [&](SentAs* sent) -> Attempt {
    auto q = RangeRequest(t, info, offset + done, n - done, dst + done, sent);
    if (!q.ok()) return Fail(q.status());
    const HttpResponse r = Perform(*q, abort);
    size_t got = 0;
    Attempt a = CheckRange(t.shown, info, offset + done, n - done, r, Context(t), &got);
    done += got;  // a short body is resumed from its first missing byte
    return a;
  });
}

Result<std::string> ObjectStore::ReadFile(const std::string& path, uint64_t max_size,
                                          const Cancel* cancel) {
  SK_ASSIGN_OR_RETURN(const Target t, Resolve(path));
  std::string body;
  SK_RETURN_IF_ERROR(WithRetries(t, cancel, [&](SentAs* sent) -> Attempt {
    HttpRequest q;
    q.max_body = max_size;
    q.follow_redirects = !s3_;
    if (Status s = Prepare(t, &q, {}, sigv4::kEmptyPayloadSha256, sent); !s.ok()) return Fail(s);
    HttpResponse r = Perform(q, cancel);
    if (r.overflow) {
      return Fail(Status::InvalidArgument(t.shown + ": more than the limit of " +
                                          std::to_string(max_size) + " bytes"));
    }
    Attempt a = Judge(r, t.shown, Context(t));
    uint64_t length = 0;
    if (a.verdict == Attempt::kDone && ParseSize(r.header("content-length"), &length) &&
        length != r.body.size()) {
      return Retry("a reply cut short after " + std::to_string(r.body.size()) + " of " +
                   std::to_string(length) + " bytes");
    }
    body = std::move(r.body);
    return a;
  }));
  return body;
}

ReadAhead* ObjectStore::ahead() {
  ReadAhead* a = ahead_.load(std::memory_order_acquire);
  if (a != nullptr && a->pid == ::getpid()) return a;
  static std::mutex swap_mu;
  std::lock_guard<std::mutex> lock(swap_mu);
  a = ahead_.load();
  if (a == nullptr || a->pid != ::getpid()) {
    a = new ReadAhead(::getpid());  // a parent's, in a forked child, is left as it is
    ahead_.store(a, std::memory_order_release);
  }
  return a;
}

Result<std::unique_ptr<RandomAccessFile>> ObjectStore::OpenForReads(const std::string& path,
                                                                    const Cancel* cancel) {
  SK_ASSIGN_OR_RETURN(Target t, Resolve(path));
  SK_ASSIGN_OR_RETURN(ObjectInfo info, Head(t, cancel));
  return std::unique_ptr<RandomAccessFile>(new ObjectFile(this, std::move(t), std::move(info)));
}

Result<HttpResponse> ObjectStore::Call(const Target& t, const std::string& method,
                                       const Query& query, std::string_view body,
                                       const std::vector<std::string>& headers,
                                       const std::atomic<bool>* abort) {
  HttpResponse out;
  // The body's SHA-256 is signed: S3 checks it, so a body changed on its
  // way (over http://) is refused, whatever else the request carries.
  const std::string sha = digest::Sha256Hex(body);
  SK_RETURN_IF_ERROR(WithRetries(t, abort, [&](SentAs* sent) -> Attempt {
    HttpRequest q;
    q.method = method;
    q.body = body;
    q.max_body = 16 << 20;
    q.headers = headers;
    if (Status s = Prepare(t, &q, query, sha, sent); !s.ok()) return Fail(s);
    HttpResponse r = Perform(q, abort);
    Attempt a = Judge(r, t.shown, Context(t));
    if (a.verdict != Attempt::kDone) return a;
    if (r.body.find("<Error>") != std::string::npos) {  // S3 may say 200, then fail
      const std::string code = XmlField(r.body, "Code");
      if (Retryable(500, code)) return Retry("HTTP 200 with error " + code);
      return Fail(Status::IOError(t.shown + ": " + code + ": " + XmlField(r.body, "Message")));
    }
    out = std::move(r);
    return a;
  }));
  return out;
}

Status ObjectStore::RemoveFile(const std::string& path) {
  SK_RETURN_IF_ERROR(WritableStore(path));
  SK_ASSIGN_OR_RETURN(const Target t, Resolve(path));
  auto r = Call(t, "DELETE", {}, {}, {});
  if (!r.ok() && r.status().IsNotFound()) return Status::OK();
  return r.status();
}

namespace {

// The text of every <tag>...</tag> of a listing, XML entities replaced.
std::vector<std::string> XmlAll(const std::string& body, const std::string& tag) {
  std::vector<std::string> out;
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  for (size_t i = 0; (i = body.find(open, i)) != std::string::npos;) {
    const size_t e = body.find(close, i);
    if (e == std::string::npos) break;
    out.push_back(XmlText(body.substr(i + open.size(), e - i - open.size())));
    i = e;
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> ObjectStore::ListDir(const std::string& dir) {
  SK_RETURN_IF_ERROR(WritableStore(dir));
  std::string path = dir;
  while (!path.empty() && path.back() == '/') path.pop_back();
  SK_ASSIGN_OR_RETURN(Target t, Resolve(path + "/"));
  const std::string key_prefix = t.key == "/" ? "" : t.key;  // S3 names keys unencoded
  t.key.clear();  // the listing is a GET of the bucket with a prefix
  std::vector<std::string> names;
  std::string token;
  std::set<std::string> tokens;
  for (;;) {
    Query q = {{"list-type", "2"}, {"prefix", key_prefix}, {"delimiter", "/"}};
    if (!token.empty()) q.push_back({"continuation-token", token});
    SK_ASSIGN_OR_RETURN(HttpResponse r, Call(t, "GET", q, {}, {}));
    for (const char* tag : {"Key", "Prefix"}) {
      for (std::string name : XmlAll(r.body, tag)) {
        if (name.size() <= key_prefix.size() ||
            name.compare(0, key_prefix.size(), key_prefix) != 0) {
          continue;  // the listing's own <Prefix>
        }
        name = name.substr(key_prefix.size());
        if (!name.empty() && name.back() == '/') name.pop_back();
        names.push_back(std::move(name));
      }
    }
    if (XmlField(r.body, "IsTruncated") != "true") break;
    token = XmlText(XmlField(r.body, "NextContinuationToken"));
    if (token.empty()) break;
    if (!tokens.insert(token).second) {
      return Status::IOError(dir + ": the server's listing repeats its continuation token (" +
                             std::to_string(tokens.size()) +
                             " pages in): a listing that would never end");
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

Result<std::vector<std::pair<std::string, std::string>>> ObjectStore::ListUploads(
    const std::string& prefix) {
  SK_RETURN_IF_ERROR(WritableStore(prefix));
  SK_ASSIGN_OR_RETURN(Target t, Resolve(prefix));
  const std::string key_prefix = t.key;
  t.key.clear();
  std::vector<std::pair<std::string, std::string>> uploads;
  std::string key_marker, id_marker;
  std::set<std::string> markers;
  for (;;) {
    Query q = {{"uploads", ""}, {"prefix", key_prefix}};
    if (!key_marker.empty()) {
      q.push_back({"key-marker", key_marker});
      q.push_back({"upload-id-marker", id_marker});
    }
    SK_ASSIGN_OR_RETURN(HttpResponse r, Call(t, "GET", q, {}, {}));
    for (size_t i = 0; (i = r.body.find("<Upload>", i)) != std::string::npos;) {
      const size_t e = r.body.find("</Upload>", i);
      if (e == std::string::npos) break;
      const std::string one = r.body.substr(i, e - i);
      const auto keys = XmlAll(one, "Key"), ids = XmlAll(one, "UploadId");
      if (!keys.empty() && !ids.empty()) uploads.emplace_back(keys[0], ids[0]);
      i = e;
    }
    if (XmlField(r.body, "IsTruncated") != "true") break;
    key_marker = XmlText(XmlField(r.body, "NextKeyMarker"));
    id_marker = XmlText(XmlField(r.body, "NextUploadIdMarker"));
    if (key_marker.empty() || !markers.insert(key_marker + "\n" + id_marker).second) break;
  }
  return uploads;
}

Status AbortUnfinishedUploads(Env* env, const std::string& prefix, uint64_t* aborted) {
  *aborted = 0;
  auto* store = dynamic_cast<ObjectStore*>(env);
  if (store == nullptr || prefix.rfind("s3://", 0) != 0) return Status::OK();
  SK_ASSIGN_OR_RETURN(auto uploads, store->ListUploads(prefix));
  SK_ASSIGN_OR_RETURN(Target bucket, store->Resolve(prefix));
  for (const auto& [key, id] : uploads) {
    Target t = bucket;
    t.key = key;
    t.shown = "s3://" + t.bucket + "/" + key;
    auto r = store->Call(t, "DELETE", {{"uploadId", id}}, {}, {});
    if (!r.ok() && !r.status().IsNotFound()) return r.status();
    ++*aborted;
  }
  return Status::OK();
}

Result<std::unique_ptr<Env>> NewS3Env(const ObjectStoreOptions& options) {
  return std::unique_ptr<Env>(new ObjectStore(options, /*s3=*/true));
}

Result<std::unique_ptr<Env>> NewHttpEnv(const ObjectStoreOptions& options) {
  return std::unique_ptr<Env>(new ObjectStore(options, /*s3=*/false));
}

Result<Env*> ObjectStoreEnvFor(const std::string& url) {
  const bool s3 = url.rfind("s3://", 0) == 0;
  static std::mutex mu;
  static Env* envs[2] = {nullptr, nullptr};  // never destroyed: used until exit
  std::lock_guard<std::mutex> lock(mu);
  Env*& env = envs[s3 ? 1 : 0];
  if (env == nullptr) {
    SK_ASSIGN_OR_RETURN(ObjectStoreOptions o, ObjectStoreOptions::FromEnvironment());
    SK_ASSIGN_OR_RETURN(auto made, s3 ? NewS3Env(o) : NewHttpEnv(o));
    env = made.release();
  }
  return env;
}

}  // namespace shardkit
