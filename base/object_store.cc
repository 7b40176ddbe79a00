// The object-storage Envs: URL resolution, requests with retries, objects
// opened for ranged reads with their ETag pinned, and the read-ahead that
// WillNeed starts.
#include "base/object_store.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "base/clock.h"
#include "base/format.h"

namespace shardkit {
namespace {

// Where a request goes, and how it is named to the user.
struct Target {
  std::string shown;         // the URL as the user wrote it
  std::string url;           // what is requested
  std::string host;          // S3: the Host header, as signed
  std::string encoded_path;  // S3: the path, as signed
};

struct ObjectInfo {
  uint64_t size = 0;
  std::string etag;           // pinned at open: every GET says If-Match
  std::string last_modified;  // servers without ETags: If-Unmodified-Since
};

std::string XmlField(const std::string& body, const std::string& tag) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  const size_t b = body.find(open);
  if (b == std::string::npos) return "";
  const size_t e = body.find(close, b + open.size());
  if (e == std::string::npos) return "";
  return body.substr(b + open.size(), std::min<size_t>(e - b - open.size(), 300));
}

// "bytes FIRST-LAST/TOTAL" (TOTAL may be "*").
bool ParseContentRange(const std::string& v, uint64_t* first, uint64_t* last, uint64_t* total) {
  unsigned long long f = 0, l = 0, t = 0;
  int used = 0;
  if (std::sscanf(v.c_str(), "bytes %llu-%llu/%llu%n", &f, &l, &t, &used) == 3 &&
      static_cast<size_t>(used) == v.size()) {
    *first = f, *last = l, *total = t;
    return true;
  }
  if (std::sscanf(v.c_str(), "bytes %llu-%llu/*%n", &f, &l, &used) == 2 &&
      static_cast<size_t>(used) == v.size()) {
    *first = f, *last = l, *total = ~uint64_t{0};
    return true;
  }
  return false;
}

bool ParseSize(const std::string& v, uint64_t* out) {
  if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *out = std::stoull(v);
  return true;
}

// One try of a request, judged.
struct Attempt {
  enum Verdict { kDone, kRetry, kFail } verdict = kDone;
  Status error;           // kFail
  std::string why;        // kRetry: for the message when the retries run out
  bool progress = false;  // kRetry: enough bytes arrived, the budget starts again
  uint64_t bytes = 0;     // of the data asked for, the bytes this try delivered
  bool connect = false;   // kRetry: no connection could be made
};

// A try that brings at least this (or all that was asked) is progress.
constexpr size_t kProgressBytes = 64 << 10;
// What progress buys: a request retried with progress is given up once it
// has taken the retry budget plus a second per this many bytes it brought.
constexpr double kMinRetryRate = 64 << 10;

Attempt Fail(Status s) {
  Attempt a;
  a.verdict = Attempt::kFail;
  a.error = std::move(s);
  return a;
}

Attempt Retry(std::string why, bool progress = false) {
  Attempt a;
  a.verdict = Attempt::kRetry;
  a.why = std::move(why);
  a.progress = progress;
  return a;
}

// Statuses (and S3 error codes) worth another try: throttling and the
// server's own trouble.
bool Retryable(long status, const std::string& code) {
  return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 ||
         status == 504 || code == "SlowDown" || code == "RequestTimeout" ||
         code == "InternalError" || code == "ServiceUnavailable";
}

// What the user can check, by S3's error code; `where`: the endpoint and
// where its setting came from, and whether requests are signed.
std::string Hint(const std::string& code, const std::string& where) {
  if (code == "SignatureDoesNotMatch") return " (check AWS_SECRET_ACCESS_KEY)";
  if (code == "InvalidAccessKeyId") return " (check AWS_ACCESS_KEY_ID)";
  if (code == "ExpiredToken" || code == "InvalidToken") return " (check AWS_SESSION_TOKEN)";
  if (code == "RequestTimeTooSkewed") return " (this machine's clock is wrong)";
  if (code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed") {
    return " (the bucket is in another region: check AWS_REGION)";
  }
  if (code == "NoSuchBucket") return " (no such bucket at " + where + ")";
  if (code == "AccessDenied") return " (" + where + ")";
  return "";
}

// A request's outcome by its status alone (2xx: done; the caller checks more).
Attempt Judge(const HttpResponse& r, const std::string& shown, const std::string& where) {
  if (r.aborted) return Fail(Status::Aborted(shown + ": read cancelled"));
  if (r.tls_failed || r.broken_reply) {
    return Fail(Status::IOError(shown + ": " + r.transport_error));
  }
  if (!r.transport_error.empty()) {
    Attempt a = Retry(r.transport_error);
    a.connect = r.connect_failed;
    return a;
  }
  if (r.status >= 200 && r.status < 300) return Attempt();
  const std::string code = XmlField(r.body, "Code"), message = XmlField(r.body, "Message");
  std::string what = "HTTP " + std::to_string(r.status);
  if (!code.empty()) what += " " + code;
  if (!message.empty()) what += ": " + message;
  if (Retryable(r.status, code)) return Retry(what);
  what += Hint(code, where);
  if (r.status == 412) {
    return Fail(Status::IOError(shown +
                                ": the object changed since it was opened (its ETag no longer "
                                "matches; it was replaced while being read): " +
                                what));
  }
  if (r.status == 404 && code != "NoSuchBucket") {
    return Fail(Status::NotFound(shown + ": no such object (" + what + ")"));
  }
  return Fail(Status::IOError(shown + ": " + what));
}

class ObjectStore;

// Reads started ahead by WillNeed for every file of a store, held until
// read or evicted (least recently touched first) within a byte budget. One
// per process: a forked child starts with none (its parent's transfers do
// not run in it).
struct ReadAhead {
  struct Entry {
    enum State { kReading, kReady, kFailed } state = kReading;
    std::vector<char> bytes;
    uint64_t used = 0;  // bytes read out of it: all of them, and it goes
    std::list<std::pair<uint64_t, uint64_t>>::iterator lru;
  };
  using Key = std::pair<uint64_t, uint64_t>;  // (file, offset)
  explicit ReadAhead(pid_t p) : pid(p) {}
  // The entry holding [offset, offset + n) of `file`, or entries.end().
  std::map<Key, std::shared_ptr<Entry>>::iterator Find(uint64_t file, uint64_t offset, uint64_t n) {
    auto it = entries.upper_bound({file, offset});
    if (it == entries.begin()) return entries.end();
    --it;
    if (it->first.first != file || offset + n > it->first.second + it->second->bytes.size()) {
      return entries.end();
    }
    return it;
  }
  void Touch(const std::shared_ptr<Entry>& e) { lru.splice(lru.end(), lru, e->lru); }
  void Erase(const Key& key) {
    auto it = entries.find(key);
    if (it == entries.end()) return;
    held -= it->second->bytes.size();
    lru.erase(it->second->lru);
    entries.erase(it);
  }
  // Evicts ready entries, oldest first, until n more bytes fit.
  bool MakeRoom(uint64_t n, uint64_t budget) {
    for (auto it = lru.begin(); held + n > budget && it != lru.end();) {
      const Key key = *it++;
      if (entries.at(key)->state != Entry::kReading) Erase(key);
    }
    return held + n <= budget;
  }

