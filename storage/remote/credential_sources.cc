// The chain's local and metadata sources: fixed keys, a profile's keys,
// credential_process, the container and instance-metadata endpoints, and
// the parsers of their answers.
#include "storage/remote/credential_sources.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "storage/env.h"

extern char** environ;

namespace shardkit {
namespace {

std::string Field(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

class FixedKeysSource final : public CredentialSource {
 public:
  FixedKeysSource(sigv4::Credentials keys, std::string describe)
      : keys_(std::move(keys)), describe_(std::move(describe)) {}
  Result<AwsCredentials> Fetch() override { return AwsCredentials{keys_, 0, 0}; }
  std::string Describe() const override { return describe_; }

 private:
  const sigv4::Credentials keys_;
  const std::string describe_;
};

class ProfileKeysSource final : public CredentialSource {
 public:
  ProfileKeysSource(std::string profile, std::string describe)
      : profile_(std::move(profile)), describe_(std::move(describe)) {}
  Result<AwsCredentials> Fetch() override {
    SK_ASSIGN_OR_RETURN(AwsConfig config, AwsConfig::Load(Environ::Process()));
    AwsCredentials c;
    c.keys.access_key_id = config.GetFor(profile_, "aws_access_key_id").value_or(Setting{}).value;
    c.keys.secret_access_key =
        config.GetFor(profile_, "aws_secret_access_key").value_or(Setting{}).value;
    c.keys.session_token = config.GetFor(profile_, "aws_session_token").value_or(Setting{}).value;
    if (c.keys.access_key_id.empty() || c.keys.secret_access_key.empty()) {
      return Status::InvalidArgument(describe_ +
                                     ": no aws_access_key_id and aws_secret_access_key");
    }
    return c;
  }
  std::string Describe() const override { return describe_; }

 private:
  const std::string profile_, describe_;
};

// Runs argv, its stdout read (1 MiB at most) within `seconds`; stdin and
// stderr are the tool's (a command may ask for an MFA code).
Result<std::string> RunCapturing(const std::vector<std::string>& argv, int seconds,
                                 const std::string& what) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return Status::IOError(what + ": cannot make a pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    return Status::IOError(what + ": cannot run " + argv[0] + ": " + std::strerror(rc));
  }
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    struct pollfd p = {out[0], POLLIN, 0};
    const int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timed_out = true;
      break;
    }
    char buf[8192];
    const ssize_t n = ::read(out[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (text.size() + static_cast<size_t>(n) > (1 << 20)) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Status::IOError(what + ": gave no answer within " + std::to_string(seconds) + " s");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::IOError(what + ": exited with " +
                           (WIFEXITED(status) ? "code " + std::to_string(WEXITSTATUS(status))
                                              : "signal " + std::to_string(WTERMSIG(status))));
  }
  return text;
}

class ProcessSource final : public CredentialSource {
 public:
  ProcessSource(std::string command, std::string describe)
      : command_(std::move(command)), describe_(std::move(describe)) {}
  Result<AwsCredentials> Fetch() override {
    SK_ASSIGN_OR_RETURN(std::vector<std::string> argv, SplitCommandLine(command_));
    if (argv.empty()) return Status::InvalidArgument(describe_ + ": an empty command");
    SK_ASSIGN_OR_RETURN(std::string out, RunCapturing(argv, 120, describe_));
    const auto j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("Version") || j["Version"] != 1) {
      return Status::InvalidArgument(describe_ +
                                     ": printed no JSON object with \"Version\": 1 on stdout");
    }
    return ParseCredentialsJson(out, describe_);
  }
  std::string Describe() const override { return describe_; }

 private:
  const std::string command_, describe_;
};

// A GET (or PUT) of a metadata endpoint: `attempts` tries, each bounded.
Result<HttpResponse> MetadataRequest(HttpClient& http, HttpRequest q, int attempts, long timeout_ms,
                                     const std::string& what) {
  q.connect_timeout_ms = timeout_ms;
  q.timeout_ms = 2 * timeout_ms + 1000;
  q.max_body = 1 << 20;
  HttpResponse r;
  for (int i = 0; i < attempts; ++i) {
    r = http.Perform(q);
    const bool transient =
        !r.transport_error.empty() || r.status == 429 || (r.status >= 500 && r.status <= 599);
    if (!transient) break;
    if (i + 1 < attempts) std::this_thread::sleep_for(std::chrono::milliseconds(100 << i));
  }
  if (!r.transport_error.empty()) return Status::IOError(what + ": " + r.transport_error);
  return r;
}

class ContainerSource final : public CredentialSource {
 public:
  ContainerSource(std::string url, std::string token, std::string token_file,
                  std::shared_ptr<HttpClient> http, std::string describe)
      : url_(std::move(url)),
        token_(std::move(token)),
        token_file_(std::move(token_file)),
        http_(std::move(http)),
        describe_(std::move(describe)) {}
  Result<AwsCredentials> Fetch() override {
    HttpRequest q;
    q.url = url_;
    std::string token = token_;
    if (!token_file_.empty()) {
      SK_ASSIGN_OR_RETURN(token, Env::Default()->ReadFile(token_file_, 64 << 10));
      while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) {
        token.pop_back();
      }
    }
    if (token.find_first_of("\r\n") != std::string::npos) {
      return Status::InvalidArgument(describe_ + ": the authorization token holds a line break");
    }
    if (!token.empty()) q.headers.push_back("Authorization: " + token);
    SK_ASSIGN_OR_RETURN(HttpResponse r, MetadataRequest(*http_, q, 3, 2000, describe_));
    if (r.status != 200) {
      return Status::IOError(describe_ + ": HTTP " + std::to_string(r.status));
    }
    return ParseCredentialsJson(r.body, describe_);
  }
  std::string Describe() const override { return describe_; }

