// HttpClient: HTTP(S) requests over libcurl's multi interface. One thread
// drives every transfer of the client, so many requests are in flight at
// once over a pool of kept-alive connections (the read queue's I/O threads
// each wait in Perform while the transfers share the connections); a
// request's body is written straight into the caller's buffer.
//
// Thread-safe: Perform from any number of threads. A process that forks
// (a PyTorch DataLoader worker) gets a fresh transfer thread and fresh
// connections in the child, never the parent's.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace shardkit {

struct HttpClientOptions {
  long connect_timeout_ms = 10000;
  // A transfer that moves no byte for this long is given up (then retried
  // by the caller): a stalled server never hangs a reader. An error reply
  // (not 2xx) is read for this long at most, and its first 64 KiB kept.
  long stall_timeout_s = 30;
  bool verify_tls = true;
  std::string ca_file;  // a CA bundle besides (instead of) the system's
  long max_connections = 256;
};

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD, PUT, POST, DELETE
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string_view body;             // what a PUT or POST sends (the caller keeps it alive)
  // Where a 2xx reply's body goes: into dst (at most dst_capacity bytes;
  // more aborts the transfer as overflow), else into HttpResponse::body (at
  // most max_body bytes). Replies of other statuses keep at most 64 KiB of
  // their body in HttpResponse::body (an error document).
  char* dst = nullptr;
  size_t dst_capacity = 0;
  size_t max_body = 1 << 20;
  bool follow_redirects = false;
  // Limits of this request, where they differ from the client's (0: the
  // client's connect timeout; no limit on the whole): a credential
  // endpoint that exists only inside a cloud is given up at once elsewhere.
  long connect_timeout_ms = 0;
  long timeout_ms = 0;
  // "user:password" for HTTP basic authentication (a URL's own, kept out of
  // the URL so that no message shows it; never sent to another host).
  std::string user_password;
};

struct HttpResponse {
  // Empty when an HTTP exchange completed (whatever its status); else why
  // not: a refused connection, a reset, a timeout, a TLS failure.
  std::string transport_error;
  bool connect_failed = false;  // no connection was made (refused, no such host, the TLS
                                // handshake cut short)
  bool tls_failed = false;      // the server's certificate is not trusted (or the CA file is bad)
  bool broken_reply = false;    // the reply broke HTTP (garbage, HTTP/0.9, a redirect loop or to
                                // another protocol, a header line too long): not worth a retry
  bool aborted = false;         // the abort flag was raised
  bool overflow = false;        // the body was longer than dst_capacity or max_body
  long status = 0;              // the last reply's status (0 if none arrived)
  std::map<std::string, std::string> headers;  // the last reply's, names lower-case
  std::string body;
  size_t body_bytes = 0;  // bytes of a 2xx body written (to dst or body)
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// A request and, once it has ended, its response.
struct HttpCall {
  HttpRequest request;
  HttpResponse response;
};

class HttpClient {
 public:
  explicit HttpClient(HttpClientOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Runs the request to its end. If `abort` is given and becomes true
  // (followed by Wake()), the transfer is dropped at once and the response
  // says aborted.
  HttpResponse Perform(const HttpRequest& request, const std::atomic<bool>* abort = nullptr);
  // Starts call->request and returns; `done` runs on the transfer thread
  // once call->response is complete (keep it short: it holds up every
  // transfer). The call and the buffers its request names live until then.
  void Start(std::shared_ptr<HttpCall> call, std::function<void(HttpCall&)> done,
             const std::atomic<bool>* abort = nullptr);
  // Makes the transfer thread look at the abort flags now.
  void Wake();
  const HttpClientOptions& options() const { return options_; }
  // Connections open now (kept alive or in use), for tests and benchmarks.
  long open_connections();

  struct Impl;

 private:
  Impl* LiveImpl();
  HttpClientOptions options_;
  Impl* impl_ = nullptr;  // replaced (the old one leaked) in a forked child
};

}  // namespace shardkit
