// Loader: the public API of the loader module. Reads a shard dataset for one
// rank, decodes and augments samples on an OpenMP team, and hands out batches
// from a bounded prefetch ring, ahead of the consumer.
//
// Determinism: the batches a rank sees depend only on (dataset, seed, epoch,
// rank, world_size, batch_size, transform), never on the number of workers or
// on thread timing; StartEpoch(e, b) yields exactly the batches b, b+1, ...
// that an uninterrupted epoch e would have. Under ShuffleMode::kGiven the
// order is the caller's (SetEpochOrder: a sampler's indices) and takes the
// place of (rank, world_size): the same order gives the same batches.
//
// Structure: a RecordSource (which bytes: sampler, shard reads, block cache,
// read-ahead) feeds a SampleDecoder (bytes -> pixels); a BatchFiller runs
// them on an OpenMP team for the batches one producer thread claims from a
// PrefetchRing, settling failed samples with CorruptSamples (the corrupt
// policy); the consumer takes batches from the ring as leases. The Loader
// only wires these and reports their figures.
//
// Threading: one consumer at a time. Calls from several threads are
// serialised (a second thread's Next() waits for the first's, never
// corrupting the state), but they share one position in the epoch: each batch
// goes to whichever thread asks first. Leases may be dropped from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "loader/batch.h"
#include "loader/loader_state.h"
#include "loader/options.h"
#include "shard/manifest.h"

namespace shardkit {

class Loader {
 public:
  // Opens the dataset (validating every shard's header, trailer and index).
  static Result<std::unique_ptr<Loader>> Open(const std::string& dir, const LoaderOptions& options);
  // Stops the workers, promptly even mid-epoch.
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts (or restarts) epoch `epoch` at batch `start_batch`, cancelling the
  // epoch in progress. Batches leased from the old epoch stay valid.
  // kGiven: InvalidArgument unless the epoch's order was given.
  Status StartEpoch(uint64_t epoch, uint64_t start_batch = 0);
  // ShuffleMode::kGiven: the order of epoch `epoch`, global record numbers
  // in the order they are read (repeats allowed; empty: an epoch of no
  // batch), this rank's whole epoch, cut into batches of batch_size as
  // drop_last says and read with the read-ahead, workers, corrupt policy
  // and augmentation (keyed by the position in this order) of any other
  // order. Passes and StartEpoch of that epoch read it until another is
  // given; giving one for the epoch Restore() left mid-way starts that
  // epoch anew in the new order. Takes effect at the next StartEpoch or
  // BeginPass: a pass in progress keeps its order. InvalidArgument for
  // another mode, or a number that is not a record of the dataset (naming
  // it and its position).
  Status SetEpochOrder(uint64_t epoch, std::vector<uint64_t> records);
  // The output's side (square) from the next epoch on: the train crop's,
  // RandomCrop's, or val's CenterCrop (with its Resize to `resize`'s short
  // side; 0: round(size / crop_fraction)), as a resolution schedule changes
  // it between epochs (FFCV's low-resolution first epochs). Pixels are a
  // loader opened at that size's, torchvision's; the DCT scale a train
  // crop is decoded at follows the size. state() saves it and Restore() sets it
  // back. Between epochs only (an epoch read to its end, or between
  // passes): InvalidArgument in the middle of one; and for records
  // returned as stored (transform none). Leases of the old size stay valid.
  Status SetSize(int size, int resize = 0);
  // The next batch of the epoch, or a null lease at its end. The lease owns
  // the batch's memory: it stays valid and unchanged until the last copy of
  // the lease is dropped (from any thread, even after the Loader is gone),
  // while the loader fills other memory. An error (corruption under kFail,
  // an exhausted skip budget, an I/O failure) ends the epoch: later calls
  // return it again until StartEpoch.
  Status Next(std::shared_ptr<const Batch>* batch);
  // The same, waiting at most `timeout_ns` for the batch: *ready false (and
  // OK, no batch, the position unchanged) if it did not come in time. For a
  // consumer that must also watch for something else (Python's Ctrl-C).
  Status Next(std::shared_ptr<const Batch>* batch, uint64_t timeout_ns, bool* ready);
  // The same, with the batch valid until the next Next() or StartEpoch():
  // the loader holds the lease.
  Status Next(const Batch** batch);
  // Where the next Next() starts: (epoch, batch). StartEpoch(epoch, batch)
  // in a new loader with the same options continues exactly from here.
  uint64_t epoch() const;
  uint64_t next_batch() const;
  // The same with what decides the batches (LoaderState); an epoch read to
  // its end is (epoch + 1, 0); between passes (EndPass), where the next pass
  // starts.
  LoaderState state() const;
  // Checks `saved` against this loader (CheckResumable: InvalidArgument
  // naming what differs) and starts its epoch at its batch. Saved with
  // another world size, batch size or drop_last mid-epoch (elastic resume):
  // that epoch continues with exactly the positions the saved run had not
  // read, cut for this loader (Partition::Remaining), each record once and
  // augmented as it would have been; its batches are numbered from 0, and
  // StartEpoch of that epoch restarts them until the epoch is read to its end
  // (Next gives no batch) or another epoch starts. batches_per_epoch() and the samples counts then
  // describe that rest. kGiven: a state mid-way through an epoch holds that
  // epoch's order, which the rest is read from; a state at an epoch's start
  // only sets where the next pass starts (pass_epoch()), whose order is then
  // given as for any epoch (PassResumes() is false), and no pass starts.
  Status Restore(const LoaderState& saved);

