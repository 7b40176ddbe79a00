// fault_proxy: an HTTP/1.1 proxy for tests that forwards every request, bytes
// unchanged (Host and signatures included), to one upstream over persistent
// connections, and injects faults chosen per request by a seeded RNG: latency,
// 503 SlowDown, 429, 500 InternalError, a reset mid-body, a body cut short, a
// stall after the headers, a body trickled at N bytes/s.
//
//   fault_proxy --upstream HOST:PORT [--port 0] [--seed S] [--latency_ms MS]
//               [--p503 P] [--p429 P] [--p500 P] [--reset P] [--cut P]
//               [--stall P] [--slow P] [--slow_bps N] [--cut_fraction F]
//               [--match TEXT] [--next FAULT --next_count N]
//   fault_proxy --tcp 1 --upstream HOST:PORT [--handshake_resets N]
//
// With --tcp it forwards bytes unchanged both ways instead (a TLS server
// behind it), and resets the first --handshake_resets N connections once
// their first bytes (a TLS ClientHello) arrive, before anything is
// forwarded: a handshake cut short by the network. Each reset is reported
// on stderr as "handshake_reset".
//
// Prints "listening PORT" once it accepts connections. The same knobs change at
// run time through requests it answers itself:
//   GET /__fault__/set?p503=0.1&latency_ms=10   (answers the configuration as JSON)
//   GET /__fault__/config, GET /__fault__/stats, GET /__fault__/reset_stats
// A thread serves each client connection; nothing a client or the upstream
// sends can stop the proxy (bad requests get 400, a dead upstream 502).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kBufferBytes = 1 << 20;  // per connection and direction
constexpr size_t kMaxHeadBytes = 64 << 10;
constexpr size_t kMaxIdleUpstreams = 512;
constexpr uint64_t kAll = UINT64_MAX;

// ---------------------------------------------------------------- faults ---

// hold: the request is never forwarded (an upload that never arrives); the
// proxy reads and drops what the client sends until it gives up.
enum Fault { kNone, k503, k429, k500, kReset, kCut, kStall, kSlow, kHold, kFaultCount };
const char* const kFaultNames[kFaultCount] = {"none", "503",   "429",  "500", "reset",
                                              "cut",  "stall", "slow", "hold"};

struct Config {
  double latency_ms = 0;
  double p[kFaultCount] = {};  // probability of each fault (p[kNone] unused)
  uint64_t slow_bps = 1024;
  double cut_fraction = 0.5;  // of the body sent before a reset or cut
  std::string match;          // faults only for "METHOD TARGET" lines containing this
  Fault next = kNone;         // the next next_count matching requests get this fault
  uint64_t next_count = 0;
};

struct Stats {
  std::atomic<uint64_t> requests{0}, forwarded{0}, control{0}, delayed{0}, bad_requests{0};
  std::atomic<uint64_t> upstream_errors{0}, bytes_up{0}, bytes_down{0};
  std::atomic<uint64_t> faults[kFaultCount] = {};
  std::atomic<int64_t> client_open{0}, upstream_open{0};
  std::atomic<uint64_t> client_total{0}, upstream_total{0};
};

Stats g_stats;

bool ParseDouble(const std::string& s, double lo, double hi, double* out) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno != 0 || !(v >= lo && v <= hi)) return false;
  *out = v;
  return true;
}

bool ParseU64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos)
    return false;
  *out = std::strtoull(s.c_str(), nullptr, 10);
  return true;
}

Fault FaultByName(const std::string& name) {
  for (int f = 0; f < kFaultCount; ++f)
    if (name == kFaultNames[f]) return static_cast<Fault>(f);
  return kFaultCount;
}

// Sets one knob (the command line and /__fault__/set share this); returns an
// error message, empty when it was set.
std::string SetKnob(Config* c, const std::string& knob, const std::string& value, uint64_t* seed) {
  std::string name = knob;
  std::replace(name.begin(), name.end(), '-', '_');
  if (name.size() > 1 && name[0] == 'p' && FaultByName(name.substr(1)) < kFaultCount)
    name = name.substr(1);  // p503 and 503, preset and reset
  Fault f = FaultByName(name);
  if (f > kNone && f < kFaultCount) {
    return ParseDouble(value, 0, 1, &c->p[f]) ? "" : knob + " must be a probability in [0, 1]";
  }
  if (name == "latency_ms")
    return ParseDouble(value, 0, 3.6e6, &c->latency_ms) ? "" : "latency_ms must be 0..3600000";
  if (name == "cut_fraction")
    return ParseDouble(value, 0, 1, &c->cut_fraction) ? "" : "cut_fraction must be in [0, 1]";
  if (name == "slow_bps")
    return ParseU64(value, &c->slow_bps) && c->slow_bps > 0 ? "" : "slow_bps must be > 0";
  if (name == "next_count")
    return ParseU64(value, &c->next_count) ? "" : "next_count must be a count";
  if (name == "seed") return ParseU64(value, seed) ? "" : "seed must be a number";
  if (name == "match") {
    c->match = value;
    return "";
  }
  if (name == "next") {
    c->next = FaultByName(value);
    return c->next < kFaultCount ? ""
                                 : "next must be one of none 503 429 500 reset cut stall slow hold";
  }
  return "unknown knob '" + knob + "'";
}

// One draw picks at most one fault: the probabilities must add up to 1 at most.
std::string CheckConfig(const Config& c) {
  double sum = 0;
  for (int f = k503; f < kFaultCount; ++f) sum += c.p[f];
  if (sum > 1 + 1e-9) return "the fault probabilities add up to " + std::to_string(sum) + " > 1";
  return "";
}

// S's characters as a JSON string's (control characters dropped).
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
  return out + "\"";
}

std::string ConfigJson(const Config& c) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"latency_ms\": %g, \"p503\": %g, \"p429\": %g, \"p500\": %g, \"reset\": %g, "
                "\"cut\": %g, \"stall\": %g, \"slow\": %g, \"hold\": %g, \"slow_bps\": %llu, "
                "\"cut_fraction\": %g, \"next\": \"%s\", \"next_count\": %llu, \"match\": ",
                c.latency_ms, c.p[k503], c.p[k429], c.p[k500], c.p[kReset], c.p[kCut], c.p[kStall],
                c.p[kSlow], c.p[kHold], static_cast<unsigned long long>(c.slow_bps), c.cut_fraction,
                kFaultNames[c.next], static_cast<unsigned long long>(c.next_count));
  return buf + JsonString(c.match) + "}";
}

std::string StatsJson() {
  const Stats& s = g_stats;
  std::string out = "{";
  auto add = [&out](const char* name, long long v) {
    out += (out.size() > 1 ? ", \"" : "\"") + std::string(name) + "\": " + std::to_string(v);
  };
  add("requests", s.requests);
  add("forwarded", s.forwarded);
  add("control", s.control);
  add("latency", s.delayed);
  for (int f = k503; f < kFaultCount; ++f) add(kFaultNames[f], s.faults[f]);
  add("bad_requests", s.bad_requests);
  add("upstream_errors", s.upstream_errors);
  add("bytes_up", s.bytes_up);
  add("bytes_down", s.bytes_down);
  add("client_connections_open", s.client_open);
  add("client_connections_total", s.client_total);
  add("upstream_connections_open", s.upstream_open);
  add("upstream_connections_total", s.upstream_total);
  return out + "}";
}

// The configuration and the RNG that draws each request's fault.
class FaultPlan {
 public:
  FaultPlan(const Config& c, uint64_t seed) : config_(c), rng_(seed) {}

  Config Get() {
    std::lock_guard<std::mutex> lock(mu_);
    return config_;
  }

  // Applies "k=v&k=v" (already split); all or nothing.
  std::string Set(const std::vector<std::pair<std::string, std::string>>& knobs) {
    std::lock_guard<std::mutex> lock(mu_);
    Config c = config_;
    uint64_t seed = kAll;
    for (const auto& [k, v] : knobs) {
      std::string err = SetKnob(&c, k, v, &seed);
      if (!err.empty()) return err;
    }
    std::string err = CheckConfig(c);
    if (!err.empty()) return err;
    config_ = c;
    if (seed != kAll) rng_.seed(seed);
    return "";
  }

  // The fault for a request ("METHOD TARGET"), and the configuration it was drawn
  // under (the latency to add, how to apply the fault).
  Fault Draw(const std::string& target, Config* snapshot) {
    std::lock_guard<std::mutex> lock(mu_);
    *snapshot = config_;
    if (!config_.match.empty() && target.find(config_.match) == std::string::npos) return kNone;
    if (config_.next_count > 0) {
      --config_.next_count;
      return config_.next;
    }
    double u = std::uniform_real_distribution<double>(0, 1)(rng_);
    for (int f = k503; f < kFaultCount; ++f) {
      if (u < config_.p[f]) return static_cast<Fault>(f);
      u -= config_.p[f];
    }
    return kNone;
  }

 private:
  std::mutex mu_;
  Config config_;
  std::mt19937_64 rng_;
};

// ---------------------------------------------------------------- sockets ---

