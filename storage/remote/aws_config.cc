// The AWS shared config files parsed as botocore parses them, profiles, and
// the settings read from them (storage/remote/aws_config.h).
#include "storage/remote/aws_config.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "storage/env.h"

namespace shardkit {
namespace {

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "key = value" or "key: value" (the first of the two delimiters).
bool SplitAssignment(const std::string& line, std::string* key, std::string* value) {
  const size_t at = line.find_first_of("=:");
  if (at == std::string::npos || at == 0) return false;
  *key = Lower(Trim(line.substr(0, at)));
  *value = Trim(line.substr(at + 1));
  return !key->empty();
}

std::string ExpandHome(const std::string& path, const Environ& env) {
  if (path == "~" || path.rfind("~/", 0) == 0) return env.Home() + path.substr(1);
  return path;
}

// A config file's section name as botocore maps it: "profile NAME" (any
// spaces between, NAME optionally quoted), or "default".
std::optional<std::string> SectionOf(const std::string& section, const std::string& kind) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < section.size()) {
    while (i < section.size() && std::isspace(static_cast<unsigned char>(section[i]))) ++i;
    size_t j = i;
    while (j < section.size() && !std::isspace(static_cast<unsigned char>(section[j]))) ++j;
    if (j > i) words.push_back(section.substr(i, j - i));
    i = j;
  }
  if (words.size() != 2 || words[0] != kind) return std::nullopt;
  std::string name = words[1];
  if (name.size() >= 2 && (name.front() == '"' || name.front() == '\'') &&
      name.back() == name.front()) {
    name = name.substr(1, name.size() - 2);
  }
  return name;
}

Result<IniFile> ReadIni(const std::string& path) {
  auto text = Env::Default()->ReadFile(path, 16 << 20);
  if (!text.ok()) {
    if (text.status().IsNotFound()) {
      IniFile empty;
      empty.path = path;
      return empty;
    }
    return text.status();
  }
  SK_ASSIGN_OR_RETURN(IniFile f, ParseIni(*text, path));
  f.exists = true;
  return f;
}

}  // namespace

Environ Environ::Process() { return Environ(); }

