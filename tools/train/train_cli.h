// shardkit-train's flags: AddTrainFlags defines each with its range, writing
// into a TrainOptions (train/train_options.h). Used by the tool and by the
// command-line fuzz target.
#pragma once

#include "train/train_options.h"

namespace CLI {
class App;
}

namespace shardkit {

// Defines every flag of shardkit-train on `app`, writing into *o; --nproc-per-node
// into *nproc and --no-mmap into *no_mmap.
void AddTrainFlags(CLI::App& app, TrainOptions* o, int* nproc, bool* no_mmap);

}  // namespace shardkit
