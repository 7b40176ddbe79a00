// The transfer thread: adds submitted transfers to a curl multi handle,
// drives them, hands finished ones back; drops aborted ones.
#include "storage/remote/http_client.h"

#include <curl/curl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

namespace shardkit {
namespace {

constexpr size_t kMaxErrorBody = 64 << 10;

std::once_flag g_curl_init;

struct Transfer {
  std::shared_ptr<HttpCall> call;
  std::function<void(HttpCall&)> done;
  CURL* easy = nullptr;
  const HttpRequest* req = nullptr;
  HttpResponse* resp = nullptr;
  const std::atomic<bool>* abort = nullptr;
  long stall_timeout_s = 30;
  curl_slist* headers = nullptr;
  size_t upload_pos = 0;
  char errbuf[CURL_ERROR_SIZE] = {0};
  // An error reply (not 2xx) is read for this long at most, and 64 KiB of
  // it: a server that sends an endless error document (or trickles one)
  // never holds a request. 0: no error reply yet.
  uint64_t error_deadline_ns = 0;
  bool error_body_cut = false;
};

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

std::string TrimSpace(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

size_t OnHeader(char* p, size_t size, size_t n, void* data) {
  auto* t = static_cast<Transfer*>(data);
  const std::string_view line(p, size * n);
  if (line.rfind("HTTP/", 0) == 0) {  // a status line: a new reply (100, a redirect, the last)
    t->resp->headers.clear();
    const size_t sp = line.find(' ');
    t->resp->status =
        sp == std::string_view::npos ? 0 : std::atol(std::string(line.substr(sp + 1, 3)).c_str());
    t->error_deadline_ns = NowNs() + static_cast<uint64_t>(t->stall_timeout_s) * 1000000000ull;
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    std::string name(line.substr(0, colon));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    t->resp->headers[name] = TrimSpace(line.substr(colon + 1));
  }
  return size * n;
}

size_t OnBody(char* p, size_t size, size_t n, void* data) {
  auto* t = static_cast<Transfer*>(data);
  const size_t len = size * n;
  HttpResponse& r = *t->resp;
  if (r.status < 200 || r.status >= 300) {  // an error document: keep its start
    const size_t keep = std::min(len, kMaxErrorBody - std::min(kMaxErrorBody, r.body.size()));
    r.body.append(p, keep);
    if (keep < len || NowNs() > t->error_deadline_ns) {
      t->error_body_cut = true;  // enough of it: the reply is judged by what came
      return 0;
    }
    return len;
  }
  const HttpRequest& q = *t->req;
  if (q.dst != nullptr) {
    if (r.body_bytes + len > q.dst_capacity) {
      r.overflow = true;
      return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
    }
    std::memcpy(q.dst + r.body_bytes, p, len);
  } else {
    if (r.body.size() + len > q.max_body) {
      r.overflow = true;
      return 0;
    }
    r.body.append(p, len);
  }
  r.body_bytes += len;
  return len;
}

size_t OnUpload(char* p, size_t size, size_t n, void* data) {
  auto* t = static_cast<Transfer*>(data);
  const std::string_view body = t->req->body;
  const size_t len = std::min(size * n, body.size() - t->upload_pos);
  std::memcpy(p, body.data() + t->upload_pos, len);
  t->upload_pos += len;
  return len;
}

}  // namespace

struct HttpClient::Impl {
  explicit Impl(const HttpClientOptions& o) : options(o), pid(::getpid()) {
    std::call_once(g_curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    multi = curl_multi_init();
    curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, o.max_connections);
    curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, o.max_connections);
    thread = std::thread([this] { Loop(); });
  }
  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    curl_multi_wakeup(multi);
    thread.join();
    for (CURL* e : idle) curl_easy_cleanup(e);
    curl_multi_cleanup(multi);
  }

  void Loop();
  void Configure(Transfer* t);
  void Finish(Transfer* t, CURLcode code);
  CURL* TakeEasy() {
    std::lock_guard<std::mutex> lock(mu);
    if (idle.empty()) return curl_easy_init();
    CURL* e = idle.back();
    idle.pop_back();
    return e;
  }

  static curl_socket_t OpenSocket(void* data, curlsocktype, struct curl_sockaddr* a) {
    const curl_socket_t fd = ::socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    if (fd != CURL_SOCKET_BAD) static_cast<Impl*>(data)->sockets.fetch_add(1);
    return fd;
  }
  static int CloseSocket(void* data, curl_socket_t fd) {
    static_cast<Impl*>(data)->sockets.fetch_sub(1);
    return ::close(fd);
  }

  const HttpClientOptions options;
  const pid_t pid;
  CURLM* multi = nullptr;
  std::thread thread;
  std::mutex mu;
  std::vector<Transfer*> pending;  // under mu: submitted, not yet added
  std::set<Transfer*> active;      // the transfer thread's: in the multi handle
  std::vector<CURL*> idle;         // under mu: easy handles to reuse
  bool stop = false;
  std::atomic<long> sockets{0};
};

void HttpClient::Impl::Configure(Transfer* t) {
  const HttpRequest& q = *t->req;
  CURL* e = t->easy;
  curl_easy_setopt(e, CURLOPT_URL, q.url.c_str());
  curl_easy_setopt(e, CURLOPT_PRIVATE, t);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                   q.connect_timeout_ms > 0 ? q.connect_timeout_ms : options.connect_timeout_ms);
  if (q.timeout_ms > 0) curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, q.timeout_ms);
  // A transfer slower than 1 KiB/s over the stall time has stalled (a server
  // trickling a byte a second would otherwise hold a read for days).
  t->stall_timeout_s = options.stall_timeout_s;
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, options.stall_timeout_s);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 512L << 10);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, options.verify_tls ? 1L : 0L);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, options.verify_tls ? 2L : 0L);
  if (!options.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, options.ca_file.c_str());
  if (!q.user_password.empty()) {
    curl_easy_setopt(e, CURLOPT_USERPWD, q.user_password.c_str());
    curl_easy_setopt(e, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
  }
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, q.follow_redirects ? 1L : 0L);
  curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, t);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, OpenSocket);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, this);
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, CloseSocket);
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, this);
  if (q.method == "HEAD") {
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  } else if (q.method == "PUT") {
    curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(q.body.size()));
    curl_easy_setopt(e, CURLOPT_READFUNCTION, OnUpload);
    curl_easy_setopt(e, CURLOPT_READDATA, t);
  } else if (q.method == "POST") {
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(q.body.size()));
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, q.body.data());
  } else if (q.method != "GET") {
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, q.method.c_str());
  }
  for (const std::string& h : q.headers) t->headers = curl_slist_append(t->headers, h.c_str());
  // No "Expect: 100-continue" round trip before a body.
  t->headers = curl_slist_append(t->headers, "Expect:");
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
}