// A connected socket with a read buffer; closing it (destruction) updates the
// open-connection gauge it was counted in.
class Conn {
 public:
  Conn(int fd, std::atomic<int64_t>* open) : fd_(fd), open_(open), buf_(kBufferBytes) {
    ++*open_;
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Conn() { Close(); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  int fd() const { return fd_; }
  size_t buffered() const { return end_ - pos_; }

  void Close() {
    if (fd_ < 0) return;
    close(fd_);
    fd_ = -1;
    --*open_;
  }
  // Closes with an RST instead of a FIN (SO_LINGER 0).
  void Reset() {
    if (fd_ < 0) return;
    struct linger l = {1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    Close();
  }

  bool WriteAll(const char* p, size_t n) {
    while (n > 0) {
      ssize_t w = send(fd_, p, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }
  bool WriteAll(const std::string& s) { return WriteAll(s.data(), s.size()); }

  // Up to MAX bytes: buffered ones first, else one recv. 0 at EOF, -1 on error.
  ssize_t ReadSome(const char** data, size_t max) {
    if (pos_ == end_) {
      pos_ = end_ = 0;
      ssize_t r;
      do r = recv(fd_, buf_.data(), buf_.size(), 0);
      while (r < 0 && errno == EINTR);
      if (r <= 0) return r;
      end_ = static_cast<size_t>(r);
    }
    size_t n = std::min(max, end_ - pos_);
    *data = buf_.data() + pos_;
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  enum HeadResult { kHead, kEof, kTooLarge, kError };
  // Reads through the blank line that ends a message head. kEof only when the
  // peer closed before sending a byte of it.
  HeadResult ReadHead(std::string* head) {
    head->clear();
    while (true) {
      const char* p;
      ssize_t r = ReadSome(&p, kAll);
      if (r <= 0) return head->empty() && r == 0 ? kEof : kError;
      size_t old = head->size();
      head->append(p, static_cast<size_t>(r));
      size_t from = old >= 3 ? old - 3 : 0;
      size_t end = head->find("\r\n\r\n", from);
      if (end != std::string::npos) {
        pos_ -= head->size() - (end + 4);  // give back what follows the head
        head->resize(end + 4);
        return head->size() > kMaxHeadBytes ? kTooLarge : kHead;
      }
      if (head->size() > kMaxHeadBytes) return kTooLarge;
    }
  }

  // One CRLF-terminated line (chunk sizes, trailers), without the CRLF.
  bool ReadLine(std::string* line, std::string* raw) {
    line->clear();
    while (line->size() < kMaxHeadBytes) {
      const char* p;
      if (ReadSome(&p, 1) != 1) return false;
      raw->push_back(*p);
      if (*p == '\n') {
        if (line->empty() || line->back() != '\r') return false;
        line->pop_back();
        return true;
      }
      line->push_back(*p);
    }
    return false;
  }

  // True when a pooled connection looks usable: nothing to read (an EOF or
  // stray bytes mean the upstream closed it or is out of step).
  bool IdleAndOpen() const {
    struct pollfd p = {fd_, POLLIN, 0};
    return poll(&p, 1, 0) == 0;
  }

 private:
  int fd_;
  std::atomic<int64_t>* open_;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;
};

// ------------------------------------------------------------ HTTP heads ---

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool HasToken(const std::string& value, const std::string& token) {
  std::string v = Lower(value);
  size_t at = 0;
  while ((at = v.find(token, at)) != std::string::npos) {
    bool left = at == 0 || v[at - 1] == ',' || v[at - 1] == ' ';
    size_t e = at + token.size();
    bool right = e == v.size() || v[e] == ',' || v[e] == ' ';
    if (left && right) return true;
    at = e;
  }
  return false;
}

// What the proxy needs from a request or response head; the head itself is
// forwarded as received.
struct Head {
  std::string raw;
  std::string method, target;  // requests
  int status = 0;              // responses
  bool http11 = true;
  bool has_length = false;
  uint64_t length = 0;
  bool chunked = false;
  bool te_other = false;  // a transfer-encoding other than chunked
  bool conn_close = false, conn_keep_alive = false;
  bool expect_continue = false;
  bool KeepAlive() const { return http11 ? !conn_close : conn_keep_alive; }
};

bool IsTchar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("!#$%&'*+-.^_`|~", c);
}

// Parses the header lines after the start line; false when malformed.
bool ParseFields(const std::string& raw, size_t at, Head* h) {
  while (true) {
    size_t eol = raw.find("\r\n", at);
    if (eol == std::string::npos) return false;
    if (eol == at) return true;  // the blank line
    std::string line = raw.substr(at, eol - at);
    at = eol + 2;
    size_t colon = line.find(':');
    if (colon == 0 || colon == std::string::npos || line.find('\n') != std::string::npos)
      return false;
    std::string name = line.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), IsTchar)) return false;
    name = Lower(name);
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t") + 1);
    if (name == "content-length") {
      uint64_t n;
      if (!ParseU64(value, &n) || (h->has_length && n != h->length)) return false;
      h->has_length = true;
      h->length = n;
    } else if (name == "transfer-encoding") {
      if (Lower(value) == "chunked")
        h->chunked = true;
      else
        h->te_other = true;
    } else if (name == "connection") {
      h->conn_close |= HasToken(value, "close");
      h->conn_keep_alive |= HasToken(value, "keep-alive");
    } else if (name == "expect") {
      h->expect_continue |= Lower(value) == "100-continue";
    }
  }
}

bool ParseRequest(Head* h) {
  size_t eol = h->raw.find("\r\n");
  std::string line = h->raw.substr(0, eol);
  size_t s1 = line.find(' '), s2 = line.rfind(' ');
  if (s1 == std::string::npos || s2 == s1) return false;
  h->method = line.substr(0, s1);
  h->target = line.substr(s1 + 1, s2 - s1 - 1);
  std::string version = line.substr(s2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return false;
  if (h->method.empty() || !std::all_of(h->method.begin(), h->method.end(), IsTchar)) return false;
  if (h->target.empty() || !std::all_of(h->target.begin(), h->target.end(), [](char c) {
        return static_cast<unsigned char>(c) > 0x20 && c != 0x7f;
      }))
    return false;
  h->http11 = version == "HTTP/1.1";
  return ParseFields(h->raw, eol + 2, h);
}

bool ParseResponse(Head* h) {
  size_t eol = h->raw.find("\r\n");
  std::string line = h->raw.substr(0, eol);
  if (line.size() < 12 || line.compare(0, 7, "HTTP/1.") != 0 || line[8] != ' ') return false;
  if (!std::isdigit(static_cast<unsigned char>(line[9])) || line[9] == '0') return false;
  h->http11 = line[7] == '1';
  h->status = std::atoi(line.substr(9, 3).c_str());
  if (h->status < 100 || h->status > 999) return false;
  return ParseFields(h->raw, eol + 2, h);
}

// A complete answer; for a HEAD request (HEAD_ONLY) the head alone, still
// naming the length of the body it leaves out.
std::string Response(int status, const char* reason, const std::string& type,
                     const std::string& body, bool close, bool head_only = false) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) +
         (close ? "\r\nConnection: close" : "") + "\r\n\r\n" + (head_only ? "" : body);
}

std::string S3Error(const char* code, const char* message) {
  return std::string("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>") + code +
         "</Code><Message>" + message + "</Message></Error>";
}

// ------------------------------------------------------------ body relay ---

// Copies a body from one connection to another. LIMIT bounds the payload bytes
// sent (a reset or cut stops there); SLOW_BPS > 0 trickles them.
class Relay {
 public:
  Relay(Conn* from, Conn* to, std::atomic<uint64_t>* counter, uint64_t limit, uint64_t slow_bps)
      : from_(from), to_(to), counter_(counter), limit_(limit), slow_bps_(slow_bps) {}

