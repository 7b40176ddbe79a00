// The rules object storage is read by, without a server: what each reply
// means (statuses, S3's error codes, a region or credentials refused, a
// TLS failure), what a ranged GET's reply must hold (Content-Range, ETag,
// short and long bodies), and the retry budget (backoff, progress, a
// crawling server, refused connections) on a clock the test moves.
#include "storage/remote/retry.h"

#include <gtest/gtest.h>

namespace shardkit {
namespace {

HttpResponse Reply(long status, std::string body = "",
                   std::map<std::string, std::string> headers = {}) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  r.headers = std::move(headers);
  return r;
}

std::string S3Error(const std::string& code, const std::string& extra = "") {
  return "<?xml version=\"1.0\"?><Error><Code>" + code + "</Code><Message>m</Message>" + extra +
         "</Error>";
}

ReplyContext Context() {
  ReplyContext c;
  c.where = "http://127.0.0.1:7480, from AWS_ENDPOINT_URL";
  c.credentials = "credentials from the environment (AWS_ACCESS_KEY_ID)";
  c.region = "us-east-1";
  return c;
}

TEST(ReplyJudgement, ThrottlingAndServerTroubleAreRetriedOthersFailAtOnce) {
  for (long status : {408L, 429L, 500L, 502L, 503L, 504L}) {
    EXPECT_EQ(Judge(Reply(status), "s3://b/k", Context()).verdict, Attempt::kRetry) << status;
  }
  for (const char* code : {"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable"}) {
    EXPECT_EQ(Judge(Reply(400, S3Error(code)), "s3://b/k", Context()).verdict, Attempt::kRetry)
        << code;
  }
  EXPECT_EQ(Judge(Reply(200), "s3://b/k", Context()).verdict, Attempt::kDone);
  const Attempt nf = Judge(Reply(404, S3Error("NoSuchKey")), "s3://b/k", Context());
  ASSERT_EQ(nf.verdict, Attempt::kFail);
  EXPECT_TRUE(nf.error.IsNotFound());
  const Attempt nb = Judge(Reply(404, S3Error("NoSuchBucket")), "s3://b/k", Context());
  EXPECT_FALSE(nb.error.IsNotFound());  // a missing bucket is a setting, not a missing file
  EXPECT_NE(nb.error.message().find("no such bucket at http://127.0.0.1:7480"), std::string::npos);
  const Attempt changed = Judge(Reply(412), "s3://b/k", Context());
  EXPECT_NE(changed.error.message().find("the object changed since it was opened"),
            std::string::npos);
}

TEST(ReplyJudgement, RefusedCredentialsAreWorthOneRenewalAndNameTheirSource) {
  for (const char* code : {"ExpiredToken", "InvalidAccessKeyId", "InvalidToken", "UserSuspended",
                           "SignatureDoesNotMatch", "TokenRefreshRequired"}) {
    const Attempt a = Judge(Reply(403, S3Error(code)), "s3://b/k", Context());
    ASSERT_EQ(a.verdict, Attempt::kFail) << code;
    EXPECT_TRUE(a.credentials) << code;
    EXPECT_NE(a.error.message().find("the environment (AWS_ACCESS_KEY_ID)"), std::string::npos)
        << a.error.message();
  }
  EXPECT_TRUE(Judge(Reply(403), "s3://b/k", Context()).credentials);  // a HEAD has no body
  const Attempt denied = Judge(Reply(403, S3Error("AccessDenied")), "s3://b/k", Context());
  EXPECT_FALSE(denied.credentials);
  EXPECT_NE(denied.error.message().find("from AWS_ENDPOINT_URL"), std::string::npos);
}

TEST(ReplyJudgement, ABucketOfAnotherRegionIsNamedFromTheHeaderOrTheBody) {
  const Attempt head =
      Judge(Reply(301, "", {{"x-amz-bucket-region", "eu-west-1"}}), "s3://b/k", Context());
  ASSERT_EQ(head.verdict, Attempt::kFail);
  EXPECT_TRUE(head.wrong_region);
  EXPECT_EQ(head.region, "eu-west-1");
  EXPECT_NE(head.error.message().find("the bucket is in region eu-west-1"), std::string::npos);
  const Attempt body =
      Judge(Reply(400, S3Error("AuthorizationHeaderMalformed", "<Region>ap-south-1</Region>")),
            "s3://b/k", Context());
  EXPECT_TRUE(body.wrong_region);
  EXPECT_EQ(body.region, "ap-south-1");
  const Attempt unnamed = Judge(Reply(301, S3Error("PermanentRedirect")), "s3://b/k", Context());
  EXPECT_TRUE(unnamed.wrong_region);
  EXPECT_EQ(unnamed.region, "");
}

TEST(ReplyJudgement, TransportFailuresAreRetriedButAnUntrustedCertificateIsNot) {
  HttpResponse reset;
  reset.transport_error = "Connection reset by peer";
  EXPECT_EQ(Judge(reset, "s3://b/k", Context()).verdict, Attempt::kRetry);
  HttpResponse handshake;
  handshake.transport_error = "OpenSSL SSL_connect: Connection reset by peer";
  handshake.connect_failed = true;  // how HttpClient marks a handshake cut short
  const Attempt h = Judge(handshake, "s3://b/k", Context());
  EXPECT_EQ(h.verdict, Attempt::kRetry);
  EXPECT_TRUE(h.connect);
  HttpResponse cert;
  cert.transport_error = "SSL certificate problem: self-signed certificate";
  cert.tls_failed = true;
  const Attempt c = Judge(cert, "s3://b/k", Context());
  ASSERT_EQ(c.verdict, Attempt::kFail);
  EXPECT_NE(c.error.message().find("AWS_CA_BUNDLE"), std::string::npos);
  HttpResponse aborted;
  aborted.aborted = true;
  EXPECT_TRUE(Judge(aborted, "s3://b/k", Context()).error.IsAborted());
}

TEST(RangeReplies, OnlyExactlyTheBytesAskedForAreTaken) {
  ObjectInfo info;
  info.size = 1000;
  info.etag = "\"e1\"";
  size_t got = 0;
  auto range = [](const char* v) {
    return std::map<std::string, std::string>{{"content-range", v}};
  };
  HttpResponse whole = Reply(206, "", range("bytes 100-199/1000"));
  whole.body_bytes = 100;
  EXPECT_EQ(CheckRange("s3://b/k", info, 100, 100, whole, Context(), &got).verdict, Attempt::kDone);
  EXPECT_EQ(got, 100u);
  for (const char* bad : {"bytes 100-198/1000", "bytes 101-200/1000", "bytes 100-199/999",
                          "bytes -100-199/1000", "bytes 100-199", "items 100-199/1000", ""}) {
    HttpResponse r = Reply(206, "", range(bad));
    r.body_bytes = 100;
    EXPECT_EQ(CheckRange("s3://b/k", info, 100, 100, r, Context(), &got).verdict, Attempt::kFail)
        << bad;
  }
  HttpResponse star = Reply(206, "", range("bytes 100-199/*"));
  star.body_bytes = 100;
  EXPECT_EQ(CheckRange("s3://b/k", info, 100, 100, star, Context(), &got).verdict, Attempt::kDone);
  HttpResponse other =
      Reply(206, "", {{"content-range", "bytes 100-199/1000"}, {"etag", "\"e2\""}});
  other.body_bytes = 100;
  EXPECT_NE(CheckRange("s3://b/k", info, 100, 100, other, Context(), &got)
                .error.message()
                .find("changed since it was opened"),
            std::string::npos);
  HttpResponse ignored = Reply(200);
  EXPECT_NE(CheckRange("s3://b/k", info, 100, 100, ignored, Context(), &got)
                .error.message()
                .find("ignores ranged reads"),
            std::string::npos);
  HttpResponse longer = Reply(206, "", range("bytes 100-199/1000"));
  longer.overflow = true;
  EXPECT_EQ(CheckRange("s3://b/k", info, 100, 100, longer, Context(), &got).verdict,
            Attempt::kFail);
}

TEST(RangeReplies, AShortBodyIsResumedAndCountsAsProgressOnlyWhenItBroughtEnough) {
  ObjectInfo info;
  info.size = 1 << 20;
  size_t got = 0;
  HttpResponse cut = Reply(206, "", {{"content-range", "bytes 0-1048575/1048576"}});
  cut.body_bytes = 100000;
  cut.transport_error = "transfer closed with bytes remaining";
  Attempt a = CheckRange("s3://b/k", info, 0, 1 << 20, cut, Context(), &got);
  EXPECT_EQ(a.verdict, Attempt::kRetry);
  EXPECT_EQ(got, 100000u);  // resumed from the first missing byte
  EXPECT_TRUE(a.progress);
  cut.body_bytes = 10;
  a = CheckRange("s3://b/k", info, 0, 1 << 20, cut, Context(), &got);
  EXPECT_FALSE(a.progress);  // ten bytes then a reset, every time, does not renew the budget
}

constexpr uint64_t kSecond = 1000000000ull;

TEST(RetryBudget, BacksOffWithFullJitterUpToItsCapAndGivesUpAfterItsTime) {
  RetryOptions o;
  o.retry_seconds = 10;
  o.backoff_first_s = 0.05;
  o.backoff_max_s = 8;
  RetryBudget b(o, 0);
  uint64_t now = 0;
  double last_cap = 0;
  for (int i = 1; i <= 8; ++i) {
    const RetryBudget::Next n = b.After(Retry("HTTP 503"), now, 1.0, "s3://b/k");
    ASSERT_FALSE(n.give_up) << i;
    EXPECT_GE(n.wait_s, last_cap);  // the cap doubles, to at most backoff_max_s
    EXPECT_LE(n.wait_s, 8.0);
    last_cap = n.wait_s;
    EXPECT_EQ(b.After(Retry("x"), now, 0.0, "s3://b/k").wait_s, 0.0);  // jitter 0: no wait
    now += 1;
  }
  const RetryBudget::Next end = b.After(Retry("HTTP 503"), 11 * kSecond, 0.5, "s3://b/k");
  ASSERT_TRUE(end.give_up);
  EXPECT_NE(end.error.message().find("s3://b/k: HTTP 503"), std::string::npos);
  EXPECT_NE(end.error.message().find("SHARDKIT_RETRY_SECONDS"), std::string::npos);
}

TEST(RetryBudget, ProgressRenewsTheBudgetButACrawlingServerStillEnds) {
  RetryOptions o;
  o.retry_seconds = 10;
  RetryBudget b(o, 0);
  Attempt progress = Retry("cut short", /*progress=*/true);
  progress.bytes = 64 << 10;
  // A try every 9 s, each bringing 64 KiB: the budget renews, but the
  // whole may not take longer than retry_seconds plus a second per 64 KiB.
  uint64_t now = 0;
  bool ended = false;
  for (int i = 0; i < 100 && !ended; ++i) {
    now += 9 * kSecond;
    const RetryBudget::Next n = b.After(progress, now, 0.0, "s3://b/k");
    if (n.give_up) {
      ended = true;
      EXPECT_NE(n.error.message().find("again and again"), std::string::npos);
    }
  }
  EXPECT_TRUE(ended);
}

TEST(RetryBudget, RefusedConnectionsEndAfterFiveInARow) {
  RetryOptions o;
  o.retry_seconds = 1000;
  RetryBudget b(o, 0);
  Attempt refused = Retry("Connection refused");
  refused.connect = true;
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(b.After(refused, 0, 0.0, "s3://b/k").give_up);
  EXPECT_TRUE(b.After(refused, 0, 0.0, "s3://b/k").give_up);
}

TEST(Xml, EntitiesAndFieldsAsS3WritesThem) {
  EXPECT_EQ(XmlText("a&amp;b&lt;c&gt;&quot;&apos;"), "a&b<c>\"'");
  EXPECT_EQ(XmlText("&amp;lt;"), "&lt;");  // one pass: no double decoding
  EXPECT_EQ(XmlField("<R><Code>X</Code></R>", "Code"), "X");
  EXPECT_EQ(XmlField("<R><Code>X</R>", "Code"), "");
  uint64_t size = 0;
  EXPECT_TRUE(ParseSize("123", &size));
  EXPECT_EQ(size, 123u);
  EXPECT_FALSE(ParseSize("12a", &size));
  EXPECT_FALSE(ParseSize("-1", &size));
  EXPECT_FALSE(ParseSize("99999999999999999999", &size));
}

}  // namespace
}  // namespace shardkit
