// open_probe: what one rank pays to start reading a dataset: the time to open
// the loader (manifest, every shard's header, trailer and index block table),
// the time to its first batch, and its memory then. bench/open_scale.sh runs
// several at once as the ranks of one node and reads their memory from
// /proc/PID/smaps_rollup while all of them are alive (USS: the pages only
// that process holds; shared index pages count in none of them).
//
//   open_probe DIR --rank R --world W [--shuffle auto|none|block|full]
//              [--batch N] [--workers N] [--cold] [--epoch]
//
// Prints one line, "open_s=.. first_batch_s=.. records=.. pid=..", then waits
// for standard input to close before it exits (so the script can measure it).
// --cold evicts the dataset's files from the page cache first (posix_fadvise).
// --epoch then reads the rest of the rank's epoch and prints
// "epoch_s=.. samples=.. samples_per_s=.. peak_rss_mb=.. anon_mb=.. uss_mb=.."
// (the last two at the epoch's end).
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "loader/loader.h"
#include "shard/manifest.h"
#include "storage/file_io.h"

// A "Name: N kB" line of a /proc/self file, in MB (0 where there is none).
double ProcMb(const char* file, const char* name) {
  FILE* f = std::fopen(file, "r");
  if (f == nullptr) return 0;
  char line[256];
  double kb = 0;
  const size_t n = std::strlen(name);
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, name, n) == 0 && line[n] == ':') {
      kb = std::atof(line + n + 1);
      break;
    }
  }
  std::fclose(f);
  return kb / 1024;
}

int main(int argc, char** argv) {
  using namespace shardkit;
  using Clock = std::chrono::steady_clock;
  if (argc < 2) {
    std::fprintf(stderr, "usage: open_probe DIR --rank R --world W [--shuffle MODE] [--cold]\n");
    return 2;
  }
  const std::string dir = argv[1];
  LoaderOptions o;
  o.batch_size = 512;
  o.workers = 1;
  o.shuffle = ShuffleMode::kBlockLocal;
  o.transform.kind = TransformKind::kNone;
  bool cold = false, epoch = false;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i], v = i + 1 < argc ? argv[i + 1] : "";
    if (flag == "--cold" || flag == "--epoch") {
      (flag == "--cold" ? cold : epoch) = true;
      continue;
    }
    ++i;
    if (flag == "--rank") {
      o.rank = std::atoi(v.c_str());
    } else if (flag == "--world") {
      o.world_size = std::atoi(v.c_str());
    } else if (flag == "--batch") {
      o.batch_size = std::atoi(v.c_str());
    } else if (flag == "--workers") {
      o.workers = std::atoi(v.c_str());
    } else if (flag != "--shuffle" || !ShuffleModeFromName(v, &o.shuffle)) {
      std::fprintf(stderr, "open_probe: error: bad argument '%s %s'\n", flag.c_str(), v.c_str());
      return 2;
    }
  }
  if (cold) {
    auto m = ReadManifest(dir);
    if (!m.ok()) {
      std::fprintf(stderr, "open_probe: %s\n", m.status().ToString().c_str());
      return 2;
    }
    for (const auto& s : m->shards) (void)EvictFromPageCache(JoinPath(dir, s.file));
  }
  const auto t0 = Clock::now();
  auto loader = Loader::Open(dir, o);
  const auto t1 = Clock::now();
  Status s = loader.ok() ? (*loader)->StartEpoch(0) : loader.status();
  const Batch* b = nullptr;
  if (s.ok()) s = (*loader)->Next(&b);
  const auto t2 = Clock::now();
  if (!s.ok() || b == nullptr) {
    std::fprintf(stderr, "open_probe: %s\n", s.ok() ? "no batch" : s.ToString().c_str());
    return 2;
  }
  const double open_s = std::chrono::duration<double>(t1 - t0).count();
  const double first_s = std::chrono::duration<double>(t2 - t1).count();
  std::printf("open_s=%.3f first_batch_s=%.3f records=%llu pid=%d\n", open_s, first_s,
              static_cast<unsigned long long>((*loader)->dataset_records()),
              static_cast<int>(getpid()));
  std::fflush(stdout);
  if (epoch) {
    uint64_t samples = b->real_size;
    while (s.ok()) {
      s = (*loader)->Next(&b);
      if (!s.ok() || b == nullptr) break;
      samples += b->real_size;
    }
    if (!s.ok()) {
      std::fprintf(stderr, "open_probe: %s\n", s.ToString().c_str());
      return 2;
    }
    const double epoch_s = std::chrono::duration<double>(Clock::now() - t1).count();
    std::printf(
        "epoch_s=%.3f samples=%llu samples_per_s=%.0f peak_rss_mb=%.1f anon_mb=%.1f "
        "uss_mb=%.1f\n",
        epoch_s, static_cast<unsigned long long>(samples), samples / epoch_s,
        ProcMb("/proc/self/status", "VmHWM"), ProcMb("/proc/self/smaps_rollup", "Anonymous"),
        ProcMb("/proc/self/smaps_rollup", "Private_Clean") +
            ProcMb("/proc/self/smaps_rollup", "Private_Dirty"));
    std::fflush(stdout);
  }
  char c;
  while (read(0, &c, 1) > 0) {
  }
  return 0;
}
