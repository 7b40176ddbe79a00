// Replies judged and requests' retry budgets (storage/remote/retry.h).
#include "storage/remote/retry.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "base/humanize.h"

namespace shardkit {

Attempt Fail(Status s) {
  Attempt a;
  a.verdict = Attempt::kFail;
  a.error = std::move(s);
  return a;
}

Attempt Retry(std::string why, bool progress) {
  Attempt a;
  a.verdict = Attempt::kRetry;
  a.why = std::move(why);
  a.progress = progress;
  return a;
}

std::string XmlField(const std::string& body, const std::string& tag) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  const size_t b = body.find(open);
  if (b == std::string::npos) return "";
  const size_t e = body.find(close, b + open.size());
  if (e == std::string::npos) return "";
  return body.substr(b + open.size(), std::min<size_t>(e - b - open.size(), 300));
}

std::string XmlText(std::string s) {
  const std::pair<const char*, const char*> entities[] = {
      {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&apos;", "'"}, {"&amp;", "&"}};
  for (const auto& [from, to] : entities) {
    for (size_t i = 0; (i = s.find(from, i)) != std::string::npos; i += std::strlen(to)) {
      s.replace(i, std::strlen(from), to);
    }
  }
  return s;
}

bool ParseContentRange(const std::string& v, uint64_t* first, uint64_t* last, uint64_t* total) {
  unsigned long long f = 0, l = 0, t = 0;
  int used = 0;
  if (v.find('-') == std::string::npos || v.find_first_of("+") != std::string::npos) return false;
  if (std::sscanf(v.c_str(), "bytes %llu-%llu/%llu%n", &f, &l, &t, &used) == 3 &&
      static_cast<size_t>(used) == v.size()) {
    *first = f, *last = l, *total = t;
    return f <= l;
  }
  if (std::sscanf(v.c_str(), "bytes %llu-%llu/*%n", &f, &l, &used) == 2 &&
      static_cast<size_t>(used) == v.size()) {
    *first = f, *last = l, *total = ~uint64_t{0};
    return f <= l;
  }
  return false;
}

bool ParseSize(const std::string& v, uint64_t* out) {
  if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *out = std::stoull(v);
  return true;
}

bool Retryable(long status, const std::string& code) {
  return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 ||
         status == 504 || code == "SlowDown" || code == "RequestTimeout" ||
         code == "InternalError" || code == "ServiceUnavailable";
}

namespace {

// S3's codes for credentials it does not take (any more): worth one refresh.
bool CredentialsRefused(const std::string& code) {
  return code == "ExpiredToken" || code == "InvalidAccessKeyId" || code == "InvalidToken" ||
         code == "TokenRefreshRequired" || code == "UserSuspended" ||
         code == "SignatureDoesNotMatch";
}

// What the user can check, by S3's error code.
std::string Hint(const std::string& code, const ReplyContext& c) {
  if (code == "SignatureDoesNotMatch") {
    return " (the secret key does not match the key id: " + c.credentials + "; " + c.where + ")";
  }
  if (code == "InvalidAccessKeyId" || code == "UserSuspended") {
    return " (the server does not take the key: " + c.credentials + "; " + c.where + ")";
  }
  if (code == "ExpiredToken" || code == "InvalidToken" || code == "TokenRefreshRequired") {
    return " (the session token has expired or is not valid: " + c.credentials + ")";
  }
  if (code == "RequestTimeTooSkewed") return " (this machine's clock is wrong)";
  if (code == "NoSuchBucket") return " (no such bucket at " + c.where + ")";
  if (code == "AccessDenied") return " (" + c.where + "; " + c.credentials + ")";
  return "";
}

}  // namespace

Attempt Judge(const HttpResponse& r, const std::string& shown, const ReplyContext& c) {
  if (r.aborted) return Fail(Status::Aborted(shown + ": read cancelled"));
  if (r.tls_failed) {
    return Fail(Status::IOError(shown + ": " + r.transport_error +
                                " (the server's certificate is not trusted here: AWS_CA_BUNDLE "
                                "names a CA file to trust)"));
  }
  if (r.broken_reply) return Fail(Status::IOError(shown + ": " + r.transport_error));
  if (!r.transport_error.empty()) {
    Attempt a = Retry(r.transport_error);
    a.connect = r.connect_failed;
    return a;
  }
  if (r.status >= 200 && r.status < 300) return Attempt();
  const std::string code = XmlField(r.body, "Code"), message = XmlField(r.body, "Message");
  std::string what = "HTTP " + std::to_string(r.status);
  if (!code.empty()) what += " " + code;
  if (!message.empty()) what += ": " + message;
  if (Retryable(r.status, code)) return Retry(what);
  // A bucket of another region: S3 names it in a header (HEAD has no body)
  // or in the error document.
  std::string region = r.header("x-amz-bucket-region");
  if (region.empty()) region = XmlField(r.body, "Region");
  const bool wrong_region =
      r.status == 301 || code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed" ||
      (!region.empty() && region != c.region && (r.status == 400 || r.status == 403));
  if (wrong_region) {
    Attempt a = Fail(Status::IOError(
        shown + ": " + what + " (the bucket is in " +
        (region.empty() ? std::string("another region") : "region " + region) +
        ", requests were signed for " + c.region + ": set AWS_REGION or the profile's region)"));
    a.wrong_region = true;
    a.region = region;
    return a;
  }
  what += Hint(code, c);
  if (r.status == 412) {
    return Fail(Status::IOError(shown +
                                ": the object changed since it was opened (its ETag no longer "
                                "matches; it was replaced while being read): " +
                                what));
  }
  if (r.status == 404 && code != "NoSuchBucket") {
    return Fail(Status::NotFound(shown + ": no such object (" + what + ")"));
  }
  Attempt a = Fail(Status::IOError(shown + ": " + what));
  a.credentials = CredentialsRefused(code) || (r.status == 403 && code.empty());
  return a;
}

Attempt CheckRange(const std::string& shown, const ObjectInfo& info, uint64_t offset, size_t n,
                   const HttpResponse& r, const ReplyContext& context, size_t* got) {
  *got = 0;
  const std::string asked = std::to_string(offset) + "-" + std::to_string(offset + n - 1);
  if (r.overflow) {
    return Fail(Status::IOError(shown + ": the server sent more than the " + std::to_string(n) +
                                " bytes asked for at offset " + std::to_string(offset)));
  }
  if (r.status == 200 && !r.aborted) {
    return Fail(Status::IOError(shown + ": the server ignores ranged reads (HTTP 200 to a Range "
                                        "request); serve the dataset from one that answers them"));
  }
  if (r.status != 206 || r.aborted) {
    Attempt a = Judge(r, shown, context);
    if (a.verdict != Attempt::kDone) return a;
    return Fail(Status::IOError(shown + ": HTTP " + std::to_string(r.status) +
                                " to a Range request for bytes " + asked +
                                " (a ranged read is answered 206 with those bytes)"));
  }
  uint64_t first = 0, last = 0, total = 0;
  const std::string range = r.header("content-range");
  if (!ParseContentRange(range, &first, &last, &total) || first != offset ||
      last != offset + n - 1 || (total != ~uint64_t{0} && total != info.size)) {
    return Fail(Status::IOError(shown + ": asked for bytes " + asked + "/" +
                                std::to_string(info.size) +
                                ", the server answered Content-Range '" + range + "'"));
  }
  const std::string etag = r.header("etag");
  if (!info.etag.empty() && !etag.empty() && etag != info.etag) {
    return Fail(Status::IOError(shown + ": the object changed since it was opened (ETag " +
                                info.etag + ", now " + etag + ")"));
  }
  *got = std::min(r.body_bytes, n);
  if (r.body_bytes == n) return Attempt();
  // A try that brought a few bytes only (a server that resets after ten,
  // every time) does not start the budget again.
  Attempt a =
      Retry("a reply cut short after " + std::to_string(*got) + " of " + std::to_string(n) +
                " bytes" + (r.transport_error.empty() ? "" : " (" + r.transport_error + ")"),
            *got >= std::min<size_t>(n, kProgressBytes));
  a.bytes = *got;
  return a;
}

RetryBudget::Next RetryBudget::After(const Attempt& a, uint64_t now_ns, double jitter,
                                     const std::string& shown) {
  ++tries_;
  delivered_ += a.bytes;
  if (a.progress) {
    since_ = now_ns;
    failures_ = 0;
  }
  ++failures_;
  Next next;
  const double cap =
      std::min(o_.backoff_max_s, o_.backoff_first_s * double(1u << std::min(failures_, 20)));
  next.wait_s = std::clamp(jitter, 0.0, 1.0) * cap;
  const double stalled = double(now_ns - since_) * 1e-9 + next.wait_s;
  // Progress buys time at kMinRetryRate at most: a server that brings some
  // bytes every try but keeps failing ends too, however it fails.
  const double spent = double(now_ns - start_) * 1e-9 + next.wait_s;
  const bool crawling = spent > o_.retry_seconds + double(delivered_) / kMinRetryRate;
  if (stalled > o_.retry_seconds || crawling || (a.connect && failures_ > 4)) {
    next.give_up = true;
    next.error =
        Status::IOError(
            shown + ": " + a.why +
            (crawling && stalled <= o_.retry_seconds
                 ? " again and again (" + FormatBytes(double(delivered_)) +
                       " came in retries, slower than " + FormatBytes(kMinRetryRate) + "/s)"
                 : std::string()) +
            " (gave up after " + std::to_string(tries_) + (tries_ == 1 ? " try" : " tries") +
            " in " + FormatDuration(double(now_ns - start_) * 1e-9) +
            "; SHARDKIT_RETRY_SECONDS sets how long to keep trying)")
            .MarkTransient();
  }
  return next;
}

}  // namespace shardkit