  // Passes: how an iterator protocol reads the loader (Python's `for batch
  // in loader`, a DataLoader's epochs), with its position rules here, once.
  // SetEpoch(e) chooses the epoch the next pass reads. BeginPass() starts the
  // next pass: the epoch chosen since the last pass began; else the one after
  // the last pass's if that was read to its end (Next gave no batch: taking
  // the last batch is not the end), or the same one again, from
  // its start, if it stopped early. A pass of the epoch Restore() saved
  // starts at the saved batch, until a pass of it is read to its end (so a
  // peek at the first batch does not lose the saved position). EndPass()
  // marks the pass over, read or abandoned: state() then says where the
  // next pass starts. StartEpoch() and Restore() start a pass of their own
  // choosing.
  void SetEpoch(uint64_t epoch);
  Status BeginPass();
  void EndPass();
  // The epoch of the pass in progress, else the one the next pass reads.
  uint64_t pass_epoch() const;
  // Whether the pass BeginPass would start now continues an epoch Restore()
  // left mid-way (at its saved batch, or the rest of it cut again): kGiven,
  // that pass reads the order the state saved, and a caller drawing an
  // order per pass from a sampler draws none for it.
  bool PassResumes() const;

  uint64_t batches_per_epoch() const;       // of the epoch started last
  uint64_t samples_per_epoch() const;       // this rank's
  uint64_t real_samples_per_epoch() const;  // this rank's, padding excluded
  uint64_t dataset_records() const;
  int channels() const;
  int height() const;
  int width() const;
  const Manifest& manifest() const;
  ShuffleMode shuffle_mode() const;
  // The global record numbers this rank reads in the whole epoch `epoch`,
  // in order, padding included (the batches' sample ids, from batch 0),
  // computed without reading: what a DistributedSampler's indices are.
  // kGiven: the order given for it, drop_last applied (none: empty).
  std::vector<uint64_t> EpochRecords(uint64_t epoch) const;
  // The same for the pass BeginPass would start now: its epoch from its
  // first batch (after Restore, the saved batch, or the rest cut again), so
  // exactly the sample ids that pass's batches carry.
  std::vector<uint64_t> PassRecords() const;
  uint64_t PassSamples() const;  // PassRecords().size(), without locating them
  // Why ShuffleMode::kAuto resolved to shuffle_mode() ("" if a mode was asked for).
  const std::string& shuffle_reason() const;
  LoaderStats stats() const;
  void ResetStats();

 private:
  struct Impl;
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardkit
