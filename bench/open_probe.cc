// open_probe: what one rank pays to start reading a dataset: the time to open
// the loader (manifest, every shard's header, trailer and index block table),
// the time to its first batch, and its memory then. bench/open_scale.sh runs
// several at once as the ranks of one node and reads their memory from
// /proc/PID/smaps_rollup while all of them are alive (USS: the pages only
// that process holds; shared index pages count in none of them).
//
//   open_probe DIR --rank R --world W [--shuffle none|block|full]
//              [--batch N] [--workers N] [--cold]
//
// Prints one line, "open_s=.. first_batch_s=.. records=.. pid=..", then waits
// for standard input to close before it exits (so the script can measure it).
// --cold evicts the dataset's files from the page cache first (posix_fadvise).
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/file_io.h"
#include "loader/loader.h"
#include "shard/manifest.h"

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
  bool cold = false;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i], v = i + 1 < argc ? argv[i + 1] : "";
    if (flag == "--cold") {
      cold = true;
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
  char c;
  while (read(0, &c, 1) > 0) {
  }
  return 0;
}
