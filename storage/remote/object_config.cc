// ObjectStoreOptions::FromEnvironment: the settings AWS users already have.
#include <cerrno>
#include <cstdlib>

#include "storage/remote/object_store.h"

namespace shardkit {
namespace {

Status Seconds(const Environ& env, const char* name, double lo, double hi, double* out) {
  const auto value = env.Get(name);
  if (!value) return Status::OK();
  const char* v = value->c_str();
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0' || !(x >= lo && x <= hi)) {
    return Status::InvalidArgument(std::string(name) + "=" + *value + ": expected seconds from " +
                                   std::to_string(static_cast<int>(lo)) + " to " +
                                   std::to_string(static_cast<int>(hi)));
  }
  *out = x;
  return Status::OK();
}

// A region name as AWS spells them ("eu-west-1"; S3-compatible servers
// have their own, "default" for radosgw): what goes into hosts and
// signatures is checked once.
bool UsableRegion(const std::string& r) {
  return !r.empty() && r.size() <= 64 &&
         r.find_first_not_of(
             "abcdefghijklmnopqrstuvwxyz"
             "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == std::string::npos;
}

Status Endpoint(const Environ& env, const AwsConfig& config, ObjectStoreOptions* o) {
  if (auto e = ConfiguredEndpoint(env, config, "s3")) {
    o->endpoint = e->value;
    o->endpoint_source = e->from;
  } else {
    o->endpoint = "https://s3." + o->region + ".amazonaws.com";
    o->endpoint_source =
        "AWS's endpoint for region " + o->region + " (from " + o->region_source + ")";
    o->aws_endpoint = true;
  }
  while (!o->endpoint.empty() && o->endpoint.back() == '/') o->endpoint.pop_back();
  const size_t scheme_end = o->endpoint.find("://");
  const std::string scheme =
      scheme_end == std::string::npos ? "" : o->endpoint.substr(0, scheme_end);
  if ((scheme != "http" && scheme != "https") || o->endpoint.size() == scheme_end + 3 ||
      o->endpoint.find_first_of(" \t\r\n?#@") != std::string::npos) {
    return Status::InvalidArgument(o->endpoint_source + "=" + o->endpoint +
                                   ": expected http://HOST[:PORT] or https://HOST[:PORT]");
  }
  if (auto style = config.Get("s3.addressing_style")) {
    if (style->value == "auto") {
      o->addressing = ObjectStoreOptions::Addressing::kAuto;
    } else if (style->value == "path") {
      o->addressing = ObjectStoreOptions::Addressing::kPath;
    } else if (style->value == "virtual") {
      o->addressing = ObjectStoreOptions::Addressing::kVirtual;
    } else {
      return Status::InvalidArgument(style->from + ": addressing_style=" + style->value +
                                     ": expected auto, path or virtual");
    }
  }
  return Status::OK();
}

Status Tls(const Environ& env, const AwsConfig& config, HttpClientOptions* http) {
  if (auto ca = env.Get("AWS_CA_BUNDLE")) {
    http->ca_file = *ca;
  } else if (auto pca = config.Get("ca_bundle")) {
    http->ca_file = pca->value;
  } else if (auto cca = env.Get("CURL_CA_BUNDLE")) {
    http->ca_file = *cca;
  }
  if (auto v = env.Get("SHARDKIT_TLS_VERIFY")) {
    const auto on = ParseBool(*v);
    if (!on) return Status::InvalidArgument("SHARDKIT_TLS_VERIFY=" + *v + ": expected 1 or 0");
    http->verify_tls = *on;
  }
  return Status::OK();
}

}  // namespace

Result<ObjectStoreOptions> ObjectStoreOptions::FromEnvironment() {
  return FromEnvironment(Environ::Process());
}

Result<ObjectStoreOptions> ObjectStoreOptions::FromEnvironment(const Environ& env) {
  ObjectStoreOptions o;
  SK_ASSIGN_OR_RETURN(AwsConfig config, AwsConfig::Load(env));
  const Setting region = ConfiguredRegion(env, config);
  if (!UsableRegion(region.value)) {
    return Status::InvalidArgument(region.from + ": region '" + region.value +
                                   "' is no region name (like eu-west-1)");
  }
  o.region = region.value;
  o.region_source = region.from;
  SK_RETURN_IF_ERROR(Endpoint(env, config, &o));
  SK_RETURN_IF_ERROR(Tls(env, config, &o.http));
  SK_RETURN_IF_ERROR(Seconds(env, "SHARDKIT_RETRY_SECONDS", 0, 86400, &o.retry.retry_seconds));
  double stall = static_cast<double>(o.http.stall_timeout_s);
  SK_RETURN_IF_ERROR(Seconds(env, "SHARDKIT_STALL_SECONDS", 1, 3600, &stall));
  o.http.stall_timeout_s = static_cast<long>(stall);
  if (auto no_sign = env.Get("AWS_NO_SIGN_REQUEST");
      no_sign && ParseBool(*no_sign).value_or(false)) {
    return o;  // unsigned: a public bucket
  }
  SK_ASSIGN_OR_RETURN(auto source, ResolveCredentials(env, config, region, o.http));
  o.credentials = CredentialCache::Make(std::move(source));
  return o;
}

}  // namespace shardkit
