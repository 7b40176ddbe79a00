// AWS credentials the way the SDKs find them, and kept fresh.
//
// ResolveCredentials walks the SDKs' default chain, in their order, and
// takes the first source that applies:
//   1. the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
//      AWS_SESSION_TOKEN;
//   2. the profile (AWS_PROFILE, AWS_DEFAULT_PROFILE, "default"; see
//      aws_config.h): role_arn with source_profile or credential_source (STS
//      AssumeRole), web_identity_token_file (AssumeRoleWithWebIdentity),
//      IAM Identity Center (sso_session or sso_start_url: the token
//      `aws sso login` cached, then the portal's role credentials), keys in
//      the credentials file, credential_process, keys in the config file;
//   3. web identity from the environment: AWS_WEB_IDENTITY_TOKEN_FILE and
//      AWS_ROLE_ARN (EKS);
//   4. container credentials: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or
//      _FULL_URI, with AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE) (ECS, EKS
//      Pod Identity);
//   5. EC2 instance metadata, IMDSv2 (a token first; AWS_EC2_METADATA_DISABLED,
//      AWS_EC2_METADATA_SERVICE_ENDPOINT).
// Resolving reads files only; the first network request (STS, a metadata
// endpoint) happens when credentials are first needed.
//
// Temporary credentials (all but static keys) carry their expiration: a
// CredentialCache hands out the current ones to every request of the
// process and fetches new ones before they expire, in the background, so
// that no request waits for it while the old ones are good; a request the
// server refused for its credentials (ExpiredToken, InvalidAccessKeyId)
// asks for new ones once (Refresh). The cache survives fork: a child (a
// PyTorch DataLoader worker) refreshes on its own.
//
// Nothing here puts a secret (key, token) into a message.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "storage/remote/aws_config.h"
#include "storage/remote/sigv4.h"

namespace shardkit {

struct HttpClientOptions;

struct AwsCredentials {
  sigv4::Credentials keys;
  // When they stop working (seconds since the epoch, UTC); 0: never.
  std::time_t expiration = 0;
  // Which fetch of a CredentialCache they came from (set by the cache).
  uint64_t generation = 0;
};

// One source of credentials.
class CredentialSource {
 public:
  virtual ~CredentialSource() = default;
  // Fetches credentials now (a file read, a process run, a request). An
  // error names the source and why.
  virtual Result<AwsCredentials> Fetch() = 0;
  // Where credentials come from, for messages: "the environment
  // (AWS_ACCESS_KEY_ID)", "EC2 instance metadata (role R)". Never a secret.
  virtual std::string Describe() const = 0;
};

// Walks the chain above for `config`'s profile and returns the first source
// that applies. An error is a setting that cannot work (half a key pair, a
// role without a source, a credential_source of another name). Finding
// nothing is not an error here: the source returned then fails its fetch
// with a message that says where it looked (and that AWS_NO_SIGN_REQUEST=1
// reads a public bucket). Instance metadata, the last resort, is asked at
// the first fetch only. `http`: the TLS settings (CA bundle, verification)
// for STS, IAM Identity Center and the metadata endpoints.
Result<std::unique_ptr<CredentialSource>> ResolveCredentials(const Environ& env,
                                                             const AwsConfig& config,
                                                             const Setting& region,
                                                             const HttpClientOptions& http);

// The current credentials of a source, fetched again before they expire.
// Thread-safe; used by every request of a process. Always held by a
// shared_ptr (Make): a background fetch keeps it alive until it ends.
class CredentialCache : public std::enable_shared_from_this<CredentialCache> {
 public:
  static std::shared_ptr<CredentialCache> Make(std::unique_ptr<CredentialSource> source);
  ~CredentialCache();
  CredentialCache(const CredentialCache&) = delete;
  CredentialCache& operator=(const CredentialCache&) = delete;

  // The credentials to sign with now. They are fetched on the first call,
  // and again, in the background, once they are within the advisory
  // margin of their expiration (min(15 min, half their lifetime)); within
  // the mandatory margin (min(10 min, a quarter of it)) or past it, the
  // call waits for new ones. An error: the fetch failed and there are no
  // usable credentials.
  Result<std::shared_ptr<const AwsCredentials>> Get();
  // The server refused `used` for their credentials: fetches them again
  // now (a file re-read for static keys, a request for temporary ones),
  // unless another fetch ended since `used` were handed out. *renewed:
  // whether the keys now differ from `used` (worth sending the request
  // again).
  Result<std::shared_ptr<const AwsCredentials>> Refresh(const AwsCredentials& used, bool* renewed);
  bool temporary() const;
  std::string Describe() const { return source_->Describe(); }
  // Fetches so far (for tests and stats).
  uint64_t fetches() const { return fetches_.load(); }

  // The system clock, replaceable by tests (seconds since the epoch).
  std::function<std::time_t()> now = [] { return std::time(nullptr); };

 private:
  explicit CredentialCache(std::unique_ptr<CredentialSource> source);
  // Fetches (or waits for the fetch running) with mu_ held by `lock`,
  // released while the source works.
  Status FetchLocked(std::unique_lock<std::mutex>& lock);
  void StartBackgroundFetch();
  static void AtForkPrepare();
  static void AtForkParent();
  static void AtForkChild();

  const std::unique_ptr<CredentialSource> source_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<const AwsCredentials> current_;  // under mu_
  std::time_t fetched_at_ = 0;                     // under mu_: when current_ came
  std::time_t next_background_ = 0;                // under mu_: no background fetch before
  bool fetching_ = false;                          // under mu_: a fetch is running
  uint64_t generation_ = 0;                        // under mu_: fetches that succeeded
  std::atomic<uint64_t> fetches_{0};
};

}  // namespace shardkit
