// Trainer: one rank's training loop. Reads batches from the loader, moves and
// normalises them on the device, runs forward/backward with gradients averaged
// across ranks by GradientReducer, steps SGD on the learning-rate schedule
// (train/lr_schedule.h) with fp16 loss scaling (train/loss_scale.h),
// evaluates top-1/top-5 reduced over ranks, writes checkpoints and the
// epochs' metrics (rank 0; train/epoch_metrics.h), and stops cleanly on
// SIGTERM/SIGUSR1. It prints nothing and reads no environment: what happens
// reaches the caller through TrainEvents, and who the rank is comes in a
// DistEnv (tools/train reads both from the process's environment and prints).
#pragma once

#include <functional>
#include <string>

#include "base/status.h"
#include "train/dist.h"
#include "train/epoch_metrics.h"
#include "train/train_options.h"

namespace shardkit {

// Exit code when training stopped on a signal after writing a checkpoint:
// the job should be requeued and resumed.
inline constexpr int kExitCheckpointedOnSignal = 75;

// Where the steps of an epoch are: every TrainOptions::print_every batches.
struct StepProgress {
  uint64_t epoch = 0;  // 1-based
  int epochs = 0;
  int64_t batch = 0;              // batches of the epoch done (its index after the step)
  int64_t batches_per_epoch = 0;  // this run's, after an elastic resume too
  double loss = 0;                // the step's
  double lr = 0;                  // the step's
  double images_per_sec = 0;      // over every rank, since this run's epoch start
  double data_wait_fraction = 0;  // of this rank's time in steps
  double eta_seconds = 0;         // to the epoch's end, at the pace so far
};

// What a training run tells its caller, from rank 0 only (the other ranks'
// would repeat it). Each may be empty; called on the training thread, with
// nothing held: a callback may print, log or write.
struct TrainEvents {
  // One line each: the set-up (model, data, DDP), a resume, a stop on a signal.
  std::function<void(const std::string&)> note;
  // Something the user asked for that did not happen as asked (--resume
  // with no checkpoint to resume from).
  std::function<void(const std::string&)> warning;
  // Every print_every batches. Without it no progress is computed (no
  // device sync to read the loss).
  std::function<void(const StepProgress&)> progress;
  // Each epoch's end (or a max_steps stop mid-epoch), after evaluation and
  // the checkpoint; the same report goes to --metrics.
  std::function<void(const EpochReport&)> epoch_end;
};

// Runs training as rank env.rank. Returns OK when all epochs (or max_steps)
// finished, Aborted when stopped by a signal after checkpointing, an error otherwise.
Status Train(const TrainOptions& options, const DistEnv& env, const TrainEvents& events = {});
// The same over `group` instead of a group from a rendezvous, even for a
// world of one: for tests that record every collective the trainer issues.
Status Train(const TrainOptions& options, const DistEnv& env,
             c10::intrusive_ptr<CollectiveGroup> group, const TrainEvents& events = {});

// Installs the SIGTERM/SIGUSR1 handlers that ask Train to checkpoint and stop.
void InstallStopSignalHandlers();

}  // namespace shardkit