  enum Result { kDone, kLimited, kFromFailed, kToFailed };

  Result Exact(uint64_t n) {
    while (n > 0) {
      if (limit_ == 0) return kLimited;
      const char* p;
      ssize_t r = from_->ReadSome(&p, static_cast<size_t>(std::min<uint64_t>(n, limit_)));
      if (r <= 0) return kFromFailed;
      if (!Send(p, static_cast<size_t>(r))) return kToFailed;
      limit_ -= std::min<uint64_t>(limit_, static_cast<uint64_t>(r));
      n -= static_cast<uint64_t>(r);
    }
    return kDone;
  }

  Result UntilClose() {
    while (true) {
      if (limit_ == 0) return kLimited;
      const char* p;
      ssize_t r = from_->ReadSome(&p, static_cast<size_t>(std::min<uint64_t>(limit_, kAll)));
      if (r == 0) return kDone;
      if (r < 0) return kFromFailed;
      if (!Send(p, static_cast<size_t>(r))) return kToFailed;
      limit_ -= std::min<uint64_t>(limit_, static_cast<uint64_t>(r));
    }
  }

  // A chunked body, framing and trailers relayed as they come.
  Result Chunked() {
    std::string line, raw;
    while (true) {
      raw.clear();
      if (!from_->ReadLine(&line, &raw)) return kFromFailed;
      char* end = nullptr;
      uint64_t size = std::strtoull(line.c_str(), &end, 16);
      if (end == line.c_str() || (*end != '\0' && *end != ';')) return kFromFailed;
      if (!Send(raw.data(), raw.size(), false)) return kToFailed;
      if (size == 0) break;
      Result r = Exact(size);
      if (r != kDone) return r;
      raw.clear();
      if (!from_->ReadLine(&line, &raw) || !line.empty()) return kFromFailed;
      if (!Send(raw.data(), raw.size(), false)) return kToFailed;
    }
    do {  // trailers, then the blank line
      raw.clear();
      if (!from_->ReadLine(&line, &raw)) return kFromFailed;
      if (!Send(raw.data(), raw.size(), false)) return kToFailed;
    } while (!line.empty());
    return kDone;
  }