// On the transfer thread: takes the transfer out of the multi handle,
// completes its response, recycles its handle and tells its owner.
void HttpClient::Impl::Finish(Transfer* t, CURLcode code) {
  curl_multi_remove_handle(multi, t->easy);
  active.erase(t);
  HttpResponse& r = *t->resp;
  if (t->error_body_cut) code = CURLE_OK;  // an error reply cut short on purpose: judged as it is
  if (!r.aborted && code != CURLE_OK && !r.overflow) {
    r.transport_error = t->errbuf[0] != '\0' ? t->errbuf : curl_easy_strerror(code);
    // A handshake cut short (a reset, a timeout) is the network's, as a
    // refused connection is: retried a few times. A certificate that is not
    // trusted is no better the second time.
    r.connect_failed = code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST ||
                       code == CURLE_COULDNT_RESOLVE_PROXY || code == CURLE_SSL_CONNECT_ERROR;
    r.tls_failed = code == CURLE_PEER_FAILED_VERIFICATION || code == CURLE_SSL_CACERT_BADFILE ||
                   code == CURLE_SSL_CERTPROBLEM || code == CURLE_SSL_ISSUER_ERROR ||
                   code == CURLE_SSL_PINNEDPUBKEYNOTMATCH || code == CURLE_SSL_CRL_BADFILE;
    r.broken_reply = code == CURLE_WEIRD_SERVER_REPLY || code == CURLE_UNSUPPORTED_PROTOCOL ||
                     code == CURLE_TOO_MANY_REDIRECTS || code == CURLE_OUT_OF_MEMORY;
  }
  long status = 0;
  curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
  if (status != 0) r.status = status;
  curl_slist_free_all(t->headers);
  curl_easy_reset(t->easy);
  {
    std::lock_guard<std::mutex> lock(mu);
    idle.push_back(t->easy);
  }
  std::unique_ptr<Transfer> owned(t);
  owned->done(*owned->call);
}

void HttpClient::Impl::Loop() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stop) break;
      for (Transfer* t : pending) {
        curl_multi_add_handle(multi, t->easy);
        active.insert(t);
      }
      pending.clear();
    }
    std::vector<Transfer*> dropped;
    for (Transfer* t : active) {
      if (t->abort != nullptr && t->abort->load(std::memory_order_acquire)) dropped.push_back(t);
    }
    for (Transfer* t : dropped) {
      t->resp->aborted = true;
      Finish(t, CURLE_ABORTED_BY_CALLBACK);
    }
    int running = 0;
    curl_multi_perform(multi, &running);
    int queued = 0;
    while (CURLMsg* m = curl_multi_info_read(multi, &queued)) {
      if (m->msg != CURLMSG_DONE) continue;
      Transfer* t = nullptr;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
      Finish(t, m->data.result);
    }
    curl_multi_poll(multi, nullptr, 0, 500, nullptr);
  }
}

HttpClient::HttpClient(HttpClientOptions options)
    : options_(std::move(options)), impl_(new Impl(options_)) {}

// The process's own transfer thread: a forked child does not have its
// parent's (threads do not survive fork), so it starts one, with its own
// connections; the parent's state is left alone (never cleaned up in the
// child, where its connections are the parent's sockets).
HttpClient::Impl* HttpClient::LiveImpl() {
  static std::mutex swap_mu;
  Impl* impl = impl_;
  if (impl->pid == ::getpid()) return impl;
  std::lock_guard<std::mutex> lock(swap_mu);
  if (impl_->pid != ::getpid()) impl_ = new Impl(options_);
  return impl_;
}

HttpClient::~HttpClient() {
  if (impl_->pid == ::getpid()) delete impl_;
}

void HttpClient::Start(std::shared_ptr<HttpCall> call, std::function<void(HttpCall&)> done,
                       const std::atomic<bool>* abort) {
  Impl* impl = LiveImpl();
  auto t = std::make_unique<Transfer>();
  t->req = &call->request;
  t->resp = &call->response;
  t->call = std::move(call);
  t->done = std::move(done);
  t->abort = abort;
  t->easy = impl->TakeEasy();
  impl->Configure(t.get());
  std::lock_guard<std::mutex> lock(impl->mu);
  impl->pending.push_back(t.release());
  curl_multi_wakeup(impl->multi);
}

HttpResponse HttpClient::Perform(const HttpRequest& request, const std::atomic<bool>* abort) {
  auto call = std::make_shared<HttpCall>();
  call->request = request;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Start(
      call,
      [&](HttpCall&) {
        std::lock_guard<std::mutex> lock(mu);
        done = true;
        cv.notify_one();
      },
      abort);
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return std::move(call->response);
}

void HttpClient::Wake() { curl_multi_wakeup(LiveImpl()->multi); }

long HttpClient::open_connections() { return LiveImpl()->sockets.load(); }

}  // namespace shardkit
