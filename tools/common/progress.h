// Progress: the live progress line of long-running commands (items, MB/s,
// ETA) on stderr, redrawn in place on a terminal and printed every few seconds
// otherwise. The figures' formats are base/humanize.h's.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace shardkit {

class Progress {
 public:
  // `total` items (0 if unknown), counted as `unit` ("files", "samples");
  // the unit "bytes" shows them, and their one rate, as sizes ("1.2 GB/s").
  Progress(std::string label, uint64_t total, std::string unit);
  // Thread-safe; cheap when called often (draws at most a few times a second).
  void Update(uint64_t items_done, uint64_t bytes_done);
  void SetTotal(uint64_t total);  // once known (0: unknown)
  // Draws the final state and ends the line: "done in T", or where the work
  // failed "stopped after T" (so a failed run never looks complete).
  void Finish(bool completed = true);
  // Ends the line without a final state (a phase with nothing to show): a
  // line drawn in place on a terminal is cleared, nothing more is printed.
  void Discard();
  double elapsed_seconds() const;

 private:
  void Draw(bool final, bool completed = true);
  std::string label_, unit_;
  uint64_t total_;
  uint64_t items_ = 0, bytes_ = 0;
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::mutex mu_;
};

// Progress lines for the phases a pack reports (PackEvents::progress), one
// Progress per phase; a "read" phase counts bytes, the others samples. A
// phase's final event carries its final counts; one whose counts are all
// zero (nothing read) prints no line.
class PhaseProgress {
 public:
  void operator()(const std::string& phase, uint64_t done, uint64_t total, uint64_t bytes,
                  bool final);

 private:
  std::string phase_;
  std::unique_ptr<Progress> bar_;
};

// The command line as a JSON array of strings, for manifests.
std::string ArgvJson(int argc, char** argv);

}  // namespace shardkit