 private:
  bool Send(const char* p, size_t n, bool paced = true) {
    *counter_ += n;
    if (slow_bps_ == 0 || !paced) return to_->WriteAll(p, n);
    const size_t step = static_cast<size_t>(std::max<uint64_t>(1, slow_bps_ / 10));
    while (n > 0) {
      size_t k = std::min(step, n);
      if (!to_->WriteAll(p, k)) return false;
      p += k;
      n -= k;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return true;
  }

  Conn* from_;
  Conn* to_;
  std::atomic<uint64_t>* counter_;
  uint64_t limit_;
  uint64_t slow_bps_;
};

// --------------------------------------------------------------- the proxy ---

class Proxy {
 public:
  Proxy(const sockaddr_storage& upstream, socklen_t len, std::string name, FaultPlan* plan)
      : upstream_(upstream), upstream_len_(len), upstream_name_(std::move(name)), plan_(plan) {}

  void Serve(int fd);

 private:
  enum Next { kContinue, kClose };

  Next Handle(Conn& client, const Head& req);
  Next Control(Conn& client, const Head& req);
  Next Canned(Conn& client, const Head& req, Fault f);
  Next Forward(Conn& client, const Head& req, Fault f, const Config& cfg);
  Next Answer502(Conn& client, const Head& req, const std::string& why);
  enum Sent { kSent, kEarlyAnswer, kUpstreamFailed, kClientFailed };
  Sent SendRequest(Conn& client, Conn& up, const Head& req, Head* resp);
  Next RelayResponse(Conn& client, std::unique_ptr<Conn> up, const Head& req, const Head& resp,
                     Fault f, const Config& cfg);
  bool DiscardBody(Conn& client, const Head& req);

  std::unique_ptr<Conn> Connect(std::string* why);
  std::unique_ptr<Conn> TakeIdle();
  void GiveBack(std::unique_ptr<Conn> c);

  const sockaddr_storage upstream_;
  const socklen_t upstream_len_;
  const std::string upstream_name_;
  FaultPlan* plan_;
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<Conn>> idle_;
};

std::unique_ptr<Conn> Proxy::Connect(std::string* why) {
  int fd = socket(upstream_.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = std::string("socket: ") + std::strerror(errno);
    return nullptr;
  }
  if (connect(fd, reinterpret_cast<const sockaddr*>(&upstream_), upstream_len_) != 0) {
    *why = "connect to " + upstream_name_ + ": " + std::strerror(errno);
    close(fd);
    return nullptr;
  }
  ++g_stats.upstream_total;
  // An upstream that stops answering for this long frees the client's thread.
  struct timeval tv = {300, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return std::make_unique<Conn>(fd, &g_stats.upstream_open);
}

std::unique_ptr<Conn> Proxy::TakeIdle() {
  std::lock_guard<std::mutex> lock(pool_mu_);
  while (!idle_.empty()) {
    std::unique_ptr<Conn> c = std::move(idle_.back());
    idle_.pop_back();
    if (c->IdleAndOpen()) return c;
  }
  return nullptr;
}

void Proxy::GiveBack(std::unique_ptr<Conn> c) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (idle_.size() < kMaxIdleUpstreams) idle_.push_back(std::move(c));
}

void Proxy::Serve(int fd) {
  Conn client(fd, &g_stats.client_open);
  ++g_stats.client_total;
  Head req;
  while (true) {
    req = Head();
    Conn::HeadResult r = client.ReadHead(&req.raw);
    if (r == Conn::kEof || r == Conn::kError) return;
    if (r == Conn::kTooLarge || !ParseRequest(&req)) {
      ++g_stats.bad_requests;
      const char* why = r == Conn::kTooLarge ? "request head over 64 KiB\n" : "malformed request\n";
      client.WriteAll(
          Response(r == Conn::kTooLarge ? 431 : 400,
                   r == Conn::kTooLarge ? "Request Header Fields Too Large" : "Bad Request",
                   "text/plain", why, true));
      return;
    }
    if (Handle(client, req) == kClose) return;
  }
}

void WaitForClientToGiveUp(Conn& client);

Proxy::Next Proxy::Handle(Conn& client, const Head& req) {
  if (req.target.compare(0, 11, "/__fault__/") == 0) return Control(client, req);
  if (req.chunked || req.te_other) {  // S3 uploads carry a Content-Length
    ++g_stats.bad_requests;
    client.WriteAll(Response(501, "Not Implemented", "text/plain",
                             "fault_proxy: request bodies need a Content-Length\n", true));
    return kClose;
  }
  ++g_stats.requests;
  Config cfg;
  Fault f = plan_->Draw(req.method + " " + req.target, &cfg);  // match: "PUT /b/k" or part of it
  if (cfg.latency_ms > 0) {
    ++g_stats.delayed;
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(cfg.latency_ms));
  }
  if (f == kHold) {
    ++g_stats.faults[f];
    WaitForClientToGiveUp(client);
    return kClose;
  }
  if (f == k503 || f == k429 || f == k500) return Canned(client, req, f);
  return Forward(client, req, f, cfg);
}

std::vector<std::pair<std::string, std::string>> ParseQuery(const std::string& q) {
  auto decode = [](const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
        out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        out += s[i] == '+' ? ' ' : s[i];
      }
    }
    return out;
  };
  std::vector<std::pair<std::string, std::string>> out;
  size_t at = 0;
  while (at <= q.size()) {
    size_t amp = q.find('&', at);
    if (amp == std::string::npos) amp = q.size();
    std::string kv = q.substr(at, amp - at);
    if (!kv.empty()) {
      size_t eq = kv.find('=');
      out.emplace_back(decode(kv.substr(0, eq)),
                       eq == std::string::npos ? "" : decode(kv.substr(eq + 1)));
    }
    at = amp + 1;
  }
  return out;
}

