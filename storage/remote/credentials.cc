// The credential chain resolved from the environment and the profile, and
// the cache that keeps its credentials fresh (storage/remote/credentials.h).
#include "storage/remote/credentials.h"

#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "storage/remote/credential_sources.h"
#include "storage/remote/http_client.h"

namespace shardkit {
namespace {

// Every live cache, for the fork handlers: a fork while a cache's mutex is
// held by another thread (which the child does not have) would leave it held.
std::mutex& RegistryMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
std::set<CredentialCache*>& Registry() {
  static auto* caches = new std::set<CredentialCache*>;
  return *caches;
}

// The advisory and mandatory margins before an expiration (botocore's 15
// and 10 minutes), shortened for credentials that live less than an hour.
std::time_t Advisory(std::time_t lifetime) { return std::min<std::time_t>(900, lifetime / 2); }
std::time_t Mandatory(std::time_t lifetime) { return std::min<std::time_t>(600, lifetime / 4); }

bool SameKeys(const AwsCredentials& a, const AwsCredentials& b) {
  return a.keys.access_key_id == b.keys.access_key_id &&
         a.keys.secret_access_key == b.keys.secret_access_key &&
         a.keys.session_token == b.keys.session_token;
}

}  // namespace

std::shared_ptr<CredentialCache> CredentialCache::Make(std::unique_ptr<CredentialSource> source) {
  static std::once_flag once;
  std::call_once(once, [] { ::pthread_atfork(AtForkPrepare, AtForkParent, AtForkChild); });
  return std::shared_ptr<CredentialCache>(new CredentialCache(std::move(source)));
}

CredentialCache::CredentialCache(std::unique_ptr<CredentialSource> source)
    : source_(std::move(source)) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry().insert(this);
}

CredentialCache::~CredentialCache() {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry().erase(this);
}

void CredentialCache::AtForkPrepare() {
  RegistryMutex().lock();
  for (CredentialCache* c : Registry()) c->mu_.lock();
}

void CredentialCache::AtForkParent() {
  for (CredentialCache* c : Registry()) c->mu_.unlock();
  RegistryMutex().unlock();
}

void CredentialCache::AtForkChild() {
  for (CredentialCache* c : Registry()) {
    c->fetching_ = false;  // the parent's fetch runs on a thread the child does not have
    c->next_background_ = 0;
    c->mu_.unlock();
  }
  RegistryMutex().unlock();
}

bool CredentialCache::temporary() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_ != nullptr && current_->expiration != 0;
}

Status CredentialCache::FetchLocked(std::unique_lock<std::mutex>& lock) {
  if (fetching_) {  // another thread's fetch: its result serves this call too
    const uint64_t generation = generation_;
    cv_.wait(lock, [&] { return !fetching_; });
    if (generation_ != generation) return Status::OK();
  }
  fetching_ = true;
  lock.unlock();
  Result<AwsCredentials> got = source_->Fetch();
  lock.lock();
  fetching_ = false;
  fetches_.fetch_add(1);
  cv_.notify_all();
  if (!got.ok()) return got.status();
  auto fresh = std::make_shared<AwsCredentials>(std::move(*got));
  fresh->generation = ++generation_;
  current_ = std::move(fresh);
  fetched_at_ = now();
  next_background_ = 0;
  return Status::OK();
}

void CredentialCache::StartBackgroundFetch() {
  fetching_ = true;
  std::thread([self = shared_from_this()] {
    Result<AwsCredentials> got = self->source_->Fetch();
    std::lock_guard<std::mutex> lock(self->mu_);
    self->fetching_ = false;
    self->fetches_.fetch_add(1);
    self->cv_.notify_all();
    const std::time_t t = self->now();
    if (got.ok() && (got->expiration == 0 || got->expiration > self->current_->expiration)) {
      auto fresh = std::make_shared<AwsCredentials>(std::move(*got));
      fresh->generation = ++self->generation_;
      self->current_ = std::move(fresh);
      self->fetched_at_ = t;
      self->next_background_ = 0;
      return;
    }
    // Failed, or the same expiration (a metadata service rotates a few
    // minutes before): try again later, not at every request.
    const std::time_t left = std::max<std::time_t>(0, self->current_->expiration - t);
    self->next_background_ = t + std::clamp<std::time_t>(left / 8, 1, 60);
  }).detach();
}

