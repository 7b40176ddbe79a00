// shardkit-train's flags: AddTrainFlags defines each with its range, writing
// into a TrainOptions (train/train_options.h) and, for those of the tool
// itself, a TrainToolFlags. Used by the tool and by the command-line fuzz target.
#pragma once

#include "train/train_options.h"

namespace CLI {
class App;
}

namespace shardkit {

// What shardkit-train does itself rather than tell the trainer.
struct TrainToolFlags {
  int nproc = 0;         // --nproc-per-node: start this many local ranks
  bool no_mmap = false;  // --no-mmap: TrainOptions::mmap false
  bool quiet = false;    // --quiet: no progress line and no notes
};

// Defines every flag of shardkit-train on `app`, writing into *o and *tool.
void AddTrainFlags(CLI::App& app, TrainOptions* o, TrainToolFlags* tool);

}  // namespace shardkit