Proxy::Next Proxy::Control(Conn& client, const Head& req) {
  ++g_stats.control;
  if (!DiscardBody(client, req)) return kClose;
  size_t qm = req.target.find('?');
  std::string path = req.target.substr(0, qm);
  std::string query = qm == std::string::npos ? "" : req.target.substr(qm + 1);
  int status = 200;
  std::string body;
  if (path == "/__fault__/set") {
    std::string err = plan_->Set(ParseQuery(query));
    if (err.empty()) {
      body = ConfigJson(plan_->Get());
    } else {
      status = 400;
      body = "{\"error\": " + JsonString(err) + "}";
    }
  } else if (path == "/__fault__/config") {
    body = ConfigJson(plan_->Get());
  } else if (path == "/__fault__/stats") {
    body = StatsJson();
  } else if (path == "/__fault__/reset_stats") {
    for (auto* c : {&g_stats.requests, &g_stats.forwarded, &g_stats.control, &g_stats.delayed,
                    &g_stats.bad_requests, &g_stats.upstream_errors, &g_stats.bytes_up,
                    &g_stats.bytes_down, &g_stats.client_total, &g_stats.upstream_total})
      *c = 0;
    for (auto& c : g_stats.faults) c = 0;
    body = StatsJson();
  } else {
    status = 404;
    body = "{\"error\": \"unknown control path; try /__fault__/set, config, stats, reset_stats\"}";
  }
  body += "\n";
  bool close = !req.KeepAlive();
  client.WriteAll(Response(status,
                           status == 200   ? "OK"
                           : status == 400 ? "Bad Request"
                                           : "Not Found",
                           "application/json", body, close));
  return close ? kClose : kContinue;
}

// Reads and drops a request body, so the connection can serve the next
// request. False when that cannot be done (the client waits for a 100
// Continue, or went away): the caller closes after answering.
bool Proxy::DiscardBody(Conn& client, const Head& req) {
  if (!req.has_length || req.length == 0) return true;
  if (req.expect_continue) return false;
  uint64_t n = req.length;
  while (n > 0) {
    const char* p;
    ssize_t r = client.ReadSome(&p, static_cast<size_t>(std::min<uint64_t>(n, kBufferBytes)));
    if (r <= 0) return false;
    n -= static_cast<uint64_t>(r);
  }
  return true;
}

Proxy::Next Proxy::Canned(Conn& client, const Head& req, Fault f) {
  ++g_stats.faults[f];
  bool close = !DiscardBody(client, req) || !req.KeepAlive();
  std::string body, reason;
  int status = 0;
  if (f == k503) {
    status = 503;
    reason = "Slow Down";
    body = S3Error("SlowDown", "Please reduce your request rate.");
  } else if (f == k429) {
    status = 429;
    reason = "Too Many Requests";
    body = S3Error("TooManyRequests", "Please reduce your request rate.");
  } else {
    status = 500;
    reason = "Internal Server Error";
    body = S3Error("InternalError", "We encountered an internal error. Please try again.");
  }
  std::string resp =
      Response(status, reason.c_str(), "application/xml", body, close, req.method == "HEAD");
  g_stats.bytes_down += resp.size();
  if (!client.WriteAll(resp)) return kClose;
  return close ? kClose : kContinue;
}

Proxy::Next Proxy::Answer502(Conn& client, const Head& req, const std::string& why) {
  ++g_stats.upstream_errors;
  bool close = !DiscardBody(client, req) || !req.KeepAlive();
  client.WriteAll(Response(502, "Bad Gateway", "text/plain", "fault_proxy: " + why + "\n", close,
                           req.method == "HEAD"));
  return close ? kClose : kContinue;
}

// Sends the head and body upstream. With "Expect: 100-continue" the
// upstream's 100 is relayed before the body is; a final answer instead is
// left in RESP (kEarlyAnswer) and the body is never sent.
Proxy::Sent Proxy::SendRequest(Conn& client, Conn& up, const Head& req, Head* resp) {
  if (!up.WriteAll(req.raw)) return kUpstreamFailed;
  g_stats.bytes_up += req.raw.size();
  uint64_t n = req.has_length ? req.length : 0;
  if (n == 0) return kSent;
  if (req.expect_continue) {
    if (up.ReadHead(&resp->raw) != Conn::kHead || !ParseResponse(resp)) return kUpstreamFailed;
    if (resp->status != 100) return kEarlyAnswer;
    g_stats.bytes_down += resp->raw.size();
    if (!client.WriteAll(resp->raw)) return kClientFailed;
    *resp = Head();
  }
  Relay relay(&client, &up, &g_stats.bytes_up, kAll, 0);
  Relay::Result r = relay.Exact(n);
  return r == Relay::kDone ? kSent : r == Relay::kToFailed ? kUpstreamFailed : kClientFailed;
}

// Reads the upstream's final response head into RESP, relaying any other
// interim (1xx) answers. False when the upstream sent no valid head.
bool ReadFinalHead(Conn& client, Conn& up, Head* resp) {
  while (resp->raw.empty() || resp->status / 100 == 1) {
    if (!resp->raw.empty()) {
      g_stats.bytes_down += resp->raw.size();
      if (!client.WriteAll(resp->raw)) return false;
    }
    *resp = Head();
    if (up.ReadHead(&resp->raw) != Conn::kHead || !ParseResponse(resp)) return false;
  }
  return true;
}

Proxy::Next Proxy::Forward(Conn& client, const Head& req, Fault f, const Config& cfg) {
  const bool has_body = req.has_length && req.length > 0;
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<Conn> up = TakeIdle();
    const bool reused = up != nullptr;
    std::string why;
    if (!up) up = Connect(&why);
    if (!up) return Answer502(client, req, why);
    Head resp;
    Sent sent = SendRequest(client, *up, req, &resp);
    if (sent == kClientFailed) return kClose;
    bool ok = sent != kUpstreamFailed;
    if (ok && sent == kSent) ok = ReadFinalHead(client, *up, &resp);
    // A pooled connection the upstream had closed: once more on a new one,
    // when nothing of the request is lost (no body) and nothing was relayed.
    if (!ok && reused && !has_body && attempt == 0) continue;
    if (!ok)
      return Answer502(client, req, "upstream " + upstream_name_ + " sent no valid response");
    ++g_stats.forwarded;
    Next next = RelayResponse(client, std::move(up), req, resp, f, cfg);
    return sent == kEarlyAnswer ? kClose : next;
  }
}

// Waits until the client closes (or errs), discarding what it sends.
void WaitForClientToGiveUp(Conn& client) {
  while (true) {
    struct pollfd p = {client.fd(), POLLIN, 0};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) return;
    const char* data;
    if (client.ReadSome(&data, kAll) <= 0) return;
  }
}

Proxy::Next Proxy::RelayResponse(Conn& client, std::unique_ptr<Conn> up, const Head& req,
                                 const Head& resp, Fault f, const Config& cfg) {
  const bool no_body =
      req.method == "HEAD" || resp.status / 100 == 1 || resp.status == 204 || resp.status == 304;
  const bool until_close = !no_body && !resp.chunked && !resp.has_length;
  if (f != kNone) ++g_stats.faults[f];
  if (no_body && (f == kReset || f == kCut)) {  // no body to break: drop the answer itself
    if (f == kReset) client.Reset();
    return kClose;
  }
  g_stats.bytes_down += resp.raw.size();
  if (!client.WriteAll(resp.raw)) return kClose;
  if (f == kStall) {
    WaitForClientToGiveUp(client);
    return kClose;
  }
  uint64_t limit = kAll;
  if (f == kReset || f == kCut) {
    limit = resp.has_length && !resp.chunked
                ? static_cast<uint64_t>(static_cast<double>(resp.length) * cfg.cut_fraction)
                : 0;
  }
  Relay relay(up.get(), &client, &g_stats.bytes_down, limit, f == kSlow ? cfg.slow_bps : 0);
  Relay::Result r = Relay::kDone;
  if (!no_body) {
    r = resp.chunked  ? relay.Chunked()
        : until_close ? relay.UntilClose()
                      : relay.Exact(resp.length);
  }
  if (f == kReset || f == kCut) {
    if (f == kReset) client.Reset();
    return kClose;
  }
  if (r == Relay::kFromFailed) ++g_stats.upstream_errors;
  if (r != Relay::kDone) return kClose;
  if (req.KeepAlive() && resp.KeepAlive() && !until_close) GiveBack(std::move(up));
  return req.KeepAlive() && resp.KeepAlive() && !until_close ? kContinue : kClose;
}

// ------------------------------------------------------------------- main ---

struct Args {
  std::string upstream;
  uint16_t port = 0;
  uint64_t seed = 1;
  Config config;
  bool tcp = false;
  uint64_t handshake_resets = 0;
};

