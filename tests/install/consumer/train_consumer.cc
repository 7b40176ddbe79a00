// Trains a few steps on a dataset with the installed training library, as one
// process, and prints "trained N steps".
#include <cstdio>

#include "train/trainer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: train_consumer DATASET_DIR\n");
    return 2;
  }
  shardkit::TrainOptions o;
  o.data = argv[1];
  o.batch_size = 4;
  o.workers = 1;
  o.size = 32;
  o.max_steps = 2;
  long long steps = 0;
  shardkit::TrainEvents events;
  events.epoch_end = [&](const shardkit::EpochReport& r) { steps = r.steps; };
  shardkit::Status s = shardkit::Train(o, shardkit::DistEnv(), events);
  if (!s.ok()) {
    std::fprintf(stderr, "train_consumer: %s\n", s.message().c_str());
    return 2;
  }
  std::printf("trained %lld steps\n", steps);
  return 0;
}
