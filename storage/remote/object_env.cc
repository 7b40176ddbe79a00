// The object-storage Env: URLs resolved and requests signed, sent and
// retried; HEAD, whole-object GETs, ranged GETs, listings and removals.
#include "storage/remote/object_env.h"
#include "storage/remote/digest.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "base/clock.h"
#include "storage/remote/object_file.h"
#include "storage/remote/sigv4.h"

namespace shardkit {

Result<Target> ObjectStore::Resolve(const std::string& path) const {
  Target t;
  t.shown = path;
  if (!s3_) {
    t.url = path;
    return t;
  }
  if (path.rfind("s3://", 0) != 0) return Status::InvalidArgument(path + ": not an s3:// URL");
  const std::string rest = path.substr(5);
  const size_t slash = rest.find('/');
  const std::string bucket = rest.substr(0, slash);
  const std::string key = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (bucket.empty()) {
    return Status::InvalidArgument(path + ": no bucket (expected s3://BUCKET/PREFIX)");
  }
  t.encoded_path =
      base_path_ + "/" + sigv4::UriEncode(bucket, true) + "/" + sigv4::UriEncode(key, false);
  t.host = host_;
  t.url = endpoint_.substr(0, endpoint_.size() - base_path_.size()) + t.encoded_path;
  return t;
}

void ObjectStore::Sign(const Target& t, HttpRequest* q, const Query& query,
                       const std::string& payload_sha256) const {
  q->url = query.empty() ? t.url : t.url + "?" + sigv4::CanonicalQuery(query);
  if (!s3_) return;
  q->headers.push_back("Host: " + t.host);
  if (!o_.sign) return;
  sigv4::Request r;
  r.method = q->method;
  r.host = t.host;
  r.encoded_path = t.encoded_path;
  r.query = query;
  r.payload_sha256 = payload_sha256;
  const sigv4::Signed s = sigv4::Sign(r, o_.credentials, o_.region, std::time(nullptr));
  q->headers.insert(q->headers.end(), s.headers.begin(), s.headers.end());
}

Status ObjectStore::WithRetries(const std::string& shown, const std::atomic<bool>* abort,
                                const std::function<Attempt()>& once) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  RetryBudget budget(o_.retry, MonotonicNs());
  for (;;) {
    if (abort != nullptr && abort->load()) return Status::Aborted(shown + ": read cancelled");
    const Attempt a = once();
    if (a.verdict == Attempt::kDone) return Status::OK();
    if (a.verdict == Attempt::kFail) return a.error;
    retries_.fetch_add(1, std::memory_order_relaxed);
    const RetryBudget::Next next =
        budget.After(a, MonotonicNs(), std::uniform_real_distribution<double>(0, 1)(rng), shown);
    if (next.give_up) return next.error;
    std::unique_lock<std::mutex> lock(backoff_mu_);
    backoff_cv_.wait_for(lock, std::chrono::duration<double>(next.wait_s),
                         [&] { return abort != nullptr && abort->load(); });
  }
}

Result<ObjectInfo> ObjectStore::Head(const Target& t, const std::atomic<bool>* abort) {
  ObjectInfo info;
  SK_RETURN_IF_ERROR(WithRetries(t.shown, abort, [&]() -> Attempt {
    HttpRequest q;
    q.method = "HEAD";
    q.url = t.url;
    q.follow_redirects = !s3_;
    Sign(t, &q);
    const HttpResponse r = Perform(q, abort);
    Attempt a = Judge(r, t.shown, context_);
    if (a.verdict != Attempt::kDone) return a;
    if (!ParseSize(r.header("content-length"), &info.size)) {
      return Fail(Status::IOError(t.shown + ": the server gave no size (Content-Length) for it"));
    }
    info.etag = r.header("etag");
    info.last_modified = r.header("last-modified");
    return a;
  }));
  return info;
}

HttpRequest ObjectStore::RangeRequest(const Target& t, const ObjectInfo& info, uint64_t offset,
                                      size_t n, char* dst) const {
  HttpRequest q;
  q.url = t.url;
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
  Sign(t, &q);
  return q;
}

Status ObjectStore::GetRange(const Target& t, const ObjectInfo& info, uint64_t offset, size_t n,
                             char* dst, const std::atomic<bool>* abort) {
  size_t done = 0;
  return WithRetries(t.shown, abort, [&]() -> Attempt {
    const HttpResponse r =
        Perform(RangeRequest(t, info, offset + done, n - done, dst + done), abort);
    size_t got = 0;
    Attempt a = CheckRange(t.shown, info, offset + done, n - done, r, context_, &got);
    done += got;  // a short body is resumed from its first missing byte
    return a;
  });
}

