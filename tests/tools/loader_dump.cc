// loader_dump: writes what the loader delivers for a dataset, one epoch (in
// record order unless --shuffle), so that tests in other languages can compare
// it with a reference (tests/python/test_val_pixels.py: torchvision) or with
// the Python binding (tests/python/test_binding.py).
//
//   loader_dump DIR OUT --transform train|val|none [--size N] [--seed S]
//               [--shuffle none|full|block] [--batch N] [--workers N]
//               [--rank R --world W] [--epoch E]
//
// OUT: "N C H W\n", then for each sample "record label key\n" lines, then the
// N x C x H x W uint8 pixels (NCHW), every sample of every batch (padding too).
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "loader/loader.h"
#include "shard/dataset.h"

int main(int argc, char** argv) {
  using namespace shardkit;
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: loader_dump DIR OUT --transform train|val|none [--size N] [--seed S]\n");
    return 2;
  }
  LoaderOptions o;
  uint64_t epoch = 0;
  o.shuffle = ShuffleMode::kNone;
  o.batch_size = 16;
  o.workers = 2;
  auto number = [](const std::string& v, unsigned long long max, unsigned long long* out) {
    char* end = nullptr;
    errno = 0;
    *out = std::strtoull(v.c_str(), &end, 10);
    return !v.empty() && v[0] != '-' && *end == '\0' && errno == 0 && *out <= max;
  };
  for (int i = 3; i < argc; i += 2) {
    const std::string flag = argv[i], v = i + 1 < argc ? argv[i + 1] : "";
    unsigned long long n = 0;
    if (flag == "--transform" && TransformKindFromName(v, &o.transform.kind)) {
    } else if (flag == "--size" && number(v, 4096, &n)) {
      o.transform.size = static_cast<int>(n);
    } else if (flag == "--seed" && number(v, ~0ull, &n)) {
      o.seed = n;
    } else if (flag == "--shuffle" && ShuffleModeFromName(v, &o.shuffle) &&
               o.shuffle != ShuffleMode::kAuto) {
    } else if (flag == "--batch" && number(v, 1 << 20, &n)) {
      o.batch_size = static_cast<int>(n);
    } else if (flag == "--workers" && number(v, 256, &n)) {
      o.workers = static_cast<int>(n);
    } else if (flag == "--rank" && number(v, 1 << 20, &n)) {
      o.rank = static_cast<int>(n);
    } else if (flag == "--world" && number(v, 1 << 20, &n)) {
      o.world_size = static_cast<int>(n);
    } else if (flag == "--epoch" && number(v, ~0ull, &n)) {
      epoch = n;
    } else {
      std::fprintf(stderr, "loader_dump: error: bad argument '%s %s'\n", flag.c_str(), v.c_str());
      return 2;
    }
  }
  auto loader = Loader::Open(argv[1], o);
  Status s = loader.ok() ? (*loader)->StartEpoch(epoch) : loader.status();
  std::string index, pixels;
  uint64_t n = 0;
  auto ds = Dataset::Open(argv[1]);
  while (s.ok() && ds.ok()) {
    const Batch* b = nullptr;
    s = (*loader)->Next(&b);
    if (!s.ok() || b == nullptr) break;
    for (int i = 0; i < b->size; ++i, ++n) {
      auto [shard, local] = (*ds)->Locate(b->sample_ids[i]);
      index += std::to_string(b->sample_ids[i]) + " " + std::to_string(b->labels[i]) + " " +
               std::string((*ds)->shard(shard).key(local)) + "\n";
      pixels.append(reinterpret_cast<const char*>(b->data + i * b->sample_bytes()),
                    b->sample_bytes());
    }
  }
  if (!s.ok() || !ds.ok()) {
    std::fprintf(stderr, "loader_dump: error: %s\n", (s.ok() ? ds.status() : s).message().c_str());
    return 2;
  }
  FILE* f = std::fopen(argv[2], "wb");
  if (f == nullptr) return 2;
  std::fprintf(f, "%llu %d %d %d\n%s", (unsigned long long)n, (*loader)->channels(),
               (*loader)->height(), (*loader)->width(), index.c_str());
  std::fwrite(pixels.data(), 1, pixels.size(), f);
  return std::fclose(f) == 0 ? 0 : 2;
}
