// The chain's sources that ask an AWS service: STS AssumeRole and
// AssumeRoleWithWebIdentity, and IAM Identity Center's role credentials.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "base/clock.h"
#include "storage/env.h"
#include "storage/remote/credential_sources.h"
#include "storage/remote/digest.h"
#include "storage/remote/retry.h"

namespace shardkit {
namespace {

// The text of <tag>...</tag>, whole (session tokens run to kilobytes).
std::string XmlValue(const std::string& body, const std::string& tag) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  const size_t b = body.find(open);
  if (b == std::string::npos) return "";
  const size_t e = body.find(close, b + open.size());
  return e == std::string::npos ? "" : XmlText(body.substr(b + open.size(), e - b - open.size()));
}

// scheme://host[:port] and the path ("/" if none) of an endpoint URL.
void SplitEndpoint(const std::string& url, std::string* origin, std::string* host,
                   std::string* path) {
  const size_t scheme_end = url.find("://");
  const size_t host_at = scheme_end == std::string::npos ? 0 : scheme_end + 3;
  const size_t slash = url.find('/', host_at);
  *host = url.substr(host_at, slash == std::string::npos ? std::string::npos : slash - host_at);
  *origin = url.substr(0, host_at) + *host;
  *path = slash == std::string::npos ? "/" : url.substr(slash);
}

// A request with retries for what is worth another try (transport errors,
// 429, 5xx, Throttling), for up to 30 s; `sign` adds the signature.
Result<HttpResponse> StsPost(const StsEndpoint& sts, const std::string& body,
                             const sigv4::Credentials* keys, const std::string& what) {
  std::string origin, host, path;
  SplitEndpoint(sts.url, &origin, &host, &path);
  RetryOptions retry;
  retry.retry_seconds = 30;
  RetryBudget budget(retry, MonotonicNs());
  thread_local std::mt19937_64 rng(std::random_device{}());
  for (;;) {
    HttpRequest q;
    q.method = "POST";
    q.url = origin + path;
    q.body = body;
    q.max_body = 1 << 20;
    q.headers = {"Content-Type: application/x-www-form-urlencoded; charset=utf-8", "Host: " + host};
    if (keys != nullptr) {
      sigv4::Request r;
      r.method = "POST";
      r.host = host;
      r.encoded_path = path;
      r.headers = {{"content-type", "application/x-www-form-urlencoded; charset=utf-8"}};
      r.payload_sha256 = digest::Sha256Hex(body);
      const sigv4::Signed s = sigv4::Sign(r, *keys, sts.region, std::time(nullptr), "sts");
      q.headers.insert(q.headers.end(), s.headers.begin(), s.headers.end());
    }
    HttpResponse resp = sts.http->Perform(q);
    Attempt a;
    if (!resp.transport_error.empty()) {
      a = Retry(resp.transport_error);
      a.connect = resp.connect_failed;
    } else if (resp.status == 200) {
      return resp;
    } else {
      const std::string code = XmlValue(resp.body, "Code").substr(0, 100);
      const std::string message = XmlValue(resp.body, "Message").substr(0, 300);
      const std::string why = "HTTP " + std::to_string(resp.status) +
                              (code.empty() ? "" : " " + code) +
                              (message.empty() ? "" : ": " + message);
      if (!Retryable(resp.status, code) && code != "Throttling" &&
          code != "IDPCommunicationError") {
        return Status::IOError(what + ": " + why);
      }
      a = Retry(why);
    }
    const RetryBudget::Next next =
        budget.After(a, MonotonicNs(), std::uniform_real_distribution<double>(0, 1)(rng), what);
    if (next.give_up) return next.error;
    std::this_thread::sleep_for(std::chrono::duration<double>(next.wait_s));
  }
}

std::string Form(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out;
  for (const auto& [k, v] : fields) {
    if (v.empty()) continue;
    if (!out.empty()) out += '&';
    out += sigv4::UriEncode(k, true) + "=" + sigv4::UriEncode(v, true);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> RoleFields(const char* action,
                                                            const RoleRequest& role) {
  return {{"Action", action},
          {"Version", "2011-06-15"},
          {"RoleArn", role.role_arn},
          {"RoleSessionName", role.session_name},
          {"DurationSeconds", std::to_string(role.duration_s)}};
}

class AssumeRoleSource final : public CredentialSource {
 public:
  AssumeRoleSource(StsEndpoint sts, RoleRequest role, std::shared_ptr<CredentialCache> source,
                   std::string describe)
      : sts_(std::move(sts)),
        role_(std::move(role)),
        source_(std::move(source)),
        describe_(std::move(describe)) {}
  Result<AwsCredentials> Fetch() override {
    SK_ASSIGN_OR_RETURN(auto keys, source_->Get());
    auto fields = RoleFields("AssumeRole", role_);
    fields.push_back({"ExternalId", role_.external_id});
    auto r = StsPost(sts_, Form(fields), &keys->keys, describe_);
    if (!r.ok()) {
      // The source's keys may have been rotated under us: once more, with new ones.
      bool renewed = false;
      auto again = source_->Refresh(*keys, &renewed);
      if (!again.ok() || !renewed) return r.status();
      r = StsPost(sts_, Form(fields), &(*again)->keys, describe_);
      if (!r.ok()) return r.status();
    }
    return ParseStsCredentials(r->body, describe_);
  }
  std::string Describe() const override { return describe_; }

 private:
  const StsEndpoint sts_;
  const RoleRequest role_;
  const std::shared_ptr<CredentialCache> source_;
  const std::string describe_;
};

class WebIdentitySource final : public CredentialSource {
 public:
  WebIdentitySource(StsEndpoint sts, RoleRequest role, std::string token_file, std::string describe)
      : sts_(std::move(sts)),
        role_(std::move(role)),
        token_file_(std::move(token_file)),
        describe_(std::move(describe)) {}
  Result<AwsCredentials> Fetch() override {
    SK_ASSIGN_OR_RETURN(std::string token, Env::Default()->ReadFile(token_file_, 1 << 20));
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) {
      token.pop_back();
    }
    if (token.empty())
      return Status::InvalidArgument(token_file_ + ": an empty web identity token");
    auto fields = RoleFields("AssumeRoleWithWebIdentity", role_);
    fields.push_back({"WebIdentityToken", token});
    SK_ASSIGN_OR_RETURN(HttpResponse r, StsPost(sts_, Form(fields), nullptr, describe_));
    return ParseStsCredentials(r.body, describe_);
  }
  std::string Describe() const override { return describe_; }

 private:
  const StsEndpoint sts_;
  const RoleRequest role_;
  const std::string token_file_, describe_;
};

class SsoSource final : public CredentialSource {
 public:
  SsoSource(SsoProfile sso, std::shared_ptr<HttpClient> http, std::string describe)
      : sso_(std::move(sso)), http_(std::move(http)), describe_(std::move(describe)) {}
  Result<AwsCredentials> Fetch() override {
    SK_ASSIGN_OR_RETURN(std::string token, CachedToken());
    HttpRequest q;
    std::string portal = sso_.portal;
    while (!portal.empty() && portal.back() == '/') portal.pop_back();
    q.url = portal +
            "/federation/credentials?account_id=" + sigv4::UriEncode(sso_.account_id, true) +
            "&role_name=" + sigv4::UriEncode(sso_.role_name, true);
    q.headers.push_back("x-amz-sso_bearer_token: " + token);
    q.max_body = 1 << 20;
    HttpResponse r;
    for (int attempt = 0; attempt < 3; ++attempt) {
      r = http_->Perform(q);
      if (r.transport_error.empty() && r.status < 500 && r.status != 429) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200 << attempt));
    }
    if (!r.transport_error.empty()) return Status::IOError(describe_ + ": " + r.transport_error);
    if (r.status == 401 || r.status == 403) {
      return Status::IOError(describe_ + ": HTTP " + std::to_string(r.status) +
                             " (the IAM Identity Center session is no longer valid: run `aws sso "
                             "login --profile " +
                             sso_.profile + "`)");
    }
    if (r.status != 200) return Status::IOError(describe_ + ": HTTP " + std::to_string(r.status));
    const auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("roleCredentials") ||
        !j["roleCredentials"].is_object()) {
      return Status::InvalidArgument(describe_ + ": its answer has no roleCredentials");
    }
    const auto& c = j["roleCredentials"];
    AwsCredentials out;
    auto text = [&](const char* k) {
      return c.contains(k) && c[k].is_string() ? c[k].get<std::string>() : std::string();
    };
    out.keys.access_key_id = text("accessKeyId");
    out.keys.secret_access_key = text("secretAccessKey");
    out.keys.session_token = text("sessionToken");
    if (c.contains("expiration") && c["expiration"].is_number()) {
      out.expiration = static_cast<std::time_t>(c["expiration"].get<double>() / 1000);
    }
    if (out.keys.access_key_id.empty() || out.keys.secret_access_key.empty()) {
      return Status::InvalidArgument(describe_ +
                                     ": its answer has no accessKeyId and secretAccessKey");
    }
    return out;
  }
  std::string Describe() const override { return describe_; }

 private:
  // The access token `aws sso login` left, if it has not expired.
  Result<std::string> CachedToken() const {
    const std::string file =
        sso_.cache_dir + "/" + digest::Hex(digest::Sha1(sso_.cache_key)) + ".json";
    const std::string login = " (run `aws sso login --profile " + sso_.profile + "`)";
    auto text = Env::Default()->ReadFile(file, 1 << 20);
    if (!text.ok()) {
      return Status::NotFound(describe_ + ": no cached IAM Identity Center token (" + file + ")" +
                              login);
    }
    const auto j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("accessToken") ||
        !j["accessToken"].is_string()) {
      return Status::InvalidArgument(file + ": no accessToken in it" + login);
    }
    if (j.contains("expiresAt") && j["expiresAt"].is_string()) {
      auto at = ParseIso8601(j["expiresAt"].get<std::string>());
      if (!at.ok()) return Status::InvalidArgument(file + ": expiresAt " + at.status().message());
      if (*at <= std::time(nullptr)) {
        return Status::IOError(describe_ + ": the cached IAM Identity Center token expired" +
                               login);
      }
    }
    return j["accessToken"].get<std::string>();
  }
  const SsoProfile sso_;
  const std::shared_ptr<HttpClient> http_;
  const std::string describe_;
};

}  // namespace

