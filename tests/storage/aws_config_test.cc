// The settings and credentials AWS users already have, read as the AWS SDKs
// read them: config files (profiles, nested blocks, services), the order of
// endpoints and regions, the credential chain's choice of source and its
// words, the parsers of what credential endpoints answer, and the cache that
// renews temporary credentials (a fake source and a fake clock; a fork in
// the middle of a renewal). No server: tests/servers/credentials_test.py
// runs the chain against radosgw's STS and the metadata protocols.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>

#include "storage/remote/aws_config.h"
#include "storage/remote/credential_sources.h"
#include "storage/remote/credentials.h"
#include "storage/remote/object_store.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::TempDir;

// An environment whose HOME is a fresh directory, with ~/.aws files written
// into it as a test asks.
class AwsHome {
 public:
  AwsHome() { testing::MakeDirs(home_ / ".aws"); }
  void Config(const std::string& text) { testing::WriteFile(home_ / ".aws/config", text); }
  void Credentials(const std::string& text) {
    testing::WriteFile(home_ / ".aws/credentials", text);
  }
  Environ Env(std::map<std::string, std::string> vars = {}) const {
    vars["HOME"] = home_.path();
    vars.emplace("AWS_EC2_METADATA_DISABLED", "true");  // no 169.254.169.254 in tests
    return Environ(std::move(vars));
  }
  std::string path() const { return home_.path(); }

 private:
  TempDir home_;
};

Result<ObjectStoreOptions> Options(const Environ& env) {
  return ObjectStoreOptions::FromEnvironment(env);
}

// The source the chain picks, described.
std::string ChosenSource(const Environ& env) {
  auto config = AwsConfig::Load(env);
  if (!config.ok()) return "error: " + config.status().message();
  auto source = ResolveCredentials(env, *config, ConfiguredRegion(env, *config), {});
  if (!source.ok()) return "error: " + source.status().message();
  return (*source)->Describe();
}

TEST(AwsConfigFile, ParsesAsBotocoreDoes) {
  auto f = ParseIni(
      "# a comment\n[profile dev]\nRegion = eu-west-1\r\naws_access_key_id: AK\n"
      "s3 =\n  addressing_style = virtual\n  endpoint_url=http://x\n\n; another\n"
      "[default]\nregion=us-west-2\n",
      "cfg");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const IniSection& dev = f->sections.at("profile dev");
  EXPECT_EQ(dev.values.at("region"), "eu-west-1");  // keys lower-cased, \r dropped
  EXPECT_EQ(dev.values.at("aws_access_key_id"), "AK");
  EXPECT_EQ(dev.values.at("s3.addressing_style"), "virtual");
  EXPECT_EQ(dev.values.at("s3.endpoint_url"), "http://x");
  EXPECT_EQ(dev.where, "cfg [profile dev]");
  EXPECT_EQ(f->sections.at("default").values.at("region"), "us-west-2");
  for (const char* bad : {"region = x\n", "[profile x\n", "[default]\njust words\n"}) {
    auto r = ParseIni(bad, "cfg");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("cfg:"), std::string::npos) << r.status().message();
  }
}