  const pid_t pid;
  std::mutex mu;
  std::condition_variable cv;
  std::map<Key, std::shared_ptr<Entry>> entries;
  std::list<Key> lru;
  uint64_t held = 0;
  int reading = 0;
};

class ObjectFile;

class ObjectStore final : public Env {
 public:
  using Query = std::vector<std::pair<std::string, std::string>>;
  ObjectStore(const ObjectStoreOptions& o, bool s3) : o_(o), s3_(s3), client_(o.http) {
    const size_t scheme_end = o.endpoint.find("://");
    std::string rest = o.endpoint.substr(scheme_end == std::string::npos ? 0 : scheme_end + 3);
    const size_t slash = rest.find('/');
    host_ = rest.substr(0, slash);
    base_path_ = slash == std::string::npos ? "" : rest.substr(slash);
    while (!base_path_.empty() && base_path_.back() == '/') base_path_.pop_back();
    endpoint_ = o.endpoint.substr(0, scheme_end + 3) + host_ + base_path_;
    where_ = s3 ? endpoint_ + ", from " + o.endpoint_source +
                      (o.sign ? "; signed with AWS_ACCESS_KEY_ID " + o.credentials.access_key_id
                              : "; unsigned: no AWS_ACCESS_KEY_ID or credentials file, or "
                                "AWS_NO_SIGN_REQUEST")
                : "the server";
  }