Result<std::shared_ptr<const AwsCredentials>> CredentialCache::Get() {
  std::unique_lock<std::mutex> lock(mu_);
  if (current_ == nullptr) SK_RETURN_IF_ERROR(FetchLocked(lock));
  if (current_ == nullptr) return Status::IOError(source_->Describe() + ": no credentials");
  if (current_->expiration == 0) return current_;
  const std::time_t t = now();
  const std::time_t lifetime = std::max<std::time_t>(0, current_->expiration - fetched_at_);
  if (t >= current_->expiration - Mandatory(lifetime) && t > fetched_at_) {
    Status s = FetchLocked(lock);
    // The old ones are good until they expire: a refresh that failed
    // before then is tried again by the next request.
    if (!s.ok() && now() >= current_->expiration) {
      return Status::IOError(s.message() + " (the credentials from " + source_->Describe() +
                             " expired and new ones could not be had)");
    }
  } else if (t >= current_->expiration - Advisory(lifetime) && !fetching_ &&
             t >= next_background_) {
    StartBackgroundFetch();
  }
  return current_;
}

Result<std::shared_ptr<const AwsCredentials>> CredentialCache::Refresh(const AwsCredentials& used,
                                                                       bool* renewed) {
  std::unique_lock<std::mutex> lock(mu_);
  if (current_ == nullptr || current_->generation == used.generation) {
    SK_RETURN_IF_ERROR(FetchLocked(lock));
  } else if (fetching_) {
    cv_.wait(lock, [&] { return !fetching_; });
  }
  *renewed = current_ != nullptr && !SameKeys(*current_, used);
  return current_;
}

// Resolving the chain.
namespace {

struct Resolver {
  const Environ& env;
  const AwsConfig& config;
  const Setting& region;
  std::shared_ptr<HttpClient> http;

  std::optional<Setting> Get(const std::string& profile, const std::string& key) const {
    return config.GetFor(profile, key);
  }
  StsEndpoint Sts() const {
    StsEndpoint sts;
    if (auto e = ConfiguredEndpoint(env, config, "sts")) {
      sts.url = e->value;
      sts.from = e->from;
    } else {
      sts.url = "https://sts." + region.value + ".amazonaws.com";
      sts.from = "AWS's STS endpoint for region " + region.value;
    }
    sts.region = region.value;
    sts.http = http;
    return sts;
  }
  Result<RoleRequest> Role(const std::string& profile, const std::string& arn,
                           const std::string& session_var) const {
    RoleRequest r;
    r.role_arn = arn;
    if (auto v = session_var.empty() ? std::nullopt : env.Get(session_var)) {
      r.session_name = *v;
    } else if (auto s = Get(profile, "role_session_name")) {
      r.session_name = s->value;
    } else {
      r.session_name = "shardkit-" + std::to_string(std::time(nullptr));
    }
    if (auto x = Get(profile, "external_id")) r.external_id = x->value;
    if (auto d = Get(profile, "duration_seconds")) {
      char* end = nullptr;
      const long v = std::strtol(d->value.c_str(), &end, 10);
      if (end == d->value.c_str() || *end != '\0' || v < 900 || v > 43200) {
        return Status::InvalidArgument(d->from + ": duration_seconds=" + d->value +
                                       ": expected 900 to 43200");
      }
      r.duration_s = static_cast<int>(v);
    }
    return r;
  }