 private:
  const std::string url_, token_, token_file_;
  const std::shared_ptr<HttpClient> http_;
  const std::string describe_;
};

class ImdsSource final : public CredentialSource {
 public:
  ImdsSource(ImdsSettings s, std::shared_ptr<HttpClient> http) : s_(std::move(s)), http_(http) {
    while (!s_.endpoint.empty() && s_.endpoint.back() == '/') s_.endpoint.pop_back();
  }
  Result<AwsCredentials> Fetch() override {
    // Once it has answered, a refresh may try harder than the first probe.
    int attempts = s_.attempts;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (answered_) attempts = std::max(3, attempts);
    }
    SK_ASSIGN_OR_RETURN(std::string token, Token(attempts));
    HttpRequest q;
    q.url = s_.endpoint + "/latest/meta-data/iam/security-credentials/";
    if (!token.empty()) q.headers.push_back("X-aws-ec2-metadata-token: " + token);
    SK_ASSIGN_OR_RETURN(HttpResponse roles,
                        MetadataRequest(*http_, q, attempts, s_.timeout_ms, Describe()));
    if (roles.status != 200) {
      return Status::IOError(Describe() + ": HTTP " + std::to_string(roles.status) +
                             " for the instance's role (has the instance a role?)");
    }
    std::string role = roles.body.substr(0, roles.body.find('\n'));
    while (!role.empty() && std::isspace(static_cast<unsigned char>(role.back()))) role.pop_back();
    if (role.empty() || role.find_first_of("/?#% ") != std::string::npos) {
      return Status::IOError(Describe() + ": no usable role name in its answer");
    }
    q.url += role;
    SK_ASSIGN_OR_RETURN(HttpResponse r,
                        MetadataRequest(*http_, q, attempts, s_.timeout_ms, Describe()));
    if (r.status != 200) {
      return Status::IOError(Describe() + ": HTTP " + std::to_string(r.status) + " for role " +
                             role + "'s credentials");
    }
    SK_ASSIGN_OR_RETURN(AwsCredentials c, ParseCredentialsJson(r.body, Describe()));
    std::lock_guard<std::mutex> lock(mu_);
    role_ = role;
    answered_ = true;
    return c;
  }
  std::string Describe() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return "EC2 instance metadata (" + s_.endpoint + (role_.empty() ? "" : ", role " + role_) + ")";
  }

 private:
  // The IMDSv2 session token; "" where the endpoint refuses to give one
  // (IMDSv1 only) and v1 is allowed.
  Result<std::string> Token(int attempts) {
    HttpRequest q;
    q.method = "PUT";
    q.url = s_.endpoint + "/latest/api/token";
    q.headers.push_back("X-aws-ec2-metadata-token-ttl-seconds: 21600");
    SK_ASSIGN_OR_RETURN(HttpResponse r,
                        MetadataRequest(*http_, q, attempts, s_.timeout_ms, Describe()));
    if (r.status == 200 && !r.body.empty() && r.body.find_first_of("\r\n") == std::string::npos) {
      return r.body;
    }
    if ((r.status == 403 || r.status == 404 || r.status == 405) && !s_.v1_disabled) {
      return std::string();
    }
    return Status::IOError(Describe() + ": HTTP " + std::to_string(r.status) +
                           " for an IMDSv2 token" +
                           (s_.v1_disabled ? " (IMDSv1 is disabled here)" : ""));
  }
  ImdsSettings s_;
  const std::shared_ptr<HttpClient> http_;
  mutable std::mutex mu_;  // role_ and answered_: Describe runs beside a fetch
  std::string role_;
  bool answered_ = false;
};

class FirstThatAnswersSource final : public CredentialSource {
 public:
  FirstThatAnswersSource(std::vector<std::unique_ptr<CredentialSource>> sources, std::string looked)
      : sources_(std::move(sources)), looked_(std::move(looked)) {}
  Result<AwsCredentials> Fetch() override {
    if (CredentialSource* chosen = chosen_.load()) return chosen->Fetch();
    std::string why;
    for (auto& s : sources_) {
      auto c = s->Fetch();
      if (c.ok()) {
        chosen_.store(s.get());
        return c;
      }
      why += "; " + c.status().message();
    }
    return Status::InvalidArgument("no AWS credentials found (looked at " + looked_ + why +
                                   "); for a public bucket set AWS_NO_SIGN_REQUEST=1");
  }
  std::string Describe() const override {
    CredentialSource* chosen = chosen_.load();
    return chosen != nullptr ? chosen->Describe() : "no credentials found yet";
  }