Result<AwsCredentials> ParseStsCredentials(const std::string& xml, const std::string& what) {
  const size_t at = xml.find("<Credentials>");
  if (at == std::string::npos)
    return Status::InvalidArgument(what + ": no <Credentials> in the reply");
  const std::string c = xml.substr(at);
  AwsCredentials out;
  out.keys.access_key_id = XmlValue(c, "AccessKeyId");
  out.keys.secret_access_key = XmlValue(c, "SecretAccessKey");
  out.keys.session_token = XmlValue(c, "SessionToken");
  if (out.keys.access_key_id.empty() || out.keys.secret_access_key.empty()) {
    return Status::InvalidArgument(what + ": the reply's <Credentials> are incomplete");
  }
  SK_ASSIGN_OR_RETURN(out.expiration, ParseIso8601(XmlValue(c, "Expiration")));
  return out;
}

std::unique_ptr<CredentialSource> AssumeRole(StsEndpoint sts, RoleRequest role,
                                             std::shared_ptr<CredentialCache> source,
                                             std::string describe) {
  return std::make_unique<AssumeRoleSource>(std::move(sts), std::move(role), std::move(source),
                                            std::move(describe));
}

std::unique_ptr<CredentialSource> WebIdentity(StsEndpoint sts, RoleRequest role,
                                              std::string token_file, std::string describe) {
  return std::make_unique<WebIdentitySource>(std::move(sts), std::move(role), std::move(token_file),
                                             std::move(describe));
}

std::unique_ptr<CredentialSource> SsoCredentials(SsoProfile sso, std::shared_ptr<HttpClient> http,
                                                 std::string describe) {
  return std::make_unique<SsoSource>(std::move(sso), std::move(http), std::move(describe));
}

}  // namespace shardkit
