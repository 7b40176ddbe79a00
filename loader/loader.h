// Loader: the public API of the loader module. Reads a shard dataset for one
// rank, decodes and augments samples on an OpenMP team, and hands out batches
// from a bounded prefetch ring, ahead of the consumer.
//
// Determinism: the batches a rank sees depend only on (dataset, seed, epoch,
// rank, world_size, batch_size, transform), never on the number of workers or
// on thread timing; StartEpoch(e, b) yields exactly the batches b, b+1, ...
// that an uninterrupted epoch e would have.
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
#include "loader/corrupt_policy.h"
#include "loader/loader_state.h"
#include "loader/prefetch_ring.h"
#include "loader/record_source.h"
#include "loader/sampler.h"
#include "loader/transforms.h"
#include "shard/dataset.h"

namespace shardkit {

struct LoaderOptions {
  int rank = 0;
  int world_size = 1;
  int batch_size = 32;
  int workers = 1;   // OpenMP threads decoding
  int prefetch = 4;  // batches decoded ahead of the consumer (ring slots)
  uint64_t seed = 0;
  // kAuto: full permutation, unless the dataset is compressed and larger than
  // the block cache (block-local shuffling then keeps each block decompressed
  // about once per epoch), or larger than the memory available for the page
  // cache (every epoch then comes from storage, which block-local reads
  // sequentially, at its bandwidth, instead of record by record).
  ShuffleMode shuffle = ShuffleMode::kAuto;
  uint32_t block_window = 32;  // block-local: blocks whose records are mixed
  bool drop_last = false;      // see Partition
  TransformParams transform;
  Layout layout = Layout::kNCHW;
  CorruptPolicy corrupt_policy = CorruptPolicy::kFail;
  uint64_t skip_budget = 100;
  uint64_t block_cache_bytes = 1ull << 30;
  // Read shards through read-only mappings where access is sequential
  // (block-local or no shuffle): compressed blocks are checksummed and
  // decompressed straight from the page cache, without pread's copy. A full
  // shuffle always reads each record with one pread of exactly its bytes (a
  // mapping would fault a random record in a page at a time, reading more
  // than the record from cold storage). Turn off where shards may be
  // truncated or replaced in place while training reads them, or where the
  // filesystem's mmap misbehaves: a mapped page that vanishes raises SIGBUS,
  // not an error.
  bool mmap = true;
  // Full shuffle only: read records with O_DIRECT, sector-aligned, bypassing
  // the page cache (RandomAccessFile::EnableDirectReads): a random record of
  // a few KB then costs its bytes rounded to sectors, not whole pages. kAuto
  // does so when the dataset is larger than the memory available for the
  // page cache, where caching it is futile; smaller datasets keep the cache.
  using DirectReads = shardkit::DirectReads;
  DirectReads direct_reads = DirectReads::kAuto;
  // Reads kept in flight ahead of the decoders (ReadQueue: a pool of I/O
  // threads), for stored records (JPEGs, large raw records) in every shuffle
  // mode and read path: network storage's milliseconds per read are hidden
  // by depth, whatever the number of workers. 0: each worker reads what it
  // decodes (with page-cache read-ahead hints where reads are buffered).
  int read_depth = 32;
  // Bytes the reads ahead may hold (read or being read, not yet decoded).
  uint64_t read_ahead_bytes = 64ull << 20;
  // Where batch memory comes from (see PrefetchRing): pinned host memory for
  // a CUDA consumer, say. Empty: the heap.
  SlotAllocator allocator;
};

// Seconds summed over workers for the stages, and the consumer's wait.
struct LoaderStats {
  double read_s = 0, decompress_s = 0, decode_s = 0, transform_s = 0;
  double wait_s = 0;  // time Next() spent waiting for a batch
  uint64_t samples = 0, batches = 0, bytes_read = 0;
  uint64_t corrupt_skipped = 0;  // samples replaced (on_corrupt skip)
  uint64_t corrupt_units = 0;    // distinct damages: records, or compressed blocks (CorruptSamples)
  std::vector<std::string> corrupt_messages;  // one per unit, the first few
  // The read-ahead queue (read_depth > 0): reads it made, reads in flight
  // (mean at each read's start, peak), the mean latency of a read, and the
  // most bytes it held (of read_ahead_bytes, plus reads a worker waited for).
  uint64_t queued_reads = 0;
  double mean_reads_in_flight = 0, mean_read_latency_s = 0;
  uint64_t peak_reads_in_flight = 0, peak_read_ahead_bytes = 0;
};

// Loader threads per rank at most: more is a typo, not a machine.
inline constexpr int kMaxLoaderWorkers = 256;

// Checks every option's range (workers, prefetch, batch size, rank, transform
// ranges, no NaN) without touching the dataset; Loader::Open calls it.
Status ValidateLoaderOptions(const LoaderOptions& options);

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
  Status StartEpoch(uint64_t epoch, uint64_t start_batch = 0);
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
  // its end is (epoch + 1, 0).
  LoaderState state() const;
  // Checks `saved` against this loader (CheckResumable: InvalidArgument
  // naming what differs) and starts its epoch at its batch.
  Status Restore(const LoaderState& saved);

  uint64_t batches_per_epoch() const;
  uint64_t samples_per_epoch() const;       // this rank's
  uint64_t real_samples_per_epoch() const;  // this rank's, padding excluded
  uint64_t dataset_records() const;
  int channels() const;
  int height() const;
  int width() const;
  const Manifest& manifest() const;
  ShuffleMode shuffle_mode() const;
  LoaderStats stats() const;
  void ResetStats();

  struct Impl;

 private:
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardkit
