// The sources of the AWS credential chain (credentials.h), each a
// CredentialSource, and the parsers of what they answer (unit-tested
// without a server). Internal to storage/remote/.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "storage/remote/credentials.h"
#include "storage/remote/http_client.h"

namespace shardkit {

// Keys that do not expire: from the environment, or given.
std::unique_ptr<CredentialSource> FixedKeys(sigv4::Credentials keys, std::string describe);
// The profile's keys in the shared credentials or config file, read again
// at every fetch (a user who rotates keys in the file is followed).
std::unique_ptr<CredentialSource> ProfileKeys(std::string profile, std::string describe);
// credential_process: the command (split as a POSIX shell splits words, run
// without a shell) prints {"Version": 1, "AccessKeyId", "SecretAccessKey",
// "SessionToken", "Expiration"} on stdout; it is given 2 minutes.
std::unique_ptr<CredentialSource> ProcessCredentials(std::string command, std::string describe);

// Where STS requests go and how they are sent.
struct StsEndpoint {
  std::string url;   // scheme://host[:port][/path]
  std::string from;  // where the setting came from
  std::string region;
  std::shared_ptr<HttpClient> http;
};
struct RoleRequest {
  std::string role_arn, session_name, external_id;
  int duration_s = 3600;
};
// STS AssumeRole, signed with the credentials of `source` (another profile's
// or the environment's, refreshed by their own cache).
std::unique_ptr<CredentialSource> AssumeRole(StsEndpoint sts, RoleRequest role,
                                             std::shared_ptr<CredentialCache> source,
                                             std::string describe);
// STS AssumeRoleWithWebIdentity (unsigned), the token read from `token_file`
// at every fetch (EKS rotates it).
std::unique_ptr<CredentialSource> WebIdentity(StsEndpoint sts, RoleRequest role,
                                              std::string token_file, std::string describe);
// IAM Identity Center: the access token `aws sso login` cached
// (~/.aws/sso/cache/SHA1(session name or start URL).json), then the portal's
// GetRoleCredentials for the account and role.
struct SsoProfile {
  std::string cache_key;  // the sso-session's name, or the start URL (legacy profiles)
  std::string cache_dir;  // ~/.aws/sso/cache
  std::string account_id, role_name;
  std::string portal;  // https://portal.sso.REGION.amazonaws.com, or the configured endpoint
  std::string profile;
};
std::unique_ptr<CredentialSource> SsoCredentials(SsoProfile sso, std::shared_ptr<HttpClient> http,
                                                 std::string describe);
// ECS/EKS container credentials: a GET of `url`, with the token (read from
// `token_file` at every fetch where one is named) as its Authorization.
std::unique_ptr<CredentialSource> ContainerCredentials(std::string url, std::string token,
                                                       std::string token_file,
                                                       std::shared_ptr<HttpClient> http,
                                                       std::string describe);
// EC2 instance metadata: IMDSv2 (a session token first, falling back to
// IMDSv1 where the token request is refused, unless v1 is disabled), the
// role's name, then its credentials. `timeout_ms` and `attempts` bound
// each request (an endpoint that is not there is given up at once).
struct ImdsSettings {
  std::string endpoint = "http://169.254.169.254";
  long timeout_ms = 1000;
  int attempts = 1;
  bool v1_disabled = false;
};
std::unique_ptr<CredentialSource> InstanceMetadata(ImdsSettings imds,
                                                   std::shared_ptr<HttpClient> http);
// The first of `sources` that answers, used from then on; none: an error
// listing where it looked (`looked` and each source's reason).
std::unique_ptr<CredentialSource> FirstThatAnswers(
    std::vector<std::unique_ptr<CredentialSource>> sources, std::string looked);

// Parsers, for the sources above and their tests.
// "2026-11-29T07:32:58Z", with fractions of a second, a +HH:MM offset, or
// a "UTC" suffix: seconds since the epoch.
Result<std::time_t> ParseIso8601(const std::string& s);
// The JSON the container and instance-metadata endpoints and
// credential_process answer ({"AccessKeyId", "SecretAccessKey", "Token" or
// "SessionToken", "Expiration"}); errors name `what`.
Result<AwsCredentials> ParseCredentialsJson(const std::string& body, const std::string& what);
// The <Credentials> of an STS reply (AssumeRole, AssumeRoleWithWebIdentity).
Result<AwsCredentials> ParseStsCredentials(const std::string& xml, const std::string& what);
// Words as a POSIX shell splits them (quotes, backslashes), without
// expanding anything; an unterminated quote is an error.
Result<std::vector<std::string>> SplitCommandLine(const std::string& line);

}  // namespace shardkit