Result<std::string> ObjectStore::ReadFile(const std::string& path, uint64_t max_size) {
  SK_ASSIGN_OR_RETURN(const Target t, Resolve(path));
  std::string body;
  SK_RETURN_IF_ERROR(WithRetries(t.shown, nullptr, [&]() -> Attempt {
    HttpRequest q;
    q.url = t.url;
    q.max_body = max_size;
    q.follow_redirects = !s3_;
    Sign(t, &q);
    HttpResponse r = Perform(q, nullptr);
    if (r.overflow) {
      return Fail(Status::InvalidArgument(t.shown + ": more than the limit of " +
                                          std::to_string(max_size) + " bytes"));
    }
    Attempt a = Judge(r, t.shown, context_);
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

Result<std::unique_ptr<RandomAccessFile>> ObjectStore::OpenForReads(const std::string& path) {
  SK_ASSIGN_OR_RETURN(Target t, Resolve(path));
  SK_ASSIGN_OR_RETURN(ObjectInfo info, Head(t, nullptr));
  return std::unique_ptr<RandomAccessFile>(new ObjectFile(this, std::move(t), std::move(info)));
}

Result<HttpResponse> ObjectStore::Call(const Target& t, const std::string& method,
                                       const Query& query, std::string_view body,
                                       const std::vector<std::string>& headers) {
  HttpResponse out;
  // A body whose MD5 is a signed header (Content-MD5, which S3 checks) is
  // sent UNSIGNED-PAYLOAD: hashing it again with SHA-256 would add nothing
  // the signature does not already cover, and cost a pass over every byte.
  const bool md5_signed = std::any_of(headers.begin(), headers.end(), [](const std::string& h) {
    return h.rfind("Content-MD5:", 0) == 0;
  });
  const std::string sha = md5_signed ? "UNSIGNED-PAYLOAD" : digest::Sha256Hex(body);
  SK_RETURN_IF_ERROR(WithRetries(t.shown, nullptr, [&]() -> Attempt {
    HttpRequest q;
    q.method = method;
    q.body = body;
    q.max_body = 16 << 20;
    q.headers = headers;
    Sign(t, &q, query, sha);
    HttpResponse r = Perform(q, nullptr);
    Attempt a = Judge(r, t.shown, context_);
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

Result<std::vector<std::string>> ObjectStore::ListDir(const std::string& dir) {
  SK_RETURN_IF_ERROR(WritableStore(dir));
  std::string path = dir;
  while (!path.empty() && path.back() == '/') path.pop_back();
  SK_ASSIGN_OR_RETURN(Target t, Resolve(path + "/"));
  const std::string prefix = t.encoded_path.substr(t.encoded_path.find('/', 1) + 1);
  std::string key_prefix;  // the prefix as S3 names keys: unencoded
  if (const size_t slash = path.find('/', 5); slash != std::string::npos) {
    key_prefix = path.substr(slash + 1) + "/";
  }
  // The bucket itself: the listing is a GET of the bucket with a prefix.
  t.encoded_path = t.encoded_path.substr(0, t.encoded_path.size() - prefix.size());
  t.url = t.url.substr(0, t.url.size() - prefix.size());
  std::vector<std::string> names;
  std::string token;
  for (;;) {
    Query q = {{"list-type", "2"}, {"prefix", key_prefix}, {"delimiter", "/"}};
    if (!token.empty()) q.push_back({"continuation-token", token});
    SK_ASSIGN_OR_RETURN(HttpResponse r, Call(t, "GET", q, {}, {}));
    for (const char* tag : {"Key", "Prefix"}) {
      const std::string open = std::string("<") + tag + ">", close = std::string("</") + tag + ">";
      for (size_t i = 0; (i = r.body.find(open, i)) != std::string::npos;) {
        const size_t e = r.body.find(close, i);
        if (e == std::string::npos) break;
        std::string name = XmlText(r.body.substr(i + open.size(), e - i - open.size()));
        i = e;
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
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

// An object written through a buffer: one PUT when it is closed at
// kObjectPartBytes or less, else a multipart upload of kObjectPartBytes
// parts, each sent with its Content-MD5 and its ETag checked, up to
// kPartsInFlight of them at once (a part's request waits on the link and
// the server, not on the writer: one at a time, an object with few parts
// would go at a fraction of the link's rate); the object exists only once
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
