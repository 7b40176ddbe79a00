// Digests, as object storage needs them: SHA-256 (SigV4, payload checksums,
// the node cache's names), HMAC-SHA-256 (SigV4's keys), MD5 (S3's Content-MD5
// and ETags), and their encodings. Over OpenSSL's libcrypto.
#pragma once

#include <string>
#include <string_view>

namespace shardkit {
namespace digest {

// Lower-case hex SHA-256 of `data`; the raw 32 bytes.
std::string Sha256Hex(std::string_view data);
std::string Sha256(std::string_view data);
// The raw SHA-1 of `data` (20 bytes): only where a format names files by it
// (the IAM Identity Center token cache).
std::string Sha1(std::string_view data);
// HMAC-SHA-256 of `data` under `key` (32 bytes).
std::string HmacSha256(std::string_view key, std::string_view data);
// The MD5 of `data` (16 bytes), as S3 checks uploads with it (Content-MD5)
// and names single-part objects by it (their ETag), and its encodings.
std::string Md5(std::string_view data);
// The same, over data given in pieces (no copy of it is kept).
class Md5Stream {
 public:
  Md5Stream();
  ~Md5Stream();
  Md5Stream(const Md5Stream&) = delete;
  Md5Stream& operator=(const Md5Stream&) = delete;
  void Update(std::string_view data);
  std::string Finish();  // 16 bytes; the stream starts again, empty
 private:
  void* ctx_;  // EVP_MD_CTX
};
std::string Hex(std::string_view bytes);     // lower-case
std::string Base64(std::string_view bytes);  // standard, padded

}  // namespace digest
}  // namespace shardkit
