// SigV4 against references made by others: AWS's documented examples for S3,
// and signatures botocore (python3-botocore's S3SigV4Auth) made for the
// requests shardkit sends (path-style keys with spaces, UTF-8, '+', a session
// token). And the digests S3 names uploads by.
#include "storage/remote/sigv4.h"

#include <gtest/gtest.h>

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

// The requests the credential work added, against botocore 1.29 at
// 2026-11-25T14:00:00Z: a virtual-hosted GET (the bucket in the host), a
// PUT whose body hash, Content-MD5 and metadata are all signed (SignedHeaders
// names them), and an STS AssumeRole POST (service sts, a form body).
TEST(SigV4, MatchesBotocoreOnVirtualHostsSignedBodiesAndSts) {
  sigv4::Request get;
  get.host = "my-bucket.s3.eu-west-1.amazonaws.com";
  get.encoded_path = sigv4::UriEncode("/a b/k.sks", false);
  EXPECT_EQ(sigv4::Sign(get, {"AKV", "skv", ""}, "eu-west-1", k20261125T14).signature,
            "4a4c0864220f2b6fc8e526053126668d42c7b1fe1f87ba91b58a4096db12deca");

  const std::string body = "hello shard";
  EXPECT_EQ(digest::Base64(digest::Md5(body)), "oEV+bzcfgcWLo2qoLF/4qQ==");
  sigv4::Request put;
  put.method = "PUT";
  put.host = "127.0.0.1:7480";
  put.encoded_path = "/bucket/p/shard-00000.sks";
  put.query = {{"partNumber", "1"}, {"uploadId", "2~x"}};
  put.headers = {{"Content-MD5", "oEV+bzcfgcWLo2qoLF/4qQ=="},
                 {"x-amz-meta-shardkit-crc32c", "0a1b2c3d"}};
  put.payload_sha256 = digest::Sha256Hex(body);
  const sigv4::Signed sp = sigv4::Sign(put, {"AKP", "skp", "tok"}, "default", k20261125T14);
  EXPECT_EQ(sp.signature, "ad655d041df466de50b2d29774e9e88df7abc55548fbee763206703491f4628f");
  EXPECT_NE(Authorization(sp).find("SignedHeaders=content-md5;host;x-amz-content-sha256;"
                                   "x-amz-date;x-amz-meta-shardkit-crc32c;x-amz-security-token"),
            std::string::npos);

  const std::string form =
      "Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%"
      "2Freader&RoleSessionName=s1&DurationSeconds=900";
  sigv4::Request sts;
  sts.method = "POST";
  sts.host = "sts.eu-west-1.amazonaws.com";
  sts.headers = {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"}};
  sts.payload_sha256 = digest::Sha256Hex(form);
  EXPECT_EQ(sigv4::Sign(sts, {"AKS", "sks", ""}, "eu-west-1", k20261125T14, "sts").signature,
            "810e057ec9b8fae3952c0e9c66579a00e9b4e2d9dbddaa235cf1e93d6c26b693");
}

TEST(SigV4, UriEncodeKeepsOnlyUnreservedBytes) {
  EXPECT_EQ(sigv4::UriEncode("a b/c+d~e%", false), "a%20b/c%2Bd~e%25");
  EXPECT_EQ(sigv4::UriEncode("a/b", true), "a%2Fb");
  EXPECT_EQ(sigv4::UriEncode("\xff", false), "%FF");
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
