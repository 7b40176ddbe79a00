// SigV4: canonical request, string to sign, signing key, with OpenSSL's
// SHA-256 and HMAC.
#include "base/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>

namespace shardkit {
namespace sigv4 {
namespace {

std::string HexOf(const unsigned char* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '\0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

std::string Hmac(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &n);
  return std::string(reinterpret_cast<const char*>(out), n);
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Leading and trailing spaces off, inner runs of spaces collapsed to one.
std::string Trim(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

}  // namespace

std::string Md5(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_md5(), nullptr);
  return std::string(reinterpret_cast<const char*>(md), n);
}

Md5Stream::Md5Stream() : ctx_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_md5(), nullptr);
}

Md5Stream::~Md5Stream() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Md5Stream::Update(std::string_view data) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data.data(), data.size());
}

std::string Md5Stream::Finish() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_MD_CTX* ctx = static_cast<EVP_MD_CTX*>(ctx_);
  EVP_DigestFinal_ex(ctx, md, &n);
  EVP_DigestInit_ex(ctx, EVP_md5(), nullptr);
  return std::string(reinterpret_cast<const char*>(md), n);
}

std::string Hex(std::string_view bytes) {
  return HexOf(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

std::string Base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  return HexOf(md, n);
}

std::string UriEncode(std::string_view s, bool encode_slash) {
  static const char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (c == '/' && !encode_slash)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kDigits[c >> 4];
      out += kDigits[c & 15];
    }
  }
  return out;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  for (const auto& [k, v] : query) enc.emplace_back(UriEncode(k, true), UriEncode(v, true));
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out += '&';
    out += k + "=" + v;
  }
  return out;
}

Signed Sign(const Request& r, const Credentials& c, const std::string& region, std::time_t when,
            const std::string& service) {
  std::tm tm{};
  gmtime_r(&when, &tm);
  char amz_date[32], date[16];
  std::strftime(amz_date, sizeof(amz_date), "%Y%m%dT%H%M%SZ", &tm);
  std::strftime(date, sizeof(date), "%Y%m%d", &tm);

  std::vector<std::pair<std::string, std::string>> headers;
  headers.emplace_back("host", Trim(r.host));
  headers.emplace_back("x-amz-content-sha256", r.payload_sha256);
  headers.emplace_back("x-amz-date", amz_date);
  if (!c.session_token.empty()) headers.emplace_back("x-amz-security-token", c.session_token);
  for (const auto& [k, v] : r.headers) headers.emplace_back(Lower(k), Trim(v));
  std::sort(headers.begin(), headers.end());

  std::string canonical_headers, signed_headers;
  for (const auto& [k, v] : headers) {
    canonical_headers += k + ":" + v + "\n";
    signed_headers += (signed_headers.empty() ? "" : ";") + k;
  }
  Signed out;
  out.canonical_request = r.method + "\n" + r.encoded_path + "\n" + CanonicalQuery(r.query) + "\n" +
                          canonical_headers + "\n" + signed_headers + "\n" + r.payload_sha256;
  const std::string scope = std::string(date) + "/" + region + "/" + service + "/aws4_request";
  out.string_to_sign = std::string("AWS4-HMAC-SHA256\n") + amz_date + "\n" + scope + "\n" +
                       Sha256Hex(out.canonical_request);
  std::string key = Hmac("AWS4" + c.secret_access_key, date);
  key = Hmac(key, region);
  key = Hmac(key, service);
  key = Hmac(key, "aws4_request");
  const std::string sig = Hmac(key, out.string_to_sign);
  out.signature = HexOf(reinterpret_cast<const unsigned char*>(sig.data()), sig.size());

  out.headers.push_back(std::string("x-amz-date: ") + amz_date);
  out.headers.push_back("x-amz-content-sha256: " + r.payload_sha256);
  if (!c.session_token.empty()) out.headers.push_back("x-amz-security-token: " + c.session_token);
  out.headers.push_back("Authorization: AWS4-HMAC-SHA256 Credential=" + c.access_key_id + "/" +
                        scope + ", SignedHeaders=" + signed_headers +
                        ", Signature=" + out.signature);
  return out;
}

}  // namespace sigv4
}  // namespace shardkit
