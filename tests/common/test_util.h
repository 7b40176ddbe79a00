// Helpers for tests: temporary directories, synthetic images in every flavour
// ImageNet contains (gray, RGB, CMYK, progressive JPEG; PNG), running the CLIs.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "base/clock.h"
#include "image/image.h"
#include "shard/shard_writer.h"

namespace shardkit::testing {

// A fresh empty directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A dataset of n raw side x side x 3 records in 10 classes, record i filled
// from i (so a wrong record is seen), its blocks and shards of these sizes.
void WriteRawDataset(const std::string& dir, int n, int side, CompressionMode compression,
                     uint32_t block_size, uint64_t shard_size);

// A smooth synthetic "photo" (gradients, discs), deterministic in seed.
Image SyntheticImage(int width, int height, int channels, uint64_t seed);

// Crops r out of `full` and resizes it to size x size naively (bilinear
// sampling at pixel centres, no DCT scaling, no antialiasing): the reference a
// transform must come close to.
Image NaiveCropResize(const Image& full, const RectF& r, int size, bool flip);
// Mean absolute difference of n bytes.
double MeanAbsDiff(const uint8_t* a, const uint8_t* b, size_t n);

enum class JpegFlavor { kRgb, kGray, kCmyk, kCmykAdobe, kProgressive };
std::string MakeJpeg(const Image& rgb, JpegFlavor flavor, int quality = 90);
std::string MakePng(const Image& rgb);

void WriteFile(const std::string& path, const std::string& data);
std::string ReadFile(const std::string& path);
// The lines, each followed by a newline: one string to search and to print.
std::string JoinLines(const std::vector<std::string>& lines);
void MakeDirs(const std::string& path);

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};
// Runs a shell command line, capturing its output.
CommandResult RunCommand(const std::string& command);

// Starts a shell command in the background with its output in `log`; returns its pid.
// With own_group, the command leads a process group of its own (pid), so that
// kill(-pid, ...) reaches every process it started.
int Spawn(const std::string& command, const std::string& log, bool own_group = false);
// Waits up to timeout_s for pid to exit; its exit code, 128 + signal, or -1
// on timeout (the process is then killed).
int WaitExit(int pid, int timeout_s);
// Waits up to timeout_s for `text` to appear in `file`.
bool WaitForText(const std::string& file, const std::string& text, int timeout_s);
// Waits up to timeout_s for `path` to exist.
bool WaitForFile(const std::string& path, int timeout_s);

// A Clock the test moves: it stands still but for Advance, and each reading
// moves it on by the tick first (so a stage that reads it before and after
// some work, as the read queue times a read, sees the work take one tick).
class FakeClock : public Clock {
 public:
  uint64_t NowNs() const override {
    const uint64_t tick = tick_.load();
    return now_.fetch_add(tick) + tick;
  }
  void Advance(uint64_t ns) { now_.fetch_add(ns); }
  void SetTick(uint64_t ns) { tick_.store(ns); }

 private:
  mutable std::atomic<uint64_t> now_{1'000'000'000};
  std::atomic<uint64_t> tick_{0};
};

// A port for a training rendezvous, in 20000-31999 (below the kernel's
// ephemeral range, so no outgoing connection takes it; the range
// shardkit-train derives from a SLURM job id) that nothing listens on now.
// Drawn at random, not from the pid, so that tests started one after the
// other (adjacent pids) do not draw neighbouring ports. Chosen once per
// process: every rank a test starts gets the same one.
int TrainingPort();

// Absolute paths of the built tools (from compile definitions).
std::string PackTool();

}  // namespace shardkit::testing