 private:
  std::vector<std::unique_ptr<CredentialSource>> sources_;
  const std::string looked_;
  std::atomic<CredentialSource*> chosen_{nullptr};  // fetches are one at a time (the cache)
};

}  // namespace

std::unique_ptr<CredentialSource> FixedKeys(sigv4::Credentials keys, std::string describe) {
  return std::make_unique<FixedKeysSource>(std::move(keys), std::move(describe));
}

std::unique_ptr<CredentialSource> ProfileKeys(std::string profile, std::string describe) {
  return std::make_unique<ProfileKeysSource>(std::move(profile), std::move(describe));
}

std::unique_ptr<CredentialSource> ProcessCredentials(std::string command, std::string describe) {
  return std::make_unique<ProcessSource>(std::move(command), std::move(describe));
}

std::unique_ptr<CredentialSource> ContainerCredentials(std::string url, std::string token,
                                                       std::string token_file,
                                                       std::shared_ptr<HttpClient> http,
                                                       std::string describe) {
  return std::make_unique<ContainerSource>(std::move(url), std::move(token), std::move(token_file),
                                           std::move(http), std::move(describe));
}

std::unique_ptr<CredentialSource> InstanceMetadata(ImdsSettings imds,
                                                   std::shared_ptr<HttpClient> http) {
  return std::make_unique<ImdsSource>(std::move(imds), std::move(http));
}

std::unique_ptr<CredentialSource> FirstThatAnswers(
    std::vector<std::unique_ptr<CredentialSource>> sources, std::string looked) {
  return std::make_unique<FirstThatAnswersSource>(std::move(sources), std::move(looked));
}

Result<std::time_t> ParseIso8601(const std::string& s) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0, used = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &used) != 6 ||
      used != 19 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) {
    return Status::InvalidArgument("'" + s + "' is not a time (YYYY-MM-DDTHH:MM:SSZ)");
  }
  std::string rest = s.substr(19);
  if (!rest.empty() && rest[0] == '.') {  // fractions of a second: dropped
    size_t i = 1;
    while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) ++i;
    rest = rest.substr(i);
  }
  long offset = 0;
  if (rest == "Z" || rest == "UTC" || rest == "+00:00" || rest.empty()) {
    offset = 0;
  } else if (rest.size() == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':' &&
             std::isdigit(static_cast<unsigned char>(rest[1])) &&
             std::isdigit(static_cast<unsigned char>(rest[2])) &&
             std::isdigit(static_cast<unsigned char>(rest[4])) &&
             std::isdigit(static_cast<unsigned char>(rest[5]))) {
    offset = (std::stol(rest.substr(1, 2)) * 60 + std::stol(rest.substr(4, 2))) * 60;
    if (rest[0] == '-') offset = -offset;
  } else {
    return Status::InvalidArgument("'" + s + "' has an unknown time zone");
  }
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  return static_cast<std::time_t>(::timegm(&tm) - offset);
}

Result<AwsCredentials> ParseCredentialsJson(const std::string& body, const std::string& what) {
  const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument(what + ": its answer is not a JSON object");
  }
  if (j.contains("Code") && Field(j, "Code") != "Success") {
    return Status::IOError(what + ": answered Code " + Field(j, "Code").substr(0, 100));
  }
  AwsCredentials c;
  c.keys.access_key_id = Field(j, "AccessKeyId");
  c.keys.secret_access_key = Field(j, "SecretAccessKey");
  c.keys.session_token = j.contains("Token") ? Field(j, "Token") : Field(j, "SessionToken");
  if (c.keys.access_key_id.empty() || c.keys.secret_access_key.empty()) {
    return Status::InvalidArgument(what + ": its answer has no AccessKeyId and SecretAccessKey");
  }
  if (const std::string e = Field(j, "Expiration"); !e.empty()) {
    auto t = ParseIso8601(e);
    if (!t.ok()) return Status::InvalidArgument(what + ": Expiration " + t.status().message());
    c.expiration = *t;
  }
  return c;
}

Result<std::vector<std::string>> SplitCommandLine(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '\'' || c == '"') {
      const size_t close = [&] {
        for (size_t j = i + 1; j < line.size(); ++j) {
          if (c == '"' && line[j] == '\\' && j + 1 < line.size()) {
            ++j;
          } else if (line[j] == c) {
            return j;
          }
        }
        return std::string::npos;
      }();
      if (close == std::string::npos) {
        return Status::InvalidArgument("credential_process: an unterminated " +
                                       std::string(c == '"' ? "double" : "single") + " quote");
      }
      for (size_t j = i + 1; j < close; ++j) {
        if (c == '"' && line[j] == '\\' && j + 1 < close &&
            std::strchr("\"\\$`", line[j + 1]) != nullptr) {
          ++j;
        }
        word += line[j];
      }
      in_word = true;
      i = close;
    } else if (c == '\\' && i + 1 < line.size()) {
      word += line[++i];
      in_word = true;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

}  // namespace shardkit
