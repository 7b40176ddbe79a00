// Object storage behind the storage seam (storage/env.h): datasets at
// s3://BUCKET/PREFIX (S3 or any S3-compatible server, requests
// signed with SigV4) and http(s)://HOST/PATH (any server that answers ranged
// GETs: nginx, a CDN, a bucket's public URL), read with ranged GETs over
// libcurl (storage/remote/http_client.h).
//
// What is read is what was written, or an error: each object's size and
// ETag are taken once, at open (HEAD), never per record; every GET is sent
// with If-Match (an object replaced while it is read is an error naming
// it) and its status and Content-Range are checked; a body cut short is
// resumed from its first missing byte. 429, 5xx, S3's SlowDown and
// RequestTimeout, resets and stalled transfers are retried with exponential
// backoff and full jitter for up to retry.retry_seconds per request (the default
// rides out two minutes of throttling), then fail with one line naming the
// URL, the status and the server's message. Other replies (403, 404, 412)
// fail at once.
//
// Configuration comes from what AWS users already set (FromEnvironment), as
// the AWS SDKs read it (storage/remote/aws_config.h; docs/object_storage.md
// has the table):
//   endpoint    AWS_ENDPOINT_URL_S3, S3_ENDPOINT_URL, the profile's
//               [services] s3.endpoint_url, AWS_ENDPOINT_URL, the profile's
//               endpoint_url; else AWS's, https://s3.REGION.amazonaws.com
//   region      AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else
//               us-east-1; a bucket in another region is followed there
//               (S3's x-amz-bucket-region), re-signed, never to another host
//   addressing  the profile's s3.addressing_style (auto, path, virtual):
//               auto is virtual-hosted on AWS's endpoint for names DNS
//               takes, path-style elsewhere (custom endpoints)
//   credentials the SDKs' chain (storage/remote/credentials.h), refreshed
//               before they expire; AWS_NO_SIGN_REQUEST=1: unsigned requests
//               (public buckets)
//   TLS         AWS_CA_BUNDLE (or the profile's ca_bundle, CURL_CA_BUNDLE):
//               a CA file to trust; SHARDKIT_TLS_VERIFY=0 turns verification
//               off (test servers)
//   retries     SHARDKIT_RETRY_SECONDS (default 120), SHARDKIT_STALL_SECONDS
//               (a transfer with no byte for this long is retried; default 30)
//
// Every request's body is covered by the signature (its SHA-256), and so is
// every header S3 reads (Content-MD5, x-amz-*).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "storage/env.h"
#include "storage/remote/aws_config.h"
#include "storage/remote/credentials.h"
#include "storage/remote/digest.h"
#include "storage/remote/http_client.h"
#include "storage/remote/retry.h"
#include "storage/remote/sigv4.h"

namespace shardkit {

struct ObjectStoreOptions {
  HttpClientOptions http;
  // How long one request may be retried (storage/remote/retry.h).
  RetryOptions retry;
  // Reads started ahead by RandomAccessFile::WillNeed (the loader's
  // read-ahead), held until read: bytes at most over all files, and
  // requests in flight at most.
  uint64_t read_ahead_bytes = 256ull << 20;
  int read_ahead_requests = 64;

  // S3 only.
  std::string endpoint;         // scheme://host[:port][/path]
  std::string endpoint_source;  // where it came from, for messages
  // The endpoint is AWS's own (none was configured): each bucket's requests
  // go to its region's host, s3.REGION.amazonaws.com.
  bool aws_endpoint = false;
  std::string region = "us-east-1";
  std::string region_source = "the default";
  enum class Addressing { kAuto, kPath, kVirtual } addressing = Addressing::kAuto;
  // What requests are signed with; null: unsigned (AWS_NO_SIGN_REQUEST).
  std::shared_ptr<CredentialCache> credentials;

  // The options the environment (and the AWS config files it names) give; an
  // error names a setting whose value is unusable, and where it came from.
  static Result<ObjectStoreOptions> FromEnvironment();
  static Result<ObjectStoreOptions> FromEnvironment(const Environ& env);
};

// Objects of S3 are written in parts of this size (one PUT up to it, a
// multipart upload above it).
inline constexpr size_t kObjectPartBytes = 16 << 20;

// The ETag S3 gives an object written by this file's Env: the MD5 of its
// bytes, or of its parts' MD5s and "-N" for N parts of kObjectPartBytes; a
// publisher compares it with the one a HEAD answers to tell whether an
// object holds a file's bytes.
class ObjectETag {
 public:
  void Update(std::string_view data);
  // Quoted, as S3 answers it. Once: the tag starts again, empty.
  std::string Finish();
  uint64_t size() const { return size_; }
  // The ETag of an object sent in parts whose MD5s are these (16 bytes each).
  static std::string OfParts(const std::vector<std::string>& part_md5s);

 private:
  digest::Md5Stream part_;
  size_t in_part_ = 0;  // bytes of the current part
  std::vector<std::string> md5s_;
  uint64_t size_ = 0;
};

// A new Env for s3:// URLs (or http(s):// ones) with these options. It must
// outlive what is opened through it.
Result<std::unique_ptr<Env>> NewS3Env(const ObjectStoreOptions& options);
Result<std::unique_ptr<Env>> NewHttpEnv(const ObjectStoreOptions& options);

// Aborts the multipart uploads left unfinished under `prefix`
// (s3://BUCKET/PREFIX/) in `env` (an Env NewS3Env made, or ForPath gave):
// what a push killed before it could abort its own leaves. *aborted counts
// them. Another Env has none: OK.
Status AbortUnfinishedUploads(Env* env, const std::string& prefix, uint64_t* aborted);

// The process's Env for a URL's scheme, configured from the environment
// the first time it is asked for (Env::ForPath calls this).
Result<Env*> ObjectStoreEnvFor(const std::string& url);

}  // namespace shardkit