  Result<std::unique_ptr<RandomAccessFile>> OpenForReads(const std::string& path) override;
  bool FileExists(const std::string& path) override {
    auto t = Resolve(path);
    if (!t.ok()) return false;
    auto info = Head(*t, nullptr);
    return info.ok() || !info.status().IsNotFound();
  }
  Result<std::string> ReadFile(const std::string& path, uint64_t max_size) override;
  bool remote() const override { return true; }
  // Writing (S3 only; a web server is read here, never written).
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  Status RemoveFile(const std::string& path) override;
  Status CreateDirs(const std::string& dir) override { return WritableStore(dir); }
  Status SyncDir(const std::string& dir) override { return WritableStore(dir); }
  Result<std::vector<std::string>> ListDir(const std::string& dir) override;
  // One request with retries; a 2xx reply (S3's "200 with an error" refused).
  Result<HttpResponse> Call(const Target& t, const std::string& method, const Query& query,
                            std::string_view body, const std::vector<std::string>& headers);
  StorageCounters counters() const override {
    StorageCounters c;
    c.requests = requests_.load();
    c.bytes = bytes_.load();
    c.retries = retries_.load();
    return c;
  }
  // Every request goes through these two, so that they are counted.
  HttpResponse Perform(const HttpRequest& q, const std::atomic<bool>* abort) {
    HttpResponse r = client_.Perform(q, abort);
    Count(r);
    return r;
  }
  void Count(const HttpResponse& r) {
    requests_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(r.body_bytes, std::memory_order_relaxed);
  }

  Result<Target> Resolve(const std::string& path) const;
  Status WritableStore(const std::string& path) const {
    return s3_ ? Status::OK()
               : Status::Unsupported(path + ": a web server is read-only here (write to s3://)");
  }
  Result<ObjectInfo> Head(const Target& t, const std::atomic<bool>* abort);
  Status GetRange(const Target& t, const ObjectInfo& info, uint64_t offset, size_t n, char* dst,
                  const std::atomic<bool>* abort);
  // A GET of [offset, offset + n) into dst, signed, with the object pinned.
  HttpRequest RangeRequest(const Target& t, const ObjectInfo& info, uint64_t offset, size_t n,
                           char* dst) const;
  // A reply to RangeRequest that holds exactly the bytes asked for (or a
  // first part of them: *got); else the error.
  Attempt CheckRange(const Target& t, const ObjectInfo& info, uint64_t offset, size_t n,
                     const HttpResponse& r, size_t* got) const;

  ReadAhead* ahead();
  HttpClient& client() { return client_; }
  const ObjectStoreOptions& options() const { return o_; }
  uint64_t NextFileId() { return next_file_.fetch_add(1); }

 private:
  // Sets q->url (with `query`) and, for S3, the Host header and the
  // signature (over `query` and the body's SHA-256).
  void Sign(const Target& t, HttpRequest* q, const Query& query = {},
            const std::string& payload_sha256 = sigv4::kEmptyPayloadSha256) const;
  // Tries `once` until it is done or fails for good, or retry_seconds pass
  // without progress; waits (backoff with full jitter) between tries.
  Status WithRetries(const std::string& shown, const std::atomic<bool>* abort,
                     const std::function<Attempt()>& once);

