// Reads one epoch of a dataset with the installed loader and prints what it
// saw: "shardkit VERSION: N records, B batches, label sum S".
#include <cstdio>

#include "base/version.h"
#include "loader/loader.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer DATASET_DIR\n");
    return 2;
  }
  shardkit::LoaderOptions o;
  o.batch_size = 16;
  o.workers = 2;
  auto loader = shardkit::Loader::Open(argv[1], o);
  if (!loader.ok()) {
    std::fprintf(stderr, "consumer: %s\n", loader.status().message().c_str());
    return 2;
  }
  if (!(*loader)->StartEpoch(0).ok()) return 2;
  long long labels = 0, batches = 0;
  for (;;) {
    std::shared_ptr<const shardkit::Batch> b;
    shardkit::Status s = (*loader)->Next(&b);
    if (!s.ok()) {
      std::fprintf(stderr, "consumer: %s\n", s.message().c_str());
      return 2;
    }
    if (b == nullptr) break;
    ++batches;
    for (int i = 0; i < b->real_size; ++i) labels += b->labels[i];
  }
  std::printf("shardkit %s: %llu records, %lld batches, label sum %lld\n", shardkit::kVersion,
              static_cast<unsigned long long>((*loader)->dataset_records()), batches, labels);
  return 0;
}