TEST(AwsConfigFile, TheProfileComesFromAwsProfileThenAwsDefaultProfile) {
  AwsHome home;
  home.Config("[profile dev]\nregion = eu-west-1\n[profile  \"ops\" ]\nregion = ap-south-1\n");
  home.Credentials("[dev]\nregion = eu-central-1\n");
  auto c = AwsConfig::Load(home.Env({{"AWS_DEFAULT_PROFILE", "dev"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->profile(), "dev");
  // The credentials file's [dev] over the config file's [profile dev].
  EXPECT_EQ(c->Get("region")->value, "eu-central-1");
  EXPECT_EQ(AwsConfig::Load(home.Env({{"AWS_PROFILE", "ops"}, {"AWS_DEFAULT_PROFILE", "dev"}}))
                ->Get("region")
                ->value,
            "ap-south-1");
  auto missing = AwsConfig::Load(home.Env({{"AWS_PROFILE", "nope"}}));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("AWS_PROFILE=nope: no such profile"),
            std::string::npos);
}

TEST(AwsConfigFile, RegionAndEndpointFollowTheSdksOrder) {
  AwsHome home;
  home.Config(
      "[default]\nregion = eu-north-1\nendpoint_url = http://profile:1\nservices = mine\n"
      "[services mine]\ns3 =\n  endpoint_url = http://services:2\n");
  auto o = Options(home.Env());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->region, "eu-north-1");  // `aws configure` writes it here
  EXPECT_EQ(o->endpoint, "http://services:2");
  EXPECT_NE(o->endpoint_source.find("[services mine]"), std::string::npos);
  EXPECT_EQ(Options(home.Env({{"AWS_ENDPOINT_URL", "http://env:3"}}))->endpoint,
            "http://services:2");  // the services section is the more specific
  EXPECT_EQ(Options(home.Env({{"S3_ENDPOINT_URL", "http://env:4"}}))->endpoint, "http://env:4");
  EXPECT_EQ(Options(home.Env({{"AWS_ENDPOINT_URL_S3", "http://env:5"},
                              {"S3_ENDPOINT_URL", "http://env:4"}}))
                ->endpoint,
            "http://env:5");
  EXPECT_EQ(Options(home.Env({{"AWS_REGION", "r1"}, {"AWS_DEFAULT_REGION", "r2"}}))->region, "r1");
  auto aws = Options(home.Env({{"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true"}}));
  EXPECT_EQ(aws->endpoint, "https://s3.eu-north-1.amazonaws.com");
  EXPECT_TRUE(aws->aws_endpoint);
  home.Config("[default]\n");
  EXPECT_EQ(Options(home.Env())->region, "us-east-1");
}

TEST(AwsConfigFile, AddressingStyleIsTheProfilesS3Setting) {
  AwsHome home;
  using A = ObjectStoreOptions::Addressing;
  EXPECT_EQ(Options(home.Env())->addressing, A::kAuto);
  home.Config("[default]\ns3 =\n  addressing_style = path\n");
  EXPECT_EQ(Options(home.Env())->addressing, A::kPath);
  home.Config("[default]\ns3 =\n  addressing_style = virtual\n");
  EXPECT_EQ(Options(home.Env())->addressing, A::kVirtual);
  home.Config("[default]\ns3 =\n  addressing_style = sideways\n");
  auto bad = Options(home.Env());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("addressing_style=sideways"), std::string::npos);
}

TEST(AwsConfigFile, UnusableValuesAreNamedWithWhereTheyCameFrom) {
  AwsHome home;
  for (auto [name, value] :
       std::vector<std::pair<const char*, const char*>>{{"AWS_ENDPOINT_URL", "127.0.0.1:7480"},
                                                        {"AWS_ENDPOINT_URL", "ftp://x"},
                                                        {"AWS_REGION", "eu west"},
                                                        {"SHARDKIT_TLS_VERIFY", "maybe"},
                                                        {"SHARDKIT_RETRY_SECONDS", "-1"},
                                                        {"SHARDKIT_RETRY_SECONDS", "ten"},
                                                        {"SHARDKIT_STALL_SECONDS", "0"}}) {
    auto o = Options(home.Env({{name, value}}));
    ASSERT_FALSE(o.ok()) << name << "=" << value;
    EXPECT_NE(o.status().message().find(name), std::string::npos) << o.status().message();
  }
  home.Config("[default]\nregion = eu/west\n");
  auto o = Options(home.Env());
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find(".aws/config [default]"), std::string::npos);
  auto ok = Options(home.Env({{"SHARDKIT_TLS_VERIFY", "0"},
                              {"SHARDKIT_RETRY_SECONDS", "2.5"},
                              {"AWS_REGION", "us-east-1"}}));
  EXPECT_FALSE(ok->http.verify_tls);
  EXPECT_DOUBLE_EQ(ok->retry.retry_seconds, 2.5);
}