  Result<std::unique_ptr<CredentialSource>> EnvKeys(bool required) const;
  Result<std::unique_ptr<CredentialSource>> Profile(const std::string& name, int depth) const;
  Result<std::unique_ptr<CredentialSource>> AssumeRoleFor(const std::string& name,
                                                          const Setting& arn, int depth) const;
  Result<std::unique_ptr<CredentialSource>> Container(bool required) const;
  std::unique_ptr<CredentialSource> Imds() const;
};

Result<std::unique_ptr<CredentialSource>> Resolver::EnvKeys(bool required) const {
  const auto id = env.Get("AWS_ACCESS_KEY_ID"), secret = env.Get("AWS_SECRET_ACCESS_KEY");
  if (id.has_value() != secret.has_value()) {
    return Status::InvalidArgument(
        std::string(id ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY") + " is set but " +
        (id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID") +
        " is not: set both (or neither; AWS_NO_SIGN_REQUEST=1 for a public bucket)");
  }
  if (!id) {
    if (!required) return std::unique_ptr<CredentialSource>();
    return Status::InvalidArgument(
        "credential_source = Environment, but AWS_ACCESS_KEY_ID is not set");
  }
  sigv4::Credentials k{*id, *secret, ""};
  if (auto t = env.Get("AWS_SESSION_TOKEN")) {
    k.session_token = *t;
  } else if (auto st = env.Get("AWS_SECURITY_TOKEN")) {
    k.session_token = *st;
  }
  return FixedKeys(std::move(k), "the environment (AWS_ACCESS_KEY_ID)");
}

Result<std::unique_ptr<CredentialSource>> Resolver::AssumeRoleFor(const std::string& name,
                                                                  const Setting& arn,
                                                                  int depth) const {
  const auto source_profile = Get(name, "source_profile");
  const auto credential_source = Get(name, "credential_source");
  if (Get(name, "mfa_serial")) {
    return Status::Unsupported(arn.from +
                               ": mfa_serial asks for a code typed in, and shardkit reads "
                               "unattended; use credential_process or IAM Identity Center");
  }
  if (source_profile && credential_source) {
    return Status::InvalidArgument(arn.from +
                                   ": both source_profile and credential_source; name one");
  }
  std::unique_ptr<CredentialSource> base;
  if (source_profile) {
    if (!config.HasProfile(source_profile->value)) {
      return Status::InvalidArgument(source_profile->from + ": source_profile " +
                                     source_profile->value + " is no profile");
    }
    if (source_profile->value == name) {  // its own keys
      SK_ASSIGN_OR_RETURN(auto keys, Profile(name + "\n(keys only)", depth + 1));
      base = std::move(keys);
    } else {
      SK_ASSIGN_OR_RETURN(base, Profile(source_profile->value, depth + 1));
    }
    if (base == nullptr) {
      return Status::InvalidArgument(source_profile->from + ": source_profile " +
                                     source_profile->value + " has no credentials");
    }
  } else {
    const std::string& cs = credential_source->value;
    if (cs == "Environment") {
      SK_ASSIGN_OR_RETURN(base, EnvKeys(/*required=*/true));
    } else if (cs == "Ec2InstanceMetadata") {
      base = Imds();
    } else if (cs == "EcsContainer") {
      SK_ASSIGN_OR_RETURN(base, Container(/*required=*/true));
    } else {
      return Status::InvalidArgument(credential_source->from + ": credential_source=" + cs +
                                     ": expected Environment, Ec2InstanceMetadata or EcsContainer");
    }
  }
  SK_ASSIGN_OR_RETURN(RoleRequest role, Role(name, arn.value, ""));
  const std::string describe =
      "role " + arn.value + " (" + arn.from + ") assumed with " + base->Describe();
  return AssumeRole(Sts(), std::move(role), CredentialCache::Make(std::move(base)), describe);
}

// The profile's own sources, in botocore's order; null: none. "NAME\n(keys
// only)" asks for the profile's static keys alone (a role's source_profile
// that is the profile itself).
Result<std::unique_ptr<CredentialSource>> Resolver::Profile(const std::string& spec,
                                                            int depth) const {
  if (depth > 8) {
    return Status::InvalidArgument("profile " + spec +
                                   ": source_profile goes round in a circle (or deeper than 8)");
  }
  const bool keys_only = spec.find('\n') != std::string::npos;
  const std::string name = spec.substr(0, spec.find('\n'));
  if (!keys_only) {
    const auto arn = Get(name, "role_arn");
    const auto token_file = Get(name, "web_identity_token_file");
    if (arn && (Get(name, "source_profile") || Get(name, "credential_source"))) {
      return AssumeRoleFor(name, *arn, depth);
    }
    if (arn && token_file) {
      SK_ASSIGN_OR_RETURN(RoleRequest role, Role(name, arn->value, ""));
      return WebIdentity(Sts(), std::move(role), token_file->value,
                         "web identity (" + token_file->from + "), role " + arn->value);
    }
    if (arn) {
      return Status::InvalidArgument(arn->from +
                                     ": role_arn needs source_profile, credential_source or "
                                     "web_identity_token_file");
    }
    const auto session = Get(name, "sso_session");
    const auto start_url = Get(name, "sso_start_url");
    if (session || start_url) {
      SsoProfile sso;
      sso.profile = name;
      sso.cache_dir = env.Home() + "/.aws/sso/cache";
      std::string sso_region;
      if (session) {
        const IniSection* s = config.SsoSession(session->value);
        if (s == nullptr) {
          return Status::InvalidArgument(session->from + ": sso_session " + session->value +
                                         " has no [sso-session " + session->value + "] section");
        }
        sso.cache_key = session->value;
        sso_region = s->Get("sso_region").value_or(Setting{}).value;
      } else {
        sso.cache_key = start_url->value;
        sso_region = Get(name, "sso_region").value_or(Setting{}).value;
      }
      sso.account_id = Get(name, "sso_account_id").value_or(Setting{}).value;
      sso.role_name = Get(name, "sso_role_name").value_or(Setting{}).value;
      if (sso.account_id.empty() || sso.role_name.empty() || sso_region.empty()) {
        return Status::InvalidArgument("profile " + name +
                                       ": IAM Identity Center needs sso_account_id, sso_role_name "
                                       "and sso_region");
      }
      if (auto e = ConfiguredEndpoint(env, config, "sso")) {
        sso.portal = e->value;
      } else {
        sso.portal = "https://portal.sso." + sso_region + ".amazonaws.com";
      }
      const std::string describe = "IAM Identity Center (profile " + name + ": account " +
                                   sso.account_id + ", role " + sso.role_name + ")";
      return SsoCredentials(std::move(sso), http, describe);
    }
  }
  const IniFile& creds = config.credentials_file();
  if (auto it = creds.sections.find(name); it != creds.sections.end()) {
    if (it->second.Get("aws_access_key_id")) return ProfileKeys(name, it->second.where);
  }
  if (auto process = Get(name, "credential_process"); process && !keys_only) {
    return ProcessCredentials(process->value, "credential_process of " + process->from);
  }
  if (auto id = Get(name, "aws_access_key_id")) return ProfileKeys(name, id->from);
  return std::unique_ptr<CredentialSource>();
}

Result<std::unique_ptr<CredentialSource>> Resolver::Container(bool required) const {
  std::string url, from;
  if (auto rel = env.Get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")) {
    url = "http://169.254.170.2" + *rel;
    from = "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI";
  } else if (auto full = env.Get("AWS_CONTAINER_CREDENTIALS_FULL_URI")) {
    url = *full;
    from = "AWS_CONTAINER_CREDENTIALS_FULL_URI";
    const size_t host_at = url.find("://");
    const std::string scheme = host_at == std::string::npos ? "" : url.substr(0, host_at);
    std::string host = host_at == std::string::npos ? "" : url.substr(host_at + 3);
    host = host.substr(0, host.find('/'));
    if (host.front() == '[') {
      host = host.substr(1, host.find(']') - 1);
    } else {
      host = host.substr(0, host.find(':'));
    }
    const bool allowed = scheme == "https" ||
                         (scheme == "http" && (host == "localhost" || host.rfind("127.", 0) == 0 ||
                                               host == "::1" || host == "169.254.170.2" ||
                                               host == "169.254.170.23" || host == "fd00:ec2::23"));
    if (!allowed) {
      return Status::InvalidArgument(from + "=" + url +
                                     ": only https://, or http:// to this machine (127.0.0.1, "
                                     "::1) or the container agent (169.254.170.2, .23)");
    }
  } else {
    if (!required) return std::unique_ptr<CredentialSource>();
    return Status::InvalidArgument(
        "credential_source = EcsContainer, but neither AWS_CONTAINER_CREDENTIALS_RELATIVE_URI nor "
        "_FULL_URI is set");
  }
  const std::string token = env.Get("AWS_CONTAINER_AUTHORIZATION_TOKEN").value_or("");
  const std::string token_file = env.Get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE").value_or("");
  return ContainerCredentials(url, token, token_file, http, "container credentials (" + from + ")");
}

std::unique_ptr<CredentialSource> Resolver::Imds() const {
  ImdsSettings s;
  if (auto e = env.Get("AWS_EC2_METADATA_SERVICE_ENDPOINT")) {
    s.endpoint = *e;
  } else if (auto c = config.Get("ec2_metadata_service_endpoint")) {
    s.endpoint = c->value;
  }
  if (auto t = env.Get("AWS_METADATA_SERVICE_TIMEOUT")) {
    const double v = std::atof(t->c_str());
    if (v > 0 && v <= 300) s.timeout_ms = static_cast<long>(v * 1000);
  }
  if (auto n = env.Get("AWS_METADATA_SERVICE_NUM_ATTEMPTS")) {
    const int v = std::atoi(n->c_str());
    if (v >= 1 && v <= 10) s.attempts = v;
  }
  s.v1_disabled = ParseBool(env.Get("AWS_EC2_METADATA_V1_DISABLED").value_or("")).value_or(false);
  return InstanceMetadata(std::move(s), http);
}

}  // namespace

Result<std::unique_ptr<CredentialSource>> ResolveCredentials(
    const Environ& env, const AwsConfig& config, const Setting& region,
    const HttpClientOptions& http_options) {
  HttpClientOptions o = http_options;
  o.max_connections = 4;
  Resolver r{env, config, region, std::make_shared<HttpClient>(o)};
  SK_ASSIGN_OR_RETURN(auto from_env, r.EnvKeys(/*required=*/false));
  if (from_env) return from_env;
  // The profile's role comes before web identity from the environment; its
  // keys, SSO and credential_process after it (botocore's order).
  if (auto arn = config.Get("role_arn");
      arn && (config.Get("source_profile") || config.Get("credential_source"))) {
    return r.AssumeRoleFor(config.profile(), *arn, 0);
  }
  const auto token_file = env.Get("AWS_WEB_IDENTITY_TOKEN_FILE");
  const auto role_arn = env.Get("AWS_ROLE_ARN");
  if (token_file && role_arn) {
    SK_ASSIGN_OR_RETURN(RoleRequest role,
                        r.Role(config.profile(), *role_arn, "AWS_ROLE_SESSION_NAME"));
    return WebIdentity(r.Sts(), std::move(role), *token_file,
                       "web identity (AWS_WEB_IDENTITY_TOKEN_FILE), role " + *role_arn);
  }
  SK_ASSIGN_OR_RETURN(auto from_profile, r.Profile(config.profile(), 0));
  if (from_profile) return from_profile;
  SK_ASSIGN_OR_RETURN(auto container, r.Container(/*required=*/false));
  if (container) return container;
  std::string looked = "the environment (AWS_ACCESS_KEY_ID), profile " + config.profile() + " in " +
                       config.credentials_file().path + " and " + config.config_file().path +
                       " (no keys, role, IAM Identity Center or credential_process), the "
                       "container endpoint (AWS_CONTAINER_CREDENTIALS_* unset)";
  std::vector<std::unique_ptr<CredentialSource>> last;
  if (ParseBool(env.Get("AWS_EC2_METADATA_DISABLED").value_or("")).value_or(false)) {
    looked += ", EC2 instance metadata (AWS_EC2_METADATA_DISABLED)";
  } else {
    last.push_back(r.Imds());
  }
  return FirstThatAnswers(std::move(last), looked);
}

}  // namespace shardkit