std::optional<std::string> Environ::Get(const std::string& name) const {
  if (process_) {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr || v[0] == '\0') return std::nullopt;
    return std::string(v);
  }
  auto it = vars_.find(name);
  if (it == vars_.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

std::string Environ::Home() const {
  if (auto h = Get("HOME")) return *h;
  if (!process_) return "";
  if (const struct passwd* pw = ::getpwuid(::getuid())) return pw->pw_dir;
  return "";
}

std::optional<Setting> IniSection::Get(const std::string& key) const {
  auto it = values.find(key);
  if (it == values.end()) return std::nullopt;
  return Setting{it->second, where};
}

Result<IniFile> ParseIni(std::string_view text, const std::string& path) {
  IniFile f;
  f.path = path;
  IniSection* section = nullptr;
  std::string nested;  // the key of the nested block being read ("s3"), if any
  std::string last_key;
  size_t line_no = 0;
  for (size_t at = 0; at <= text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string raw(text.substr(at, end - at));
    at = end + 1;
    ++line_no;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    const std::string line = Trim(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    const bool indented = std::isspace(static_cast<unsigned char>(raw[0])) != 0;
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument(path + ":" + std::to_string(line_no) + ": " + why +
                                     " (an AWS config file is [section] lines and key = value)");
    };
    if (!indented && line.front() == '[') {
      if (line.back() != ']' || line.size() < 3) return bad("a section header without its ']'");
      const std::string name = line.substr(1, line.size() - 2);
      section = &f.sections[name];
      section->where = path + " [" + name + "]";
      nested.clear();
      last_key.clear();
      continue;
    }
    if (section == nullptr) return bad("a setting before any [section]");
    std::string key, value;
    if (indented && !last_key.empty()) {
      if (!nested.empty() && SplitAssignment(line, &key, &value)) {
        section->values[nested + "." + key] = value;
      } else {  // a value continued on the next line
        section->values[last_key] += "\n" + line;
      }
      continue;
    }
    if (!SplitAssignment(line, &key, &value)) return bad("neither a [section] nor key = value");
    section->values[key] = value;
    last_key = key;
    nested = value.empty() ? key : "";
  }
  return f;
}

Result<AwsConfig> AwsConfig::Load(const Environ& env) {
  AwsConfig c;
  const std::string home = env.Home();
  const auto config_path = env.Get("AWS_CONFIG_FILE");
  const auto credentials_path = env.Get("AWS_SHARED_CREDENTIALS_FILE");
  SK_ASSIGN_OR_RETURN(c.config_,
                      ReadIni(config_path ? ExpandHome(*config_path, env) : home + "/.aws/config"));
  SK_ASSIGN_OR_RETURN(c.credentials_, ReadIni(credentials_path ? ExpandHome(*credentials_path, env)
                                                               : home + "/.aws/credentials"));
  c.profile_ = "default";
  for (const char* var : {"AWS_PROFILE", "AWS_DEFAULT_PROFILE"}) {
    const auto p = env.Get(var);
    if (!p) continue;
    c.profile_ = *p;
    if (!c.HasProfile(*p)) {
      return Status::InvalidArgument(std::string(var) + "=" + *p + ": no such profile in " +
                                     c.config_.path + " or " + c.credentials_.path);
    }
    break;
  }
  return c;
}

const IniSection* AwsConfig::ConfigProfile(const std::string& name) const {
  const IniSection* found = nullptr;
  for (const auto& [section, values] : config_.sections) {
    const auto as_profile = SectionOf(section, "profile");
    if ((as_profile && *as_profile == name) || (name == "default" && section == "default")) {
      // [profile default] over [default], as botocore takes it.
      if (found == nullptr || as_profile) found = &values;
    }
  }
  return found;
}

bool AwsConfig::HasProfile(const std::string& name) const {
  return ConfigProfile(name) != nullptr || credentials_.sections.count(name) > 0;
}

std::optional<Setting> AwsConfig::GetFor(const std::string& profile, const std::string& key) const {
  if (auto it = credentials_.sections.find(profile); it != credentials_.sections.end()) {
    if (auto v = it->second.Get(key)) return v;
  }
  if (const IniSection* s = ConfigProfile(profile)) return s->Get(key);
  return std::nullopt;
}

const IniSection* AwsConfig::SsoSession(const std::string& name) const {
  for (const auto& [section, values] : config_.sections) {
    if (SectionOf(section, "sso-session") == name) return &values;
  }
  return nullptr;
}

const IniSection* AwsConfig::Services(const std::string& name) const {
  for (const auto& [section, values] : config_.sections) {
    if (SectionOf(section, "services") == name) return &values;
  }
  return nullptr;
}

std::optional<bool> ParseBool(const std::string& v) {
  const std::string s = Lower(Trim(v));
  if (s == "true" || s == "1") return true;
  if (s == "false" || s == "0") return false;
  return std::nullopt;
}

std::optional<Setting> ConfiguredEndpoint(const Environ& env, const AwsConfig& config,
                                          const std::string& service) {
  const bool ignore =
      ParseBool(env.Get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS").value_or("")).value_or(false) ||
      ParseBool(config.Get("ignore_configure_endpoint_urls").value_or(Setting{}).value)
          .value_or(false);
  if (ignore) return std::nullopt;
  std::string upper = service;
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const std::string var = "AWS_ENDPOINT_URL_" + upper;
  if (auto v = env.Get(var)) return Setting{*v, var};
  if (service == "s3") {  // the name shardkit and other tools read before the SDKs had one
    if (auto v = env.Get("S3_ENDPOINT_URL")) return Setting{*v, "S3_ENDPOINT_URL"};
  }
  if (auto services = config.Get("services")) {
    if (const IniSection* s = config.Services(services->value)) {
      if (auto v = s->Get(service + ".endpoint_url")) return v;
    }
  }
  if (auto v = env.Get("AWS_ENDPOINT_URL")) return Setting{*v, "AWS_ENDPOINT_URL"};
  return config.Get("endpoint_url");
}

Setting ConfiguredRegion(const Environ& env, const AwsConfig& config) {
  for (const char* var : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (auto v = env.Get(var)) return Setting{*v, var};
  }
  if (auto v = config.Get("region")) return *v;
  return Setting{"us-east-1", "the default"};
}

}  // namespace shardkit
