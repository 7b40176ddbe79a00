// The object-storage Env (s3:// and http(s)://): URL resolution, signing,
// requests with retries, listings and removals; its files are object_file.cc's
// (ranged reads, read-ahead) and object_upload.cc's (uploads). Internal to
// storage/remote/; storage/remote/object_store.h is what the rest of shardkit sees.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "storage/env.h"
#include "storage/remote/http_client.h"
#include "storage/remote/object_store.h"
#include "storage/remote/read_ahead.h"
#include "storage/remote/retry.h"

namespace shardkit {

// Where a request goes, and how it is named to the user.
struct Target {
  std::string shown;         // the URL as the user wrote it
  std::string url;           // what is requested
  std::string host;          // S3: the Host header, as signed
  std::string encoded_path;  // S3: the path, as signed
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
    context_.where =
        s3 ? endpoint_ + ", from " + o.endpoint_source +
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
  ReadAhead* ahead();
  HttpClient& client() { return client_; }
  const ObjectStoreOptions& options() const { return o_; }
  const ReplyContext& context() const { return context_; }
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
  ReplyContext context_;  // for messages: the endpoint, where it came from, how requests are signed
  HttpClient client_;
  std::atomic<ReadAhead*> ahead_{nullptr};
  std::atomic<uint64_t> next_file_{1};
  std::atomic<uint64_t> requests_{0}, bytes_{0}, retries_{0};
  std::mutex backoff_mu_;
  std::condition_variable backoff_cv_;  // woken by an abort
  friend class ObjectFile;
};

}  // namespace shardkit