  const ObjectStoreOptions o_;
  const bool s3_;
  std::string host_, base_path_, endpoint_;
  std::string where_;  // for messages: the endpoint, where it came from, how requests are signed
  HttpClient client_;
  std::atomic<ReadAhead*> ahead_{nullptr};
  std::atomic<uint64_t> next_file_{1};
  std::atomic<uint64_t> requests_{0}, bytes_{0}, retries_{0};
  std::mutex backoff_mu_;
  std::condition_variable backoff_cv_;  // woken by an abort
  friend class ObjectFile;
};

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
  const uint64_t start = MonotonicNs();
  uint64_t since = start;  // the last progress
  uint64_t delivered = 0;  // bytes the tries brought
  int tries = 0, failures = 0;
  for (;;) {
    if (abort != nullptr && abort->load()) return Status::Aborted(shown + ": read cancelled");
    Attempt a = once();
    ++tries;
    if (a.verdict == Attempt::kDone) return Status::OK();
    if (a.verdict == Attempt::kFail) return a.error;
    delivered += a.bytes;
    if (a.progress) {
      since = MonotonicNs();
      failures = 0;
    }
    ++failures;
    retries_.fetch_add(1, std::memory_order_relaxed);
    const double cap =
        std::min(o_.backoff_max_s, o_.backoff_first_s * double(1u << std::min(failures, 20)));
    const double wait = std::uniform_real_distribution<double>(0, cap)(rng);
    const double stalled = double(MonotonicNs() - since) * 1e-9 + wait;
    // Progress buys time at kMinRetryRate at most: a server that brings some
    // bytes every try but keeps failing ends too, however it fails.
    const double spent = double(MonotonicNs() - start) * 1e-9 + wait;
    const bool crawling = spent > o_.retry_seconds + double(delivered) / kMinRetryRate;
    if (stalled > o_.retry_seconds || crawling || (a.connect && failures > 4)) {
      return Status::IOError(
          shown + ": " + a.why +
          (crawling && stalled <= o_.retry_seconds
               ? " again and again (" + FormatBytes(double(delivered)) +
                     " came in retries, slower than " + FormatBytes(kMinRetryRate) + "/s)"
               : std::string()) +
          " (gave up after " + std::to_string(tries) + (tries == 1 ? " try" : " tries") + " in " +
          FormatDuration(double(MonotonicNs() - start) * 1e-9) +
          "; SHARDKIT_RETRY_SECONDS sets how long to keep trying)");
    }
    std::unique_lock<std::mutex> lock(backoff_mu_);
    backoff_cv_.wait_for(lock, std::chrono::duration<double>(wait),
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
    Attempt a = Judge(r, t.shown, where_);
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

Attempt ObjectStore::CheckRange(const Target& t, const ObjectInfo& info, uint64_t offset, size_t n,
                                const HttpResponse& r, size_t* got) const {
  *got = 0;
  if (r.overflow) {
    return Fail(Status::IOError(t.shown + ": the server sent more than the " + std::to_string(n) +
                                " bytes asked for at offset " + std::to_string(offset)));
  }
  if (r.status == 200 && !r.aborted) {
    return Fail(Status::IOError(t.shown +
                                ": the server ignores ranged reads (HTTP 200 to a Range "
                                "request); serve the dataset from one that answers them"));
  }
  if (r.status != 206 || r.aborted) {
    Attempt a = Judge(r, t.shown, where_);
    if (a.verdict != Attempt::kDone) return a;
    return Fail(Status::IOError(t.shown + ": HTTP " + std::to_string(r.status) +
                                " to a Range request for bytes " + std::to_string(offset) + "-" +
                                std::to_string(offset + n - 1) +
                                " (a ranged read is answered 206 with those bytes)"));
  }
  uint64_t first = 0, last = 0, total = 0;
  const std::string range = r.header("content-range");
  if (!ParseContentRange(range, &first, &last, &total) || first != offset ||
      last != offset + n - 1 || (total != ~uint64_t{0} && total != info.size)) {
    return Fail(Status::IOError(t.shown + ": asked for bytes " + std::to_string(offset) + "-" +
                                std::to_string(offset + n - 1) + "/" + std::to_string(info.size) +
                                ", the server answered Content-Range '" + range + "'"));
  }
  const std::string etag = r.header("etag");
  if (!info.etag.empty() && !etag.empty() && etag != info.etag) {
    return Fail(Status::IOError(t.shown + ": the object changed since it was opened (ETag " +
                                info.etag + ", now " + etag + ")"));
  }
  *got = r.body_bytes;
  if (r.body_bytes == n) return Attempt();
  // A try that brought a few bytes only (a server that resets after ten,
  // every time) does not start the budget again.
  Attempt a =
      Retry("a reply cut short after " + std::to_string(r.body_bytes) + " of " + std::to_string(n) +
                " bytes" + (r.transport_error.empty() ? "" : " (" + r.transport_error + ")"),
            r.body_bytes >= std::min<size_t>(n, kProgressBytes));
  a.bytes = r.body_bytes;
  return a;
}

Status ObjectStore::GetRange(const Target& t, const ObjectInfo& info, uint64_t offset, size_t n,
                             char* dst, const std::atomic<bool>* abort) {
  size_t done = 0;
  return WithRetries(t.shown, abort, [&]() -> Attempt {
    const HttpResponse r =
        Perform(RangeRequest(t, info, offset + done, n - done, dst + done), abort);
    size_t got = 0;
    Attempt a = CheckRange(t, info, offset + done, n - done, r, &got);
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
    Attempt a = Judge(r, t.shown, where_);
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

// An object opened for ranged reads: its size and ETag taken once.
class ObjectFile final : public RandomAccessFile {
 public:
  ObjectFile(ObjectStore* store, Target t, ObjectInfo info)
      : store_(store), t_(std::move(t)), info_(std::move(info)), id_(store->NextFileId()) {}
  ~ObjectFile() override {
    aborted_->store(true);  // read-aheads still in flight: dropped
    store_->client().Wake();
    ReadAhead* a = store_->ahead();
    std::lock_guard<std::mutex> lock(a->mu);
    auto it = a->entries.lower_bound({id_, 0});
    while (it != a->entries.end() && it->first.first == id_) {
      const auto key = (it++)->first;
      a->Erase(key);
    }
  }
  const std::string& path() const override { return t_.shown; }
  uint64_t size() const override { return info_.size; }
  std::string version() const override { return info_.etag; }
  Status Read(uint64_t offset, size_t n, void* dst) const override;
  void WillNeed(uint64_t offset, size_t n) const override;
  void Abort() const override {
    aborted_->store(true);
    store_->client().Wake();
    ReadAhead* a = store_->ahead();
    { std::lock_guard<std::mutex> lock(a->mu); }
    a->cv.notify_all();
    store_->backoff_cv_.notify_all();
  }

 private:
  // Reads from a read-ahead entry, if one holds the range: true if done.
  bool ReadFromAhead(uint64_t offset, size_t n, char* dst) const;

  ObjectStore* const store_;
  const Target t_;
  const ObjectInfo info_;
  const uint64_t id_;
  // Shared with read-aheads in flight, which may end after the file closes.
  const std::shared_ptr<std::atomic<bool>> aborted_ = std::make_shared<std::atomic<bool>>(false);
};

Status ObjectFile::Read(uint64_t offset, size_t n, void* dst) const {
  if (offset > info_.size || n > info_.size - offset) {
    return Status::Corruption(t_.shown + ": read of " + std::to_string(n) + " bytes at offset " +
                              std::to_string(offset) + " is past its end (" +
                              std::to_string(info_.size) + " bytes)");
  }
  if (n == 0) return Status::OK();
  if (aborted_->load()) return Status::Aborted(t_.shown + ": read cancelled");
  if (ReadFromAhead(offset, n, static_cast<char*>(dst))) return Status::OK();
  return store_->GetRange(t_, info_, offset, n, static_cast<char*>(dst), aborted_.get());
}

bool ObjectFile::ReadFromAhead(uint64_t offset, size_t n, char* dst) const {
  ReadAhead* a = store_->ahead();
  std::unique_lock<std::mutex> lock(a->mu);
  auto it = a->Find(id_, offset, n);
  if (it == a->entries.end()) return false;
  const ReadAhead::Key key = it->first;
  std::shared_ptr<ReadAhead::Entry> e = it->second;
  a->cv.wait(lock, [&] { return e->state != ReadAhead::Entry::kReading || aborted_->load(); });
  if (e->state != ReadAhead::Entry::kReady) return false;  // read it directly (with retries)
  std::memcpy(dst, e->bytes.data() + (offset - key.second), n);
  e->used += n;
  if (e->used >= e->bytes.size()) {
    a->Erase(key);
  } else {
    a->Touch(e);
  }
  return true;
}

void ObjectFile::WillNeed(uint64_t offset, size_t n) const {
  const ObjectStoreOptions& o = store_->options();
  if (n == 0 || offset > info_.size || n > info_.size - offset || n > o.read_ahead_bytes / 4 ||
      aborted_->load()) {
    return;
  }
  ReadAhead* a = store_->ahead();
  std::lock_guard<std::mutex> lock(a->mu);
  if (auto it = a->Find(id_, offset, n); it != a->entries.end()) return a->Touch(it->second);
  if (a->reading >= o.read_ahead_requests || !a->MakeRoom(n, o.read_ahead_bytes)) return;
  const ReadAhead::Key key{id_, offset};
  if (a->entries.count(key) > 0) return;  // a shorter range at the same offset: leave it
  auto e = std::make_shared<ReadAhead::Entry>();
  e->bytes.resize(n);
  e->lru = a->lru.insert(a->lru.end(), key);
  a->entries.emplace(key, e);
  a->held += n;
  a->reading++;
  auto call = std::make_shared<HttpCall>();
  call->request = store_->RangeRequest(t_, info_, offset, n, e->bytes.data());
  ObjectStore* store = store_;
  // The file may be closed before the transfer ends: the callback keeps
  // its own copy of what it checks the reply against.
  auto target = std::make_shared<std::pair<Target, ObjectInfo>>(t_, info_);
  store_->client().Start(
      call,
      [store, a, e, key, target, aborted = aborted_](HttpCall& c) {
        (void)aborted;  // held: the transfer thread looks at it until this runs
        store->Count(c.response);
        size_t got = 0;
        const Attempt v = store->CheckRange(target->first, target->second, key.second,
                                            e->bytes.size(), c.response, &got);
        std::lock_guard<std::mutex> lock(a->mu);
        a->reading--;
        e->state =
            v.verdict == Attempt::kDone ? ReadAhead::Entry::kReady : ReadAhead::Entry::kFailed;
        auto it = a->entries.find(key);
        if (e->state == ReadAhead::Entry::kFailed && it != a->entries.end() && it->second == e) {
          a->Erase(key);
        }
        a->cv.notify_all();
      },
      aborted_.get());
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
  const std::string sha = md5_signed ? "UNSIGNED-PAYLOAD" : sigv4::Sha256Hex(body);
  SK_RETURN_IF_ERROR(WithRetries(t.shown, nullptr, [&]() -> Attempt {
    HttpRequest q;
    q.method = method;
    q.body = body;
    q.max_body = 16 << 20;
    q.headers = headers;
    Sign(t, &q, query, sha);
    HttpResponse r = Perform(q, nullptr);
    Attempt a = Judge(r, t.shown, where_);
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

// The XML entities S3 escapes in keys.
std::string XmlText(std::string s) {
  const std::pair<const char*, const char*> entities[] = {
      {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&apos;", "'"}, {"&amp;", "&"}};
  for (const auto& [from, to] : entities) {
    for (size_t i = 0; (i = s.find(from, i)) != std::string::npos; i += std::strlen(to)) {
      s.replace(i, std::strlen(from), to);
    }
  }
  return s;
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
// Close completes it (an upload abandoned is aborted).
class ObjectWritableFile final : public WritableFile {
 public:
  static constexpr size_t kPartsInFlight = 4;
  ObjectWritableFile(ObjectStore* store, Target t) : store_(store), t_(std::move(t)) {}
  ~ObjectWritableFile() override {
    WaitParts(0).IgnoreError();
    if (!upload_id_.empty()) {  // never completed (Close clears it once it is)
      store_->Call(t_, "DELETE", {{"uploadId", upload_id_}}, {}, {}).status().IgnoreError();
    }
  }
  const std::string& path() const override { return t_.shown; }
  Status Sync() override { return Status::OK(); }
  Status Close() override {
    if (closed_) return status_;
    closed_ = true;
    status_ = Finish();
    buffer_ = std::string();
    return status_;
  }

 protected:
  // Parts are sent as they fill, once a byte past them arrives (the last
  // part, 1 byte to a whole part, goes at Close); no byte is copied twice.
  Status AppendBytes(const char* data, size_t n) override {
    if (closed_) return Status::IOError(t_.shown + ": append after close");
    while (n > 0) {
      if (buffer_.size() == kObjectPartBytes) {
        SK_RETURN_IF_ERROR(UploadPart(std::move(buffer_)));
        buffer_ = std::string();
      }
      if (buffer_.capacity() < kObjectPartBytes) buffer_.reserve(kObjectPartBytes);
      const size_t take = std::min(n, kObjectPartBytes - buffer_.size());
      buffer_.append(data, take);
      data += take;
      n -= take;
    }
    return Status::OK();
  }

 private:
  // Sends `body` with its MD5 (signed, as Content-MD5: the payload's
  // integrity, so it is not hashed a second time) and checks the ETag S3
  // answers with. The MD5 is left in *md5.
  Status Put(const ObjectStore::Query& query, std::string_view body, std::string* md5) const {
    *md5 = sigv4::Md5(body);
    SK_ASSIGN_OR_RETURN(HttpResponse r, store_->Call(t_, "PUT", query, body,
                                                     {"Content-MD5: " + sigv4::Base64(*md5)}));
    const std::string etag = r.header("etag");
    if (etag != "\"" + sigv4::Hex(*md5) + "\"") {
      return Status::IOError(t_.shown + ": the server stored " + std::to_string(body.size()) +
                             " bytes as ETag " + etag + ", not the MD5 sent (" + sigv4::Hex(*md5) +
                             ")");
    }
    return Status::OK();
  }
  // Starts sending the next part in the background (after the oldest of
  // kPartsInFlight ended); the first error of any part is returned, then.
  Status UploadPart(std::string part) {
    if (upload_id_.empty()) {
      SK_ASSIGN_OR_RETURN(HttpResponse r, store_->Call(t_, "POST", {{"uploads", ""}}, {}, {}));
      upload_id_ = XmlText(XmlField(r.body, "UploadId"));
      if (upload_id_.empty())
        return Status::IOError(t_.shown + ": no UploadId in the server's reply");
    }
    SK_RETURN_IF_ERROR(WaitParts(kPartsInFlight - 1));
    const size_t i = parts_.size();
    parts_.emplace_back();
    auto sending = std::make_unique<Sending>();
    Sending* p = sending.get();
    p->body = std::move(part);
    p->thread = std::thread([this, p, i] {
      p->status = Put({{"partNumber", std::to_string(i + 1)}, {"uploadId", upload_id_}}, p->body,
                      &parts_[i]);
    });
    sending_.push_back(std::move(sending));
    return Status::OK();
  }
  // Waits until at most `keep` parts are in flight: the first error, if any.
  Status WaitParts(size_t keep) {
    Status first;
    while (sending_.size() > keep) {
      sending_.front()->thread.join();
      if (first.ok()) first = sending_.front()->status;
      sending_.pop_front();
    }
    if (!first.ok() && parts_status_.ok()) parts_status_ = first;
    return parts_status_;
  }
  Status Finish() {
    std::string md5;
    if (upload_id_.empty()) return Put({}, buffer_, &md5);
    if (!buffer_.empty()) SK_RETURN_IF_ERROR(UploadPart(std::move(buffer_)));
    SK_RETURN_IF_ERROR(WaitParts(0));
    std::string xml = "<CompleteMultipartUpload>";
    for (size_t i = 0; i < parts_.size(); ++i) {
      xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>\"" +
             sigv4::Hex(parts_[i]) + "\"</ETag></Part>";
    }
    xml += "</CompleteMultipartUpload>";
    SK_ASSIGN_OR_RETURN(HttpResponse r,
                        store_->Call(t_, "POST", {{"uploadId", upload_id_}}, xml, {}));
    upload_id_.clear();  // complete: nothing to abort
    const std::string got = XmlText(XmlField(r.body, "ETag"));
    const std::string want = ObjectETag::OfParts({parts_.begin(), parts_.end()});
    if (!got.empty() && got != want) {
      return Status::IOError(t_.shown + ": the completed upload's ETag is " + got + ", not " +
                             want);
    }
    return Status::OK();
  }

  struct Sending {
    std::string body;
    std::thread thread;
    Status status;
  };
  ObjectStore* const store_;
  const Target t_;
  std::string buffer_, upload_id_;
  // The parts' MD5s (S3 answered each with it as its ETag); a deque, so
  // that a part's thread writes its own element while the next parts are added.
  std::deque<std::string> parts_;
  std::deque<std::unique_ptr<Sending>> sending_;  // oldest first
  Status parts_status_;                           // the first part that failed
  bool closed_ = false;
  Status status_;
};

Result<std::unique_ptr<WritableFile>> ObjectStore::NewWritableFile(const std::string& path) {
  SK_RETURN_IF_ERROR(WritableStore(path));
  SK_ASSIGN_OR_RETURN(Target t, Resolve(path));
  return std::unique_ptr<WritableFile>(new ObjectWritableFile(this, std::move(t)));
}

}  // namespace

void ObjectETag::Update(std::string_view data) {
  size_ += data.size();
  while (!data.empty()) {
    if (in_part_ == kObjectPartBytes) {  // a full part, and more bytes: the next part
      md5s_.push_back(part_.Finish());
      in_part_ = 0;
    }
    const size_t take = std::min(data.size(), kObjectPartBytes - in_part_);
    part_.Update(data.substr(0, take));
    in_part_ += take;
    data.remove_prefix(take);
  }
}

std::string ObjectETag::Finish() {
  std::vector<std::string> md5s = std::move(md5s_);
  md5s.push_back(part_.Finish());
  md5s_.clear();
  in_part_ = 0;
  size_ = 0;
  return OfParts(md5s);
}

std::string ObjectETag::OfParts(const std::vector<std::string>& part_md5s) {
  if (part_md5s.size() == 1) return "\"" + sigv4::Hex(part_md5s[0]) + "\"";
  std::string all;
  for (const std::string& m : part_md5s) all += m;
  return "\"" + sigv4::Hex(sigv4::Md5(all)) + "-" + std::to_string(part_md5s.size()) + "\"";
}

bool IsObjectStoreUrl(const std::string& path) {
  return path.rfind("s3://", 0) == 0 || path.rfind("http://", 0) == 0 ||
         path.rfind("https://", 0) == 0;
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

Result<Env*> Env::ForPath(const std::string& path) {
  if (IsObjectStoreUrl(path)) return ObjectStoreEnvFor(path);
  return Env::Default();
}

}  // namespace shardkit