// --tcp: the client's bytes to the upstream and back, unchanged, until
// either side closes; the first handshake_resets connections are reset
// once their first bytes arrive.
std::atomic<uint64_t> g_handshake_resets{0};

void PipeTcp(int client, const sockaddr_storage& upstream, socklen_t len) {
  Conn c(client, &g_stats.client_open);
  ++g_stats.client_total;
  for (uint64_t n = g_handshake_resets.load(); n > 0;) {
    if (!g_handshake_resets.compare_exchange_weak(n, n - 1)) continue;
    struct pollfd p = {client, POLLIN, 0};
    char hello[512];
    if (poll(&p, 1, 60000) == 1 && recv(client, hello, sizeof hello, 0) > 0) {
      c.Reset();
      std::fprintf(stderr, "handshake_reset\n");
      return;
    }
    return;
  }
  int fd = socket(upstream.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<const sockaddr*>(&upstream), len) != 0) {
    if (fd >= 0) close(fd);
    ++g_stats.upstream_errors;
    return;
  }
  Conn up(fd, &g_stats.upstream_open);
  std::vector<char> buf(1 << 16);
  struct pollfd fds[2] = {{client, POLLIN, 0}, {fd, POLLIN, 0}};
  while (poll(fds, 2, 300000) > 0) {
    for (int i = 0; i < 2; ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = recv(fds[i].fd, buf.data(), buf.size(), 0);
      if (n <= 0) return;
      Conn& to = i == 0 ? up : c;
      if (!to.WriteAll(buf.data(), static_cast<size_t>(n))) return;
    }
  }
}

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "fault_proxy: %s\n"
               "usage: fault_proxy --upstream HOST:PORT [--port 0] [--seed S] [--latency_ms MS]\n"
               "       [--p503 P] [--p429 P] [--p500 P] [--reset P] [--cut P] [--stall P]\n"
               "       [--slow P] [--slow_bps N] [--cut_fraction F] [--match TEXT]\n"
               "       [--next FAULT --next_count N]\n"
               "       fault_proxy --tcp 1 --upstream HOST:PORT [--handshake_resets N]\n",
               why.c_str());
  std::exit(2);
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.compare(0, 2, "--") != 0) Usage("unexpected argument '" + arg + "'");
    std::string name = arg.substr(2), value;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else {
      if (i + 1 >= argc) Usage("--" + name + " needs a value");
      value = argv[++i];
    }
    uint64_t port = 0;
    if (name == "upstream") {
      a.upstream = value;
    } else if (name == "tcp") {
      a.tcp = value == "1";
    } else if (name == "handshake_resets") {
      if (!ParseU64(value, &a.handshake_resets)) Usage("--handshake_resets must be a count");
    } else if (name == "port") {
      if (!ParseU64(value, &port) || port > 65535) Usage("--port must be 0..65535");
      a.port = static_cast<uint16_t>(port);
    } else {
      std::string err = SetKnob(&a.config, name, value, &a.seed);
      if (!err.empty()) Usage(err);
    }
  }
  if (a.upstream.empty()) Usage("--upstream HOST:PORT is required");
  std::string err = CheckConfig(a.config);
  if (!err.empty()) Usage(err);
  return a;
}

socklen_t Resolve(const std::string& hostport, sockaddr_storage* out) {
  size_t colon = hostport.rfind(':');
  if (colon == std::string::npos || colon == 0) Usage("--upstream must be HOST:PORT");
  std::string host = hostport.substr(0, colon), port = hostport.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) Usage("cannot resolve " + hostport + ": " + gai_strerror(rc));
  std::memcpy(out, res->ai_addr, res->ai_addrlen);
  socklen_t len = res->ai_addrlen;
  freeaddrinfo(res);
  return len;
}

int Listen(uint16_t port, uint16_t* bound) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(fd, 1024) != 0) {
    std::fprintf(stderr, "fault_proxy: cannot listen on 127.0.0.1:%u: %s\n", port,
                 std::strerror(errno));
    std::exit(2);
  }
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *bound = ntohs(addr.sin_port);
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  Args args = ParseArgs(argc, argv);
  sockaddr_storage upstream = {};
  socklen_t len = Resolve(args.upstream, &upstream);
  FaultPlan plan(args.config, args.seed);
  Proxy proxy(upstream, len, args.upstream, &plan);
  g_handshake_resets.store(args.handshake_resets);
  uint16_t port = 0;
  int listener = Listen(args.port, &port);
  std::printf("listening %u\n", port);
  std::fflush(stdout);
  while (true) {
    int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EINTR) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // EMFILE...
      continue;
    }
    if (args.tcp) {
      std::thread([&upstream, len, fd] { PipeTcp(fd, upstream, len); }).detach();
    } else {
      std::thread([&proxy, fd] { proxy.Serve(fd); }).detach();
    }
  }
}