TEST(CredentialChain, TheEnvironmentComesFirstAndHalfAPairIsAnError) {
  AwsHome home;
  home.Credentials("[default]\naws_access_key_id = F\naws_secret_access_key = G\n");
  EXPECT_EQ(ChosenSource(home.Env({{"AWS_ACCESS_KEY_ID", "A"}, {"AWS_SECRET_ACCESS_KEY", "B"}})),
            "the environment (AWS_ACCESS_KEY_ID)");
  const std::string half = ChosenSource(home.Env({{"AWS_ACCESS_KEY_ID", "A"}}));
  EXPECT_NE(half.find("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"),
            std::string::npos)
      << half;
  // Keys from the file are named by the file, never as a variable the user did not set.
  EXPECT_EQ(ChosenSource(home.Env()), home.path() + "/.aws/credentials [default]");
  EXPECT_EQ(Options(home.Env({{"AWS_NO_SIGN_REQUEST", "true"}}))->credentials, nullptr);
}

TEST(CredentialChain, ProfilesPickRolesSsoProcessesAndKeysInBotocoresOrder) {
  AwsHome home;
  home.Credentials("[base]\naws_access_key_id = K\naws_secret_access_key = S\n");
  home.Config(
      "[profile role]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = base\n"
      "[profile chained]\nrole_arn = arn:aws:iam::1:role/c\nsource_profile = role\n"
      "[profile envrole]\nrole_arn = arn:aws:iam::1:role/e\ncredential_source = Environment\n"
      "[profile sso]\nsso_session = corp\nsso_account_id = 123\nsso_role_name = Reader\n"
      "[sso-session corp]\nsso_region = eu-west-1\nsso_start_url = https://corp/start\n"
      "[profile proc]\ncredential_process = /bin/echo {}\n"
      "[profile both]\ncredential_process = /bin/false\naws_access_key_id = K2\n"
      "aws_secret_access_key = S2\n");
  auto as = [&](const char* profile) { return ChosenSource(home.Env({{"AWS_PROFILE", profile}})); };
  EXPECT_NE(as("role").find("role arn:aws:iam::1:role/r"), std::string::npos) << as("role");
  EXPECT_NE(as("role").find("assumed with " + home.path() + "/.aws/credentials [base]"),
            std::string::npos)
      << as("role");
  EXPECT_NE(as("chained").find("assumed with role arn:aws:iam::1:role/r"), std::string::npos);
  EXPECT_NE(as("envrole").find("error: credential_source = Environment"), std::string::npos);
  EXPECT_EQ(as("sso"), "IAM Identity Center (profile sso: account 123, role Reader)");
  EXPECT_NE(as("proc").find("credential_process of"), std::string::npos);
  // The config file's credential_process before its keys, as botocore goes.
  EXPECT_NE(as("both").find("credential_process"), std::string::npos) << as("both");
}

TEST(CredentialChain, ProfilesThatCannotWorkSayWhy) {
  AwsHome home;
  home.Config(
      "[profile nosource]\nrole_arn = arn:aws:iam::1:role/r\n"
      "[profile loop1]\nrole_arn = arn:x:1\nsource_profile = loop2\n"
      "[profile loop2]\nrole_arn = arn:x:2\nsource_profile = loop1\n"
      "[profile badsource]\nrole_arn = arn:x:3\ncredential_source = Laptop\n"
      "[profile mfa]\nrole_arn = arn:x:4\nsource_profile = mfa\nmfa_serial = arn:mfa\n"
      "aws_access_key_id = A\naws_secret_access_key = B\n"
      "[profile ssohalf]\nsso_start_url = https://x\nsso_account_id = 1\n"
      "[profile duration]\nrole_arn = arn:x:5\nsource_profile = duration\n"
      "duration_seconds = 10\naws_access_key_id = A\naws_secret_access_key = B\n");
  auto as = [&](const char* profile) {
    return ChosenSource(home.Env({{"AWS_PROFILE", profile}, {"AWS_ACCESS_KEY_ID", ""}}));
  };
  EXPECT_NE(as("nosource").find("role_arn needs source_profile"), std::string::npos);
  EXPECT_NE(as("loop1").find("circle"), std::string::npos) << as("loop1");
  EXPECT_NE(as("badsource").find("credential_source=Laptop"), std::string::npos);
  EXPECT_NE(as("mfa").find("mfa_serial"), std::string::npos);
  EXPECT_NE(as("ssohalf").find("needs sso_account_id, sso_role_name and sso_region"),
            std::string::npos);
  EXPECT_NE(as("duration").find("duration_seconds=10: expected 900 to 43200"), std::string::npos)
      << as("duration");
}

TEST(CredentialChain, ContainerEndpointsAreOnlyLocalOrHttps) {
  AwsHome home;
  EXPECT_EQ(
      ChosenSource(home.Env({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/c"}})),
      "container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI)");
  EXPECT_EQ(ChosenSource(home.Env({{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/creds"}})),
            "container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI)");
  const std::string far =
      ChosenSource(home.Env({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://evil.example/c"}}));
  EXPECT_NE(far.find("only https://, or http:// to this machine"), std::string::npos) << far;
}

TEST(CredentialChain, FindingNothingSaysWhereItLookedAndHowToReadAPublicBucket) {
  AwsHome home;
  auto config = AwsConfig::Load(home.Env());
  auto source = ResolveCredentials(home.Env(), *config, ConfiguredRegion(home.Env(), *config), {});
  ASSERT_TRUE(source.ok());
  auto got = (*source)->Fetch();
  ASSERT_FALSE(got.ok());
  const std::string m = got.status().message();
  for (const char* part : {"no AWS credentials found", "the environment (AWS_ACCESS_KEY_ID)",
                           ".aws/credentials", "AWS_CONTAINER_CREDENTIALS_* unset",
                           "AWS_EC2_METADATA_DISABLED", "AWS_NO_SIGN_REQUEST=1"}) {
    EXPECT_NE(m.find(part), std::string::npos) << part << " in " << m;
  }
}

TEST(CredentialProcess, RunsTheCommandWithoutAShellAndReadsItsJson) {
  TempDir dir;
  const std::string script = dir / "creds prog.sh";
  testing::WriteFile(script,
                     "#!/bin/sh\n[ \"$1\" = 'two words' ] || exit 3\n"
                     "echo '{\"Version\": 1, \"AccessKeyId\": \"PK\", \"SecretAccessKey\": \"PS\","
                     " \"SessionToken\": \"PT\", \"Expiration\": \"2030-01-02T03:04:05Z\"}'\n");
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  auto ok = ProcessCredentials("'" + script + "' \"two words\"", "test")->Fetch();
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->keys.access_key_id, "PK");
  EXPECT_EQ(ok->keys.session_token, "PT");
  EXPECT_EQ(ok->expiration, 1893553445);
  auto failed = ProcessCredentials("'" + script + "' other", "the process")->Fetch();
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("the process: exited with code 3"), std::string::npos);
  auto no_json = ProcessCredentials("/bin/echo hello", "p")->Fetch();
  ASSERT_FALSE(no_json.ok());
  EXPECT_NE(no_json.status().message().find("\"Version\": 1"), std::string::npos);
  EXPECT_FALSE(ProcessCredentials("/nonexistent/prog", "p")->Fetch().ok());
}

TEST(CredentialParsers, TimesJsonXmlAndCommandLines) {
  EXPECT_EQ(*ParseIso8601("2026-11-29T07:32:58Z"), 1795937578);
  EXPECT_EQ(*ParseIso8601("2026-11-29T07:32:58.098001+00:00"), 1795937578);
  EXPECT_EQ(*ParseIso8601("2026-11-29T08:32:58+01:00"), 1795937578);
  EXPECT_EQ(*ParseIso8601("2026-11-29T07:32:58UTC"), 1795937578);
  for (const char* bad : {"", "2026-11-29", "2026-13-01T00:00:00Z", "2026-11-29T07:32:58 PST"}) {
    EXPECT_FALSE(ParseIso8601(bad).ok()) << bad;
  }
  auto imds = ParseCredentialsJson(
      R"({"Code":"Success","AccessKeyId":"A","SecretAccessKey":"S","Token":"T",)"
      R"("Expiration":"2026-11-29T07:32:58Z"})",
      "imds");
  ASSERT_TRUE(imds.ok());
  EXPECT_EQ(imds->keys.session_token, "T");
  EXPECT_EQ(imds->expiration, 1795937578);
  EXPECT_FALSE(ParseCredentialsJson(R"({"Code":"Failure"})", "imds").ok());
  EXPECT_FALSE(ParseCredentialsJson(R"({"AccessKeyId":"A"})", "imds").ok());
  EXPECT_FALSE(ParseCredentialsJson("not json", "imds").ok());
  const std::string token(1200, 'x');  // real session tokens run past 300 characters
  auto sts = ParseStsCredentials(
      "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>AK</AccessKeyId>"
      "<SecretAccessKey>a&amp;b</SecretAccessKey><SessionToken>" +
          token +
          "</SessionToken><Expiration>2026-11-29T07:32:58Z</Expiration></Credentials>"
          "</AssumeRoleResult></AssumeRoleResponse>",
      "sts");
  ASSERT_TRUE(sts.ok()) << sts.status().ToString();
  EXPECT_EQ(sts->keys.secret_access_key, "a&b");
  EXPECT_EQ(sts->keys.session_token, token);
  EXPECT_FALSE(ParseStsCredentials("<Error><Code>AccessDenied</Code></Error>", "sts").ok());
  EXPECT_EQ(*SplitCommandLine(R"(a 'b c' "d \"e\"" f\ g)"),
            (std::vector<std::string>{"a", "b c", "d \"e\"", "f g"}));
  EXPECT_FALSE(SplitCommandLine("a 'b").ok());
}

// A source whose credentials expire `lifetime` seconds after each fetch on
// the test's clock; a fetch can be held until the test lets it go.
class FakeSource final : public CredentialSource {
 public:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::time_t clock = 1000000;
    std::time_t lifetime = 3600;  // 0: static keys
    int fetches = 0;
    bool hold = false;  // fetches wait until released
    int held = 0;       // fetches waiting
    bool fail = false;
    pid_t holder = 0;  // the process whose fetches hold (a forked child's do not)
  };
  explicit FakeSource(std::shared_ptr<State> s) : s_(std::move(s)) {}
  Result<AwsCredentials> Fetch() override {
    std::unique_lock<std::mutex> lock(s_->mu);
    if (s_->hold && s_->holder == ::getpid()) {
      ++s_->held;
      s_->cv.notify_all();
      s_->cv.wait(lock, [&] { return !s_->hold; });
      --s_->held;
    }
    if (s_->fail) return Status::IOError("fake: down");
    const int n = ++s_->fetches;
    AwsCredentials c;
    c.keys = {"K" + std::to_string(n), "S" + std::to_string(n), "T"};
    c.expiration = s_->lifetime == 0 ? 0 : s_->clock + s_->lifetime;
    return c;
  }
  std::string Describe() const override { return "fake"; }

 private:
  std::shared_ptr<State> s_;
};

std::shared_ptr<CredentialCache> Cache(const std::shared_ptr<FakeSource::State>& s) {
  auto cache = CredentialCache::Make(std::make_unique<FakeSource>(s));
  cache->now = [s] {
    std::lock_guard<std::mutex> lock(s->mu);
    return s->clock;
  };
  return cache;
}

void SetClock(const std::shared_ptr<FakeSource::State>& s, std::time_t t) {
  std::lock_guard<std::mutex> lock(s->mu);
  s->clock = t;
}

TEST(CredentialCache, StaticKeysAreFetchedOnce) {
  auto s = std::make_shared<FakeSource::State>();
  s->lifetime = 0;
  auto cache = Cache(s);
  for (int i = 0; i < 5; ++i) EXPECT_EQ((*cache->Get())->keys.access_key_id, "K1");
  EXPECT_EQ(cache->fetches(), 1u);
  EXPECT_FALSE(cache->temporary());
}

TEST(CredentialCache, RenewsInTheBackgroundWithinTheAdvisoryMargin) {
  auto s = std::make_shared<FakeSource::State>();
  s->holder = ::getpid();
  auto cache = Cache(s);
  EXPECT_EQ((*cache->Get())->keys.access_key_id, "K1");
  SetClock(s, 1000000 + 3600 - 900 + 1);  // 15 minutes before the hour is out
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->hold = true;
  }
  // The renewal runs beside: the caller still gets the current keys at once.
  EXPECT_EQ((*cache->Get())->keys.access_key_id, "K1");
  {
    std::unique_lock<std::mutex> lock(s->mu);
    s->cv.wait(lock, [&] { return s->held == 1; });
    s->hold = false;
    s->cv.notify_all();
  }
  // Once it is done, the new keys: waited for as a state, not a time.
  for (;;) {
    if ((*cache->Get())->keys.access_key_id == "K2") break;
    std::this_thread::yield();
  }
  EXPECT_TRUE(cache->temporary());
}

TEST(CredentialCache, WaitsForNewKeysWithinTheMandatoryMarginAndKeepsGoodOldOnesOnFailure) {
  auto s = std::make_shared<FakeSource::State>();
  auto cache = Cache(s);
  ASSERT_EQ((*cache->Get())->keys.access_key_id, "K1");
  SetClock(s, 1000000 + 3600 - 600 + 1);  // within 10 minutes of expiring
  EXPECT_EQ((*cache->Get())->keys.access_key_id, "K2");
  // A renewal that fails while the keys are still good: they are used.
  SetClock(s, 1000000 + 3600 - 599 + 3600 - 300);  // K2 came at 3600 - 599
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->fail = true;
  }
  EXPECT_EQ((*cache->Get())->keys.access_key_id, "K2");
  // Past their expiration, with no new ones: an error naming the source.
  SetClock(s, 1000000 + 3 * 3600);
  auto late = cache->Get();
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.status().message().find("fake"), std::string::npos);
}

TEST(CredentialCache, ARefusedKeyIsRenewedOnceForAllWhoSentIt) {
  auto s = std::make_shared<FakeSource::State>();
  auto cache = Cache(s);
  auto first = *cache->Get();
  bool renewed = false;
  auto second = cache->Refresh(*first, &renewed);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(renewed);
  EXPECT_EQ((*second)->keys.access_key_id, "K2");
  // Another request that was sent with K1 finds K2 there: no fetch.
  auto third = cache->Refresh(*first, &renewed);
  EXPECT_EQ((*third)->keys.access_key_id, "K2");
  EXPECT_TRUE(renewed);
  EXPECT_EQ(cache->fetches(), 2u);
  // Static keys fetched again are the same: nothing new to send with.
  auto fixed = CredentialCache::Make(FixedKeys({"A", "B", ""}, "fixed"));
  auto a = *fixed->Get();
  ASSERT_TRUE(fixed->Refresh(*a, &renewed).ok());
  EXPECT_FALSE(renewed);
}

// A process forks (a DataLoader worker) while its background renewal is
// under way: the child renews on its own, never waiting on the parent's
// thread, which it does not have.
TEST(CredentialCache, AForkedChildRenewsOnItsOwn) {
  auto s = std::make_shared<FakeSource::State>();
  s->holder = ::getpid();
  auto cache = Cache(s);
  ASSERT_TRUE(cache->Get().ok());
  SetClock(s, 1000000 + 3600 - 900 + 1);
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->hold = true;
  }
  ASSERT_TRUE(cache->Get().ok());  // starts the background renewal, which holds
  {
    std::unique_lock<std::mutex> lock(s->mu);
    s->cv.wait(lock, [&] { return s->held == 1; });
  }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    s->clock = 1000000 + 3600 - 60;  // mandatory now: the child must fetch itself
    auto got = cache->Get();
    ::_exit(got.ok() && (*got)->keys.access_key_id == "K2" ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(testing::WaitExit(child, 120), 0) << "the child hung or failed";
  (void)status;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->hold = false;
    s->cv.notify_all();
  }
}

}  // namespace
}  // namespace shardkit
