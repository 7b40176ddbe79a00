// The object-storage Env (s3:// and http(s)://): URL resolution, where each
// request goes and how it is signed, requests with retries, listings and
// removals; its files are object_file.cc's (ranged reads, read-ahead) and
// object_upload.cc's (uploads). Internal to storage/remote/;
// storage/remote/object_store.h is what the rest of shardkit sees.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
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

// What a request is about, and how it is named to the user.
struct Target {
  std::string shown;          // the URL as the user wrote it, less any password
  std::string bucket, key;    // S3 (key unencoded; "" for the bucket itself)
  std::string url;            // HTTP(S): what is requested (percent-encoded, no user:password)
  std::string user_password;  // HTTP(S): the URL's user:password, sent as basic authentication
};

// One try of a request, as sent: the credentials it was signed with (null:
// unsigned) and the region it was signed for.
struct SentAs {
  std::shared_ptr<const AwsCredentials> credentials;
  std::string region;
};

class ObjectStore final : public Env {
 public:
  using Query = std::vector<std::pair<std::string, std::string>>;
  ObjectStore(const ObjectStoreOptions& o, bool s3);

  Result<std::unique_ptr<RandomAccessFile>> OpenForReads(const std::string& path,
                                                         const Cancel* cancel) override;
  bool FileExists(const std::string& path) override;
  Result<std::string> ReadFile(const std::string& path, uint64_t max_size,
                               const Cancel* cancel) override;
  bool remote() const override { return true; }
  // Writing (S3 only; a web server is read here, never written).
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  Status RemoveFile(const std::string& path) override;
  Status CreateDirs(const std::string& dir) override { return WritableStore(dir); }
  Status SyncDir(const std::string& dir) override { return WritableStore(dir); }
  Result<std::vector<std::string>> ListDir(const std::string& dir) override;
  StorageCounters counters() const override {
    StorageCounters c;
    c.requests = requests_.load();
    c.bytes = bytes_.load();
    c.retries = retries_.load();
    return c;
  }

  // One request with retries: a 2xx reply (S3's "200 with an error"
  // refused). `headers` are sent and signed; the body's SHA-256 is signed.
  Result<HttpResponse> Call(const Target& t, const std::string& method, const Query& query,
                            std::string_view body, const std::vector<std::string>& headers,
                            const std::atomic<bool>* abort = nullptr);
  // Unfinished multipart uploads under s3://BUCKET/PREFIX (key, upload id).
  Result<std::vector<std::pair<std::string, std::string>>> ListUploads(const std::string& prefix);

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
  // A GET of [offset, offset + n) into dst, with the object pinned, ready
  // to send (located and signed as *sent says).
  Result<HttpRequest> RangeRequest(const Target& t, const ObjectInfo& info, uint64_t offset,
                                   size_t n, char* dst, SentAs* sent);
  // Sets q->url (with `query`) and, for S3, the Host header and the
  // signature over the method, the path, `query`, q->headers and the
  // payload's SHA-256, for the bucket's region; *sent says how. An error:
  // no credentials could be had.
  Status Prepare(const Target& t, HttpRequest* q, const Query& query,
                 const std::string& payload_sha256, SentAs* sent);
  // Where `t` is, whatever the addressing and region: the endpoint, the
  // bucket and the key (S3), or the URL without a password (HTTP).
  std::string Location(const Target& t) const {
    return s3_ ? o_.endpoint + "/" + t.bucket + "/" + t.key : t.url;
  }
  // How replies about `t` are described (the endpoint, the credentials'
  // source, the region).
  ReplyContext Context(const Target& t) const;

  ReadAhead* ahead();
  HttpClient& client() { return client_; }
  const ObjectStoreOptions& options() const { return o_; }
  uint64_t NextFileId() { return next_file_.fetch_add(1); }
  // Wakes every backoff wait, so that an aborted request ends now.
  void WakeBackoffs() { backoff_cv_.notify_all(); }

 private:
  // Tries `once` until it is done or fails for good, or the retry budget
  // is spent; waits (backoff with full jitter) between tries. A reply that
  // refused the credentials is sent again once with fresh ones (when they
  // are new); one that names another region for the bucket, once to it.
  Status WithRetries(const Target& t, const std::atomic<bool>* abort,
                     const std::function<Attempt(SentAs*)>& once);
  // The region the bucket's requests are signed for: learnt from S3, else
  // the configured one.
  std::string RegionOf(const std::string& bucket) const;
  // The bucket's region as S3 names it (x-amz-bucket-region of a HEAD of
  // the bucket), "" if it does not say.
  std::string DiscoverRegion(const Target& t);
  bool Virtual(const std::string& bucket) const;

  const ObjectStoreOptions o_;
  const bool s3_;
  std::string scheme_, host_, base_path_;  // of the endpoint (S3)
  HttpClient client_;
  mutable std::mutex regions_mu_;
  std::map<std::string, std::string> regions_;  // learnt: bucket -> region
  std::atomic<ReadAhead*> ahead_{nullptr};
  std::atomic<uint64_t> next_file_{1};
  std::atomic<uint64_t> requests_{0}, bytes_{0}, retries_{0};
  std::mutex backoff_mu_;
  std::condition_variable backoff_cv_;  // woken by an abort
};

}  // namespace shardkit
