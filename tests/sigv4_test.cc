// SigV4 against references made by others: AWS's documented examples for S3,
// and signatures botocore (python3-botocore's S3SigV4Auth) made for the
// requests shardkit sends (path-style keys with spaces, UTF-8, '+', a session
// token). And the object-storage settings read from the environment.
#include "storage/remote/sigv4.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "storage/remote/digest.h"
#include "storage/remote/object_store.h"

namespace shardkit {
namespace {

constexpr std::time_t k20130524 = 1369353600;  // AWS's examples
constexpr std::time_t k20261125T14 = 1795615200;

std::string Authorization(const sigv4::Signed& s) {
  for (const auto& h : s.headers) {
    if (h.rfind("Authorization: ", 0) == 0) return h.substr(15);
  }
  return "";
}

TEST(SigV4, AwsDocumentedGetObjectWithRange) {
  sigv4::Request r;
  r.host = "examplebucket.s3.amazonaws.com";
  r.encoded_path = "/test.txt";
  r.headers = {{"Range", "bytes=0-9"}};
  sigv4::Credentials c{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
  const sigv4::Signed s = sigv4::Sign(r, c, "us-east-1", k20130524);
  EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_NE(Authorization(s).find("SignedHeaders=host;range;x-amz-content-sha256;x-amz-date"),
            std::string::npos);
}

TEST(SigV4, AwsDocumentedListObjectsSortsTheQuery) {
  sigv4::Request r;
  r.host = "examplebucket.s3.amazonaws.com";
  r.encoded_path = "/";
  r.query = {{"prefix", "J"}, {"max-keys", "2"}};
  sigv4::Credentials c{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
  EXPECT_EQ(sigv4::Sign(r, c, "us-east-1", k20130524).signature,
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
  EXPECT_EQ(sigv4::CanonicalQuery(r.query), "max-keys=2&prefix=J");
}

TEST(SigV4, AwsDocumentedQueryWithoutValue) {
  sigv4::Request r;
  r.host = "examplebucket.s3.amazonaws.com";
  r.encoded_path = "/";
  r.query = {{"lifecycle", ""}};
  sigv4::Credentials c{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
  EXPECT_EQ(sigv4::Sign(r, c, "us-east-1", k20130524).signature,
            "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

// Made with botocore 1.29 (Debian 12): S3SigV4Auth(Credentials(ak, sk, token), "s3", region)
// on an AWSRequest of the same method and URL at 2026-11-25T14:00:00Z.
TEST(SigV4, MatchesBotocoreOnPathStyleKeys) {
  struct Case {
    const char* method;
    const char* host;
    const char* raw_path;
    const char *ak, *sk, *token, *region, *signature;
  } cases[] = {
      {"GET", "127.0.0.1:7480", "/bucket/prefix/shard-00001.sks", "AKIDEXAMPLE",
       "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "", "us-east-1",
       "e951d164df04ca801dda8a3e75fb416e0f2e9f474f626b5f277fa58c6c904ae2"},
      {"HEAD", "127.0.0.1:7480", "/my-bucket/a b/\xc3\xa9t\xc3\xa9/x+y.sks", "AK2", "secret2",
       "tok/en+=", "default", "de76d706f60047e1e1221469c77a19b479c21f376a116c1b28d8d2e01cadd019"},
      {"GET", "s3.eu-west-1.amazonaws.com", "/b/k~_-./x", "AK3", "s3", "", "eu-west-1",
       "e112720bf32c3904bf52b8ba3aab1d75ddfd0232ad1b200c4cf483e0a0707b70"},
  };
  for (const Case& k : cases) {
    sigv4::Request r;
    r.method = k.method;
    r.host = k.host;
    r.encoded_path = sigv4::UriEncode(k.raw_path, /*encode_slash=*/false);
    sigv4::Credentials c{k.ak, k.sk, k.token};
    const sigv4::Signed s = sigv4::Sign(r, c, k.region, k20261125T14);
    EXPECT_EQ(s.signature, k.signature) << k.raw_path << "\n" << s.canonical_request;
    if (k.token[0] != '\0') {
      EXPECT_NE(std::find(s.headers.begin(), s.headers.end(),
                          std::string("x-amz-security-token: ") + k.token),
                s.headers.end());
    }
  }
}

TEST(SigV4, UriEncodeKeepsOnlyUnreservedBytes) {
  EXPECT_EQ(sigv4::UriEncode("a b/c+d~e%", false), "a%20b/c%2Bd~e%25");
  EXPECT_EQ(sigv4::UriEncode("a/b", true), "a%2Fb");
  EXPECT_EQ(sigv4::UriEncode("\xff", false), "%FF");
}

// The environment of one test, restored after it.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* name :
         {"AWS_ENDPOINT_URL_S3", "S3_ENDPOINT_URL", "AWS_ENDPOINT_URL", "AWS_REGION",
          "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
          "AWS_NO_SIGN_REQUEST", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE",
          "SHARDKIT_TLS_VERIFY", "SHARDKIT_RETRY_SECONDS", "SHARDKIT_STALL_SECONDS", "HOME"}) {
      const char* v = getenv(name);
      saved_.emplace_back(name, v != nullptr ? std::optional<std::string>(v) : std::nullopt);
      unsetenv(name);
    }
    setenv("HOME", "/nonexistent-shardkit-home", 1);
    for (const auto& [k, v] : vars) setenv(k, v, 1);
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v) {
        setenv(k.c_str(), v->c_str(), 1);
      } else {
        unsetenv(k.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(ObjectStoreOptions, TheMostSpecificEndpointWins) {
  {
    ScopedEnv env({{"AWS_ENDPOINT_URL", "http://a:1"}, {"S3_ENDPOINT_URL", "http://b:2"}});
    auto o = ObjectStoreOptions::FromEnvironment();
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_EQ(o->endpoint, "http://b:2");
    EXPECT_EQ(o->endpoint_source, "S3_ENDPOINT_URL");
  }
  {
    ScopedEnv env({{"AWS_ENDPOINT_URL", "http://a:1"},
                   {"S3_ENDPOINT_URL", "http://b:2"},
                   {"AWS_ENDPOINT_URL_S3", "http://c:3"}});
    EXPECT_EQ(ObjectStoreOptions::FromEnvironment()->endpoint, "http://c:3");
  }
  {
    ScopedEnv env({{"AWS_DEFAULT_REGION", "eu-north-1"}});
    auto o = ObjectStoreOptions::FromEnvironment();
    EXPECT_EQ(o->endpoint, "https://s3.eu-north-1.amazonaws.com");
    EXPECT_EQ(o->region, "eu-north-1");
    EXPECT_FALSE(o->sign);  // no keys anywhere: a public bucket, unsigned
  }
}

TEST(ObjectStoreOptions, KeysComeFromTheEnvironmentOrTheCredentialsFile) {
  {
    ScopedEnv env({{"AWS_ACCESS_KEY_ID", "AK"},
                   {"AWS_SECRET_ACCESS_KEY", "SK"},
                   {"AWS_SESSION_TOKEN", "T"},
                   {"AWS_REGION", "r1"},
                   {"AWS_DEFAULT_REGION", "r2"}});
    auto o = ObjectStoreOptions::FromEnvironment();
    ASSERT_TRUE(o.ok());
    EXPECT_TRUE(o->sign);
    EXPECT_EQ(o->credentials.access_key_id, "AK");
    EXPECT_EQ(o->credentials.session_token, "T");
    EXPECT_EQ(o->region, "r1");
  }
  {
    ScopedEnv env({{"AWS_ACCESS_KEY_ID", "AK"}});
    auto o = ObjectStoreOptions::FromEnvironment();
    ASSERT_FALSE(o.ok());
    EXPECT_NE(o.status().message().find("AWS_SECRET_ACCESS_KEY"), std::string::npos);
  }
  char path[] = "/tmp/shardkit-credentials-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string ini =
      "[default]\naws_access_key_id = D1\naws_secret_access_key=D2\n"
      "[other]\n  aws_access_key_id=O1\naws_secret_access_key = O2\r\n";
  ASSERT_EQ(write(fd, ini.data(), ini.size()), static_cast<ssize_t>(ini.size()));
  close(fd);
  {
    ScopedEnv env({{"AWS_SHARED_CREDENTIALS_FILE", path}});
    EXPECT_EQ(ObjectStoreOptions::FromEnvironment()->credentials.access_key_id, "D1");
  }
  {
    ScopedEnv env({{"AWS_SHARED_CREDENTIALS_FILE", path}, {"AWS_PROFILE", "other"}});
    auto o = ObjectStoreOptions::FromEnvironment();
    EXPECT_EQ(o->credentials.secret_access_key, "O2");
  }
  {
    ScopedEnv env({{"AWS_SHARED_CREDENTIALS_FILE", path}, {"AWS_PROFILE", "missing"}});
    EXPECT_FALSE(ObjectStoreOptions::FromEnvironment().ok());
  }
  {
    ScopedEnv env({{"AWS_SHARED_CREDENTIALS_FILE", path}, {"AWS_NO_SIGN_REQUEST", "1"}});
    EXPECT_FALSE(ObjectStoreOptions::FromEnvironment()->sign);
  }
  unlink(path);
}

TEST(ObjectStoreOptions, UnusableValuesAreNamed) {
  for (auto [name, value] :
       std::vector<std::pair<const char*, const char*>>{{"AWS_ENDPOINT_URL", "127.0.0.1:7480"},
                                                        {"AWS_ENDPOINT_URL", "ftp://x"},
                                                        {"SHARDKIT_TLS_VERIFY", "maybe"},
                                                        {"SHARDKIT_RETRY_SECONDS", "-1"},
                                                        {"SHARDKIT_RETRY_SECONDS", "ten"},
                                                        {"SHARDKIT_STALL_SECONDS", "0"}}) {
    ScopedEnv env({{name, value}});
    auto o = ObjectStoreOptions::FromEnvironment();
    ASSERT_FALSE(o.ok()) << name << "=" << value;
    EXPECT_NE(o.status().message().find(name), std::string::npos) << o.status().message();
  }
  ScopedEnv env({{"SHARDKIT_TLS_VERIFY", "0"}, {"SHARDKIT_RETRY_SECONDS", "2.5"}});
  auto o = ObjectStoreOptions::FromEnvironment();
  EXPECT_FALSE(o->http.verify_tls);
  EXPECT_DOUBLE_EQ(o->retry.retry_seconds, 2.5);
}

TEST(SigV4, Md5AndItsStreamAgreeWithRfc1321) {
  EXPECT_EQ(digest::Hex(digest::Md5("")), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(digest::Hex(digest::Md5("abc")), "900150983cd24fb0d6963f7d28e17f72");
  digest::Md5Stream m;
  m.Update("a");
  m.Update("");
  m.Update("bc");
  EXPECT_EQ(digest::Hex(m.Finish()), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(digest::Hex(m.Finish()), "d41d8cd98f00b204e9800998ecf8427e");  // started again
}

// S3's ETag: the MD5 of an object written in one PUT; for N parts, the MD5
// of the parts' MD5s and "-N". Given in pieces that do not line up with the
// parts, as a file is read; the reference is the definition, part by part.
TEST(ObjectETag, IsS3sWhateverThePiecesItIsGivenIn) {
  for (const size_t size : {size_t{0}, size_t{1}, kObjectPartBytes, kObjectPartBytes + 1,
                            2 * kObjectPartBytes + 12345}) {
    std::string data(size, '\0');
    for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 2654435761u >> 13);
    std::string want;
    if (size <= kObjectPartBytes) {
      want = "\"" + digest::Hex(digest::Md5(data)) + "\"";
    } else {
      std::string md5s;
      size_t parts = 0;
      for (size_t at = 0; at < size; at += kObjectPartBytes, ++parts) {
        md5s += digest::Md5(std::string_view(data).substr(at, kObjectPartBytes));
      }
      want = "\"" + digest::Hex(digest::Md5(md5s)) + "-" + std::to_string(parts) + "\"";
    }
    ObjectETag tag;
    for (size_t at = 0; at < size; at += 999'983) {
      tag.Update(std::string_view(data).substr(at, 999'983));
    }
    EXPECT_EQ(tag.size(), size);
    EXPECT_EQ(tag.Finish(), want) << size << " bytes";
  }
}

TEST(ObjectStoreUrls, OnlyTheirSchemesAreObjectStorage) {
  EXPECT_TRUE(IsObjectStoreUrl("s3://b/p"));
  EXPECT_TRUE(IsObjectStoreUrl("http://h/p"));
  EXPECT_TRUE(IsObjectStoreUrl("https://h/p"));
  EXPECT_FALSE(IsObjectStoreUrl("/data/s3://x"));
  EXPECT_FALSE(IsObjectStoreUrl("s3:/b"));
  EXPECT_FALSE(IsObjectStoreUrl("S3://b"));
}

}  // namespace
}  // namespace shardkit
