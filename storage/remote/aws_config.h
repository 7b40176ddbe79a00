// The settings AWS users already have, read the way the AWS SDKs (botocore)
// read them: environment variables, then the shared config file
// (AWS_CONFIG_FILE, else ~/.aws/config: [default], [profile NAME],
// [sso-session NAME], [services NAME]) and the shared credentials file
// (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials: [NAME]), for the
// profile AWS_PROFILE, else AWS_DEFAULT_PROFILE, else "default" names.
// Every value remembers where it came from, for messages ("region from
// ~/.aws/config [profile dev]"). Pure: files are read once, by Load; no
// network.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace shardkit {

// The environment settings are read from: the process's, or a fixed map
// (tests). A variable set to "" counts as unset, as the SDKs take it.
class Environ {
 public:
  static Environ Process();
  explicit Environ(std::map<std::string, std::string> vars) : vars_(std::move(vars)) {}
  std::optional<std::string> Get(const std::string& name) const;
  // HOME, else the password database's home directory ("" if neither).
  std::string Home() const;

 private:
  Environ() : process_(true) {}
  bool process_ = false;
  std::map<std::string, std::string> vars_;
};

// A value and where it came from ("AWS_REGION", "~/.aws/config [profile x]").
struct Setting {
  std::string value;
  std::string from;
};

// A section of an INI file as botocore parses it: `key = value` lines (keys
// lower-cased, values trimmed), comments on lines of their own (# or ;),
// and nested blocks, a key with no value followed by indented lines
// ("s3 =\n  addressing_style = path"), kept as "s3.addressing_style".
struct IniSection {
  std::map<std::string, std::string> values;
  std::string where;  // "FILE [SECTION]", for messages
  std::optional<Setting> Get(const std::string& key) const;
};

struct IniFile {
  std::string path;  // as named (for messages)
  bool exists = false;
  std::map<std::string, IniSection> sections;  // by name as written ("profile dev")
};
// Parses `text` (the file at `path`); a line that is none of the above is an
// error naming path:line.
Result<IniFile> ParseIni(std::string_view text, const std::string& path);

// The shared config and credentials files, and the profile in use.
class AwsConfig {
 public:
  // Reads both files (a missing file is empty; one that cannot be read, or
  // is not INI, is an error naming it) and picks the profile. A profile
  // named by AWS_PROFILE or AWS_DEFAULT_PROFILE that neither file has is an
  // error naming the variable and both files.
  static Result<AwsConfig> Load(const Environ& env);

  const std::string& profile() const { return profile_; }
  // A profile's value of `key`: the credentials file's [NAME] over the
  // config file's [profile NAME] ([default] for "default").
  std::optional<Setting> Get(const std::string& key) const { return GetFor(profile_, key); }
  std::optional<Setting> GetFor(const std::string& profile, const std::string& key) const;
  bool HasProfile(const std::string& name) const;
  // The config file's [sso-session NAME] and [services NAME] sections.
  const IniSection* SsoSession(const std::string& name) const;
  const IniSection* Services(const std::string& name) const;
  const IniFile& config_file() const { return config_; }
  const IniFile& credentials_file() const { return credentials_; }

 private:
  const IniSection* ConfigProfile(const std::string& name) const;
  IniFile config_, credentials_;
  std::string profile_;
};

// Where requests for an AWS service go, as the SDKs decide it: the
// service's variable (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL_STS,
// AWS_ENDPOINT_URL_SSO), the profile's [services] section's
// `<service>.endpoint_url`, AWS_ENDPOINT_URL, the profile's endpoint_url;
// none of these (AWS_IGNORE_CONFIGURED_ENDPOINT_URLS, or the profile's
// ignore_configure_endpoint_urls, skips them all): nullopt (the service's
// AWS endpoint). `service` is the lower-case id: "s3", "sts", "sso".
std::optional<Setting> ConfiguredEndpoint(const Environ& env, const AwsConfig& config,
                                          const std::string& service);
// The region: AWS_REGION, AWS_DEFAULT_REGION, the profile's region; else
// us-east-1 (from "default").
Setting ConfiguredRegion(const Environ& env, const AwsConfig& config);

// "true"/"false" as the SDKs spell them (any case), and 1/0.
std::optional<bool> ParseBool(const std::string& v);

}  // namespace shardkit
