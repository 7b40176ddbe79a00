// SigV4: canonical request, string to sign, signing key.
#include "storage/remote/sigv4.h"

#include <algorithm>
#include <cctype>

#include "storage/remote/digest.h"

namespace shardkit {
namespace sigv4 {
namespace {

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
                       digest::Sha256Hex(out.canonical_request);
  std::string key = digest::HmacSha256("AWS4" + c.secret_access_key, date);
  key = digest::HmacSha256(key, region);
  key = digest::HmacSha256(key, service);
  key = digest::HmacSha256(key, "aws4_request");
  const std::string sig = digest::HmacSha256(key, out.string_to_sign);
  out.signature = digest::Hex(sig);

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
