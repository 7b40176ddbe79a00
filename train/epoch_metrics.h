// An epoch's figures: what each rank's steps add up to (EpochSums), summed
// over ranks in one collective, and the epoch's report built from them
// (EpochReport), as the JSON line shardkit-train prints and --metrics keeps.
#pragma once

#include <cstdint>
#include <string>

#include "train/dist.h"

namespace shardkit {

// One rank's sums over an epoch's steps (or, after SumOverRanks, every rank's).
struct EpochSums {
  double loss_sum = 0;         // each step's mean loss times its samples
  double samples = 0;          // stepped through, padding included
  double correct = 0;          // top-1 hits on the training batches
  double records = 0;          // samples that are not padding
  double wait_s = 0;           // waiting for the next batch (and the epoch's start)
  double step_s = 0;           // forward, backward and the optimizer step
  double comm_s = 0;           // gradient all-reduce not hidden behind backward
  double corrupt_skipped = 0;  // corrupt records replaced by the loader
  double start_s = 0;          // from the epoch's start to its first batch in hand
  // The loader's workers: seconds they read, decompressed, decoded and
  // transformed (summed over workers), and its fills on the producer thread
  // alone and on the whole team (BatchFiller).
  double loader_busy_s = 0;
  double fills_alone = 0, fills_shared = 0;
};

// Every rank's sums added field by field, in one all-reduce of a float64
// tensor on `device` (the group's); with no group, `mine`. Every rank calls it.
EpochSums EpochSumsOverRanks(CollectiveGroup* group, torch::Device device, const EpochSums& mine);

// An epoch's report: the sums over ranks and what the run was.
struct EpochReport {
  uint64_t epoch = 0;           // 1-based
  int size = 0;                 // the training input's side (0: records as stored)
  double seconds = 0;           // the epoch's steps (this run's part of it after a resume)
  EpochSums sums;               // over every rank
  double top1 = -1, top5 = -1;  // on the validation set; -1: none
  double lr = 0;                // of the epoch's last step
  int world_size = 1, nodes = 1;
  int batch_size = 0, workers = 0;  // per rank
  int64_t steps = 0;                // optimizer steps taken in total
  std::string arch, device, amp, backend;
  bool synthetic = false;
};

// The report as one line of JSON (no newline): loss and train_top1 per
// sample, images_per_sec over the epoch's seconds, data_wait_fraction and
// comm_exposed_fraction of the time in steps, comm_exposed_seconds and
// epoch_start_seconds (the loader's epoch start and first batch, part of the
// wait: a short epoch's figures are mostly that) per rank; with a loader
// (workers > 0), loader_busy_fraction (its workers' timed stages, read,
// decompress, decode and transform, over their capacity, workers x seconds x
// ranks: near 1 with a large data wait, decoding is the bound; well under 1,
// something else holds the batches back; raw records' copies are not timed)
// and loader_fills_alone / _shared (summed over ranks).
std::string EpochReportJson(const EpochReport& r);

}  // namespace shardkit
