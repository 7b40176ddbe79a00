// Packs MNIST-style IDX files with the installed ingest library and prints
// "packed N records into S shards".
#include <cstdio>

#include "ingest/idx_file.h"
#include "ingest/packer.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: ingest_consumer IMAGES LABELS OUT\n");
    return 2;
  }
  auto source = shardkit::OpenIdx(argv[1], argv[2], {});
  if (!source.ok()) {
    std::fprintf(stderr, "ingest_consumer: %s\n", source.status().message().c_str());
    return 2;
  }
  shardkit::PackOptions o;
  o.out = argv[3];
  shardkit::PackSummary summary;
  shardkit::Status s = shardkit::Pack(source->get(), o, {}, &summary);
  if (!s.ok()) {
    std::fprintf(stderr, "ingest_consumer: %s\n", s.message().c_str());
    return 2;
  }
  std::printf("packed %llu records into %llu shards\n",
              static_cast<unsigned long long>(summary.packed),
              static_cast<unsigned long long>(summary.shards));
  return 0;
}
