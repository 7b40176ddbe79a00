// ObjectStoreOptions::FromEnvironment: the variables S3 users already set.
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "storage/remote/object_store.h"

namespace shardkit {
namespace {

const char* Var(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : nullptr;
}

bool Truthy(const char* v) {
  const std::string s = v == nullptr ? "" : v;
  return s == "1" || s == "true" || s == "TRUE" || s == "True" || s == "yes";
}

bool Falsy(const char* v) {
  const std::string s = v == nullptr ? "" : v;
  return s == "0" || s == "false" || s == "FALSE" || s == "False" || s == "no";
}

Status Seconds(const char* name, double lo, double hi, double* out) {
  const char* v = Var(name);
  if (v == nullptr) return Status::OK();
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0' || !(x >= lo && x <= hi)) {
    return Status::InvalidArgument(std::string(name) + "=" + v + ": expected seconds from " +
                                   std::to_string(static_cast<int>(lo)) + " to " +
                                   std::to_string(static_cast<int>(hi)));
  }
  *out = x;
  return Status::OK();
}

// The [profile] section of an AWS shared credentials file, if it has keys.
bool FromCredentialsFile(const std::string& path, const std::string& profile,
                         sigv4::Credentials* c) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line, section;
  sigv4::Credentials found;
  while (std::getline(in, line)) {
    auto trim = [](std::string s) {
      const size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
      return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
    };
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      continue;
    }
    const size_t eq = line.find('=');
    if (section != profile || eq == std::string::npos) continue;
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    if (key == "aws_access_key_id") found.access_key_id = value;
    if (key == "aws_secret_access_key") found.secret_access_key = value;
    if (key == "aws_session_token") found.session_token = value;
  }
  if (found.access_key_id.empty() || found.secret_access_key.empty()) return false;
  *c = found;
  return true;
}

std::string HomeDir() {
  if (const char* h = Var("HOME")) return h;
  if (const struct passwd* pw = ::getpwuid(::getuid())) return pw->pw_dir;
  return "";
}

Status Credentials(ObjectStoreOptions* o) {
  const char* id = Var("AWS_ACCESS_KEY_ID");
  const char* secret = Var("AWS_SECRET_ACCESS_KEY");
  if (Truthy(Var("AWS_NO_SIGN_REQUEST"))) {
    o->sign = false;
    return Status::OK();
  }
  if ((id == nullptr) != (secret == nullptr)) {
    return Status::InvalidArgument(
        std::string(id == nullptr ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID") +
        " is set but " + (id == nullptr ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY") +
        " is not: set both (or neither, for a public bucket)");
  }
  if (id != nullptr) {
    o->credentials.access_key_id = id;
    o->credentials.secret_access_key = secret;
    if (const char* token = Var("AWS_SESSION_TOKEN")) o->credentials.session_token = token;
    return Status::OK();
  }
  const char* file = Var("AWS_SHARED_CREDENTIALS_FILE");
  const std::string path = file != nullptr ? file : HomeDir() + "/.aws/credentials";
  const char* profile = Var("AWS_PROFILE");
  o->sign = FromCredentialsFile(path, profile != nullptr ? profile : "default", &o->credentials);
  if (!o->sign && profile != nullptr) {
    return Status::InvalidArgument("AWS_PROFILE=" + std::string(profile) + ": no keys for it in " +
                                   path);
  }
  return Status::OK();
}

}  // namespace

Result<ObjectStoreOptions> ObjectStoreOptions::FromEnvironment() {
  ObjectStoreOptions o;
  if (const char* r = Var("AWS_REGION")) {
    o.region = r;
  } else if (const char* dr = Var("AWS_DEFAULT_REGION")) {
    o.region = dr;
  }
  for (const char* name : {"AWS_ENDPOINT_URL_S3", "S3_ENDPOINT_URL", "AWS_ENDPOINT_URL"}) {
    if (const char* e = Var(name)) {
      o.endpoint = e;
      o.endpoint_source = name;
      break;
    }
  }
  if (o.endpoint.empty()) {
    o.endpoint = "https://s3." + o.region + ".amazonaws.com";
    o.endpoint_source = "AWS's endpoint for AWS_REGION " + o.region;
  }
  const std::string scheme = o.endpoint.substr(0, o.endpoint.find("://"));
  if (o.endpoint.find("://") == std::string::npos || (scheme != "http" && scheme != "https")) {
    return Status::InvalidArgument(o.endpoint_source + "=" + o.endpoint +
                                   ": expected http://HOST[:PORT] or https://HOST[:PORT]");
  }
  SK_RETURN_IF_ERROR(Credentials(&o));
  if (const char* ca = Var("AWS_CA_BUNDLE")) {
    o.http.ca_file = ca;
  } else if (const char* cca = Var("CURL_CA_BUNDLE")) {
    o.http.ca_file = cca;
  }
  if (const char* v = Var("SHARDKIT_TLS_VERIFY")) {
    if (!Falsy(v) && !Truthy(v)) {
      return Status::InvalidArgument(std::string("SHARDKIT_TLS_VERIFY=") + v + ": expected 1 or 0");
    }
    o.http.verify_tls = !Falsy(v);
  }
  SK_RETURN_IF_ERROR(Seconds("SHARDKIT_RETRY_SECONDS", 0, 86400, &o.retry.retry_seconds));
  double stall = static_cast<double>(o.http.stall_timeout_s);
  SK_RETURN_IF_ERROR(Seconds("SHARDKIT_STALL_SECONDS", 1, 3600, &stall));
  o.http.stall_timeout_s = static_cast<long>(stall);
  return o;
}

}  // namespace shardkit
