// Trainer: one rank's training loop. Reads batches from the loader, moves and
// normalises them on the device, runs forward/backward with gradients averaged
// across ranks by GradientReducer, steps SGD with warmup and cosine or step
// decay, evaluates top-1/top-5 reduced over ranks, writes checkpoints (rank 0)
// and per-epoch metrics, and stops cleanly on SIGTERM/SIGUSR1.
#pragma once

#include <string>

#include "base/status.h"
#include "train/dist.h"
#include "train/train_options.h"

namespace shardkit {

// Exit code when training stopped on a signal after writing a checkpoint:
// the job should be requeued and resumed.
inline constexpr int kExitCheckpointedOnSignal = 75;

// Runs training as rank env.rank. Returns OK when all epochs (or max_steps)
// finished, Aborted when stopped by a signal after checkpointing, an error otherwise.
Status Train(const TrainOptions& options, const DistEnv& env);
// The same over `group` instead of a group from a rendezvous, even for a
// world of one: for tests that record every collective the trainer issues.
Status Train(const TrainOptions& options, const DistEnv& env,
             c10::intrusive_ptr<CollectiveGroup> group);

// Installs the SIGTERM/SIGUSR1 handlers that ask Train to checkpoint and stop.
void InstallStopSignalHandlers();

}  // namespace shardkit
