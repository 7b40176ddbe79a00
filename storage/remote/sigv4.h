// AWS Signature Version 4 for S3 and STS requests (path-style or virtual-hosted), written
// here rather than through curl's CURLOPT_AWS_SIGV4, which on Debian's curl
// 7.88 neither sends x-amz-content-sha256 nor encodes keys and query strings
// as S3 canonicalises them. Pure functions: no clock, no I/O; the caller
// passes the time. Checked against botocore's signer (tests/storage/sigv4_test.cc).
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardkit {
namespace sigv4 {

// SHA-256 of the empty string: the payload hash of a GET or HEAD.
inline constexpr char kEmptyPayloadSha256[] =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
// RFC 3986 percent-encoding as SigV4 wants it: A-Z a-z 0-9 - _ . ~ kept,
// every other byte %XX (upper-case hex); '/' kept unless encode_slash.
std::string UriEncode(std::string_view s, bool encode_slash);

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // temporary credentials: sent as x-amz-security-token
};

struct Request {
  std::string method = "GET";
  std::string host;  // as the Host header will carry it: "127.0.0.1:7480", "s3.amazonaws.com"
  // The path as sent, already percent-encoded (UriEncode(path, false)):
  // S3 signs it as is, without normalising "." or "//".
  std::string encoded_path = "/";
  std::vector<std::pair<std::string, std::string>> query;  // raw names and values
  // Headers besides host, x-amz-date, x-amz-content-sha256 and
  // x-amz-security-token that should be signed (names in any case).
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_sha256 = kEmptyPayloadSha256;  // or "UNSIGNED-PAYLOAD"
};

struct Signed {
  // Headers to send, as "Name: value" lines: x-amz-date,
  // x-amz-content-sha256, x-amz-security-token if any, Authorization.
  std::vector<std::string> headers;
  std::string canonical_request;  // for tests and debugging
  std::string string_to_sign;
  std::string signature;
};

// The query string as sent and as signed: sorted by encoded name, then value.
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);

// Signs `r` for service "s3" in `region` at `when` (UTC seconds since the epoch).
Signed Sign(const Request& r, const Credentials& c, const std::string& region, std::time_t when,
            const std::string& service = "s3");

}  // namespace sigv4
}  // namespace shardkit
