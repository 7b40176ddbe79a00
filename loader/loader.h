// Loader: the public API of the loader module. Reads a shard dataset for one
// rank, decodes and augments samples on an OpenMP team, and hands out batches
// from a bounded prefetch ring, ahead of the consumer.
//
// Determinism: the batches a rank sees depend only on (dataset, seed, epoch,
// rank, world_size, batch_size, transform), never on the number of workers or
// on thread timing; StartEpoch(e, b) yields exactly the batches b, b+1, ...
// that an uninterrupted epoch e would have.
//
// Threading: one producer thread per loader leads the OpenMP team that fills
// batches; Next() and StartEpoch() must be called from one consumer thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loader/jpeg_codec.h"
#include "loader/sampler.h"
#include "loader/transforms.h"
#include "shard/dataset.h"
#include "shard/status.h"

namespace shardkit {

enum class Layout { kNCHW, kNHWC };

enum class CorruptPolicy {
  kFail,  // the batch's error is returned by Next(), naming shard and record
  kSkip,  // replace the sample by another of the rank's samples, count it, and
          // fail once more than `skip_budget` samples were skipped
};

enum class ShuffleChoice { kAuto, kNone, kFull, kBlockLocal };

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
  ShuffleChoice shuffle = ShuffleChoice::kAuto;
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
  // shuffle always reads each record with one pread of exactly its bytes: on
  // cold storage a mapping faults a random record in a page at a time (1.44x
  // the record bytes and 0.63x the images/s of pread, measured). Turn off
  // where shards may be truncated or replaced in place while training reads
  // them, or where the filesystem's mmap misbehaves: a mapped page that
  // vanishes raises SIGBUS, not an error.
  bool mmap = true;
  // Full shuffle only: read records with O_DIRECT, sector-aligned, bypassing
  // the page cache (RandomAccessFile::EnableDirectReads): a random record of
  // a few KB then costs its bytes, not whole pages (1.5x and more). kAuto
  // does so when the dataset is larger than the memory available for the
  // page cache, where caching it is futile; smaller datasets keep the cache.
  enum class DirectReads { kAuto, kAlways, kNever };
  DirectReads direct_reads = DirectReads::kAuto;
};

// One batch: uint8 pixels (N x C x H x W or N x H x W x C), labels, and the
// global record number of each sample. Owned by the loader; valid until the
// next Next() or StartEpoch() call.
struct Batch {
  uint64_t epoch = 0;
  uint64_t index = 0;  // batch number within the epoch
  int size = 0;        // samples (the last batch may be short unless drop_last)
  int real_size = 0;   // of those, samples that are not padding (see Partition)
  int channels = 0, height = 0, width = 0;
  Layout layout = Layout::kNCHW;
  const uint8_t* data = nullptr;
  const int32_t* labels = nullptr;
  const uint64_t* sample_ids = nullptr;
  size_t sample_bytes() const { return size_t(channels) * height * width; }
};

// Seconds summed over workers for the stages, and the consumer's wait.
struct LoaderStats {
  double read_s = 0, decompress_s = 0, decode_s = 0, transform_s = 0;
  double wait_s = 0;  // time Next() spent waiting for a batch
  uint64_t samples = 0, batches = 0, bytes_read = 0;
  uint64_t corrupt_skipped = 0;
  std::vector<std::string> corrupt_messages;  // the first few
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
  // epoch in progress.
  Status StartEpoch(uint64_t epoch, uint64_t start_batch = 0);
  // The next batch of the epoch, or *batch = nullptr at its end. An error
  // (corruption under kFail, an exhausted skip budget, an I/O failure) ends
  // the epoch: later calls return it again until StartEpoch.
  Status Next(const Batch** batch);

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

// Normalises a uint8 batch to float: out = (x / 255 - mean[c]) / std[c], in the
// batch's layout. For CPU consumers; on a GPU do it on the device.
void NormalizeBatch(const Batch& batch, const float mean[3], const float std[3], float* out);

}  // namespace shardkit
