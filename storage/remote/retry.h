// The rules object storage is read by, as a unit that tests reach without a
// server: what a reply means (done, worth another try, or an error, and with
// which words), what a ranged GET's reply must hold, and how long a request
// is retried (exponential backoff with full jitter, a budget that progress
// renews). Pure functions over an HttpResponse and a clock reading the caller
// passes; nothing here sends a request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "storage/remote/http_client.h"

namespace shardkit {

// One try of a request, judged.
struct Attempt {
  enum Verdict { kDone, kRetry, kFail } verdict = kDone;
  Status error;           // kFail
  std::string why;        // kRetry: for the message when the retries run out
  bool progress = false;  // kRetry: enough bytes arrived, the budget starts again
  uint64_t bytes = 0;     // of the data asked for, the bytes this try delivered
  bool connect = false;   // kRetry: no connection could be made
  // kFail or kRetry: the server refused the request's credentials (S3's
  // ExpiredToken, InvalidAccessKeyId, InvalidToken, a 400/403 saying so): the
  // caller may refresh them once and send it again.
  bool credentials = false;
  // kFail: the bucket is in another region; `region` names it where the
  // reply did (x-amz-bucket-region, or the error document's <Region>).
  bool wrong_region = false;
  std::string region;
};
Attempt Fail(Status s);
Attempt Retry(std::string why, bool progress = false);

// What an object was when it was opened: every ranged GET is checked against it.
struct ObjectInfo {
  uint64_t size = 0;
  std::string etag;           // pinned at open: every GET says If-Match
  std::string last_modified;  // servers without ETags: If-Unmodified-Since
  // The CRC32C of its bytes its uploader stored beside them
  // (x-amz-meta-shardkit-crc32c: shardkit's uploads carry it).
  std::optional<uint32_t> stored_crc32c;
};

// The text of the first <tag>...</tag> in an XML body (at most 300
// characters; S3's error documents and listings), entities left as they are.
std::string XmlField(const std::string& body, const std::string& tag);
// `s` with the five XML entities S3 escapes replaced by their characters.
std::string XmlText(std::string s);
// "bytes FIRST-LAST/TOTAL" (TOTAL may be "*": *total is then ~0).
bool ParseContentRange(const std::string& v, uint64_t* first, uint64_t* last, uint64_t* total);
// A Content-Length: decimal digits only, at most 19 of them.
bool ParseSize(const std::string& v, uint64_t* out);
// Statuses (and S3 error codes) worth another try: throttling and the
// server's own trouble.
bool Retryable(long status, const std::string& code);

// How replies are described to the user: the endpoint and where its setting
// came from, and where the credentials came from (never the keys).
struct ReplyContext {
  std::string where;        // "http://127.0.0.1:7480, from AWS_ENDPOINT_URL"
  std::string credentials;  // "credentials from the environment (AWS_ACCESS_KEY_ID)", ...
  std::string region;       // the region requests are signed for
};

// A request's outcome by its transport and status alone (2xx: done; the
// caller checks more). `shown` names what was asked for.
Attempt Judge(const HttpResponse& r, const std::string& shown, const ReplyContext& context);

// A reply to a GET of bytes [offset, offset + n) of the object `info`
// describes: done when it holds exactly those bytes; a body cut short is a
// retry (*got: the bytes of it that arrived, to resume from); anything else
// (a 200 to a Range request, another Content-Range or ETag, more bytes than
// asked for) an error naming `shown`.
Attempt CheckRange(const std::string& shown, const ObjectInfo& info, uint64_t offset, size_t n,
                   const HttpResponse& r, const ReplyContext& context, size_t* got);

struct RetryOptions {
  // How long one request may be retried (backoff included) without progress
  // before its error is returned; 0: no retry.
  double retry_seconds = 120;
  double backoff_first_s = 0.05, backoff_max_s = 8;
};

// A try that brings at least this (or all that was asked) is progress.
inline constexpr size_t kProgressBytes = 64 << 10;
// What progress buys: a request retried with progress is given up once it
// has taken the retry budget plus a second per this many bytes it brought.
inline constexpr double kMinRetryRate = 64 << 10;

// The retry budget of one request: told each try's verdict and the time
// (monotonic ns), it says how long to wait before the next, or the error to
// return. A server that never answers in full ends too: one whose tries
// bring bytes but keep failing is given up at kMinRetryRate; a refused
// connection after 5 tries in a row.
class RetryBudget {
 public:
  RetryBudget(const RetryOptions& options, uint64_t start_ns)
      : o_(options), start_(start_ns), since_(start_ns) {}
  struct Next {
    bool give_up = false;
    double wait_s = 0;  // give_up false: before the next try
    Status error;       // give_up true
  };
  // After a try judged kRetry. `jitter` in [0, 1): the share of the backoff
  // cap to wait (full jitter: uniformly random).
  Next After(const Attempt& a, uint64_t now_ns, double jitter, const std::string& shown);
  int tries() const { return tries_; }

 private:
  const RetryOptions o_;
  const uint64_t start_;
  uint64_t since_;          // the last progress
  uint64_t delivered_ = 0;  // bytes the tries brought
  int tries_ = 0, failures_ = 0;
};

}  // namespace shardkit
