// The progress line.
#include "tools/common/progress.h"

#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/humanize.h"

namespace shardkit {

Progress::Progress(std::string label, uint64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), tty_(isatty(2) != 0) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::Update(uint64_t items_done, uint64_t bytes_done) {
  std::lock_guard<std::mutex> lock(mu_);
  items_ = items_done;
  bytes_ = bytes_done;
  auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (since < (tty_ ? 0.25 : 10.0)) return;
  last_draw_ = now;
  Draw(false);
}

void Progress::SetTotal(uint64_t total) {
  std::lock_guard<std::mutex> lock(mu_);
  total_ = total;
}

void Progress::Finish(bool completed) {
  std::lock_guard<std::mutex> lock(mu_);
  Draw(true, completed);
}

void Progress::Discard() {
  std::lock_guard<std::mutex> lock(mu_);
  if (tty_ && drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
}

void Progress::Draw(bool final, bool completed) {
  drawn_ = true;
  const double t = elapsed_seconds();
  const double rate = t > 0 ? items_ / t : 0;
  std::string line = label_ + ": ";
  if (unit_ == "bytes") {  // one figure, one rate
    line += FormatBytes(items_) + (total_ > 0 ? " of " + FormatBytes(total_) : "") + "  " +
            FormatBytes(rate) + "/s";
  } else {
    line += FormatCount(items_) + (total_ > 0 ? "/" + FormatCount(total_) : "") + " " + unit_;
    char buf[160];
    std::snprintf(buf, sizeof(buf), "  %s %s/s  %s/s", FormatCount(rate).c_str(), unit_.c_str(),
                  FormatBytes(t > 0 ? bytes_ / t : 0).c_str());
    line += buf;
  }
  if (final) {
    line += (completed ? "  done in " : "  stopped after ") + FormatDuration(t);
  } else if (total_ > 0 && rate > 0 && items_ <= total_) {
    line += "  ETA " + FormatDuration((total_ - items_) / rate);
  }
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

std::string ArgvJson(int argc, char** argv) {
  nlohmann::json a = nlohmann::json::array();
  for (int i = 0; i < argc; ++i) a.push_back(argv[i]);
  return a.dump(-1, ' ', false,
                nlohmann::json::error_handler_t::replace);  // argv may hold any bytes
}

void PhaseProgress::operator()(const std::string& phase, uint64_t done, uint64_t total,
                               uint64_t bytes, bool final) {
  if (phase != phase_ || bar_ == nullptr) {
    if (bar_ != nullptr) bar_->Finish();
    phase_ = phase;
    // Writing counts the samples taken, written or skipped as unusable: the
    // summary then says how many became records.
    bar_ =
        std::make_unique<Progress>(phase, total, phase.rfind("read", 0) == 0 ? "bytes" : "samples");
  }
  if (final) {
    if (done == 0 && total == 0 && bytes == 0) {
      bar_->Discard();
    } else {
      if (total > 0) bar_->SetTotal(total);
      bar_->Update(done, bytes);
      bar_->Finish();
    }
    bar_.reset();
    phase_.clear();
    return;
  }
  if (total > 0) bar_->SetTotal(total);
  bar_->Update(done, bytes);
}

}  // namespace shardkit
