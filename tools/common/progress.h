// Progress: the live progress line of long-running commands (items, MB/s,
// ETA) on stderr, redrawn in place on a terminal and printed every few seconds
// otherwise, plus the formatting helpers the closing summaries use.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace shardkit {

class Progress {
 public:
  // `total` items (0 if unknown), counted as `unit` ("files", "samples").
  Progress(std::string label, uint64_t total, std::string unit);
  // Thread-safe; cheap when called often (draws at most a few times a second).
  void Update(uint64_t items_done, uint64_t bytes_done);
  // Draws the final state and ends the line.
  void Finish();
  double elapsed_seconds() const;

 private:
  void Draw(bool final);
  std::string label_, unit_;
  uint64_t total_;
  uint64_t items_ = 0, bytes_ = 0;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::mutex mu_;
};

std::string FormatDuration(double seconds);  // "1:02:03" or "2:03"
std::string FormatBytes(double bytes);       // "12.3 MB"
std::string FormatCount(double n);           // "1.23M", "12.3k"
// The command line as a JSON array of strings, for manifests.
std::string ArgvJson(int argc, char** argv);

}  // namespace shardkit
