// The loader's options and the names of their values: the public surface of
// the loader module, with loader/loader.h (the Loader), loader/batch.h (what
// it hands out) and loader/loader_state.h (where an epoch stands). The other
// headers of loader/ are its stages, internal and not installed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/names.h"
#include "base/status.h"
#include "image/image.h"
#include "loader/batch.h"
#include "shard/shard_format.h"
#include "storage/env.h"

namespace shardkit {

enum class ShuffleMode {
  kAuto,        // an option only: the loader picks one of the others (LoaderOptions)
  kNone,        // dataset order
  kFull,        // a uniform permutation of all records
  kBlockLocal,  // blocks in random order, records shuffled within windows of
                // `window` consecutive blocks: reads stay mostly sequential and
                // each compressed block is decompressed about once per epoch
  kGiven,       // the caller gives each epoch's order (Loader::SetEpochOrder:
                // a sampler's indices), already this rank's: the loader reads
                // those records in that order and partitions nothing
};

// The names the tools and the Python binding use: "auto", "none", "full",
// "block". FromName returns false for any other name. kGiven has no name to
// parse (it is asked for in code, with the orders it needs); ShuffleModeName
// calls it "given", as loader states record it.
inline constexpr EnumName<ShuffleMode> kShuffleModeNames[] = {{ShuffleMode::kAuto, "auto"},
                                                              {ShuffleMode::kFull, "full"},
                                                              {ShuffleMode::kBlockLocal, "block"},
                                                              {ShuffleMode::kNone, "none"}};
const char* ShuffleModeName(ShuffleMode mode);
bool ShuffleModeFromName(std::string_view name, ShuffleMode* mode);

enum class TransformKind {
  kNone,    // raw records copied; JPEGs resized whole to the output size
  kTrain,   // RandomResizedCrop(output, scale, ratio) + horizontal flip
  kVal,     // Resize(resize) + CenterCrop(output)
  kResize,  // Resize((height, width)): the whole image, squashed to the output
  kCrop,    // RandomCrop(output, padding, fill, padding_mode, pad_if_needed):
            // pixels copied, none resampled; raw records take it too
};

// "train", "val", "resize", "crop", "none": the names the tools and the
// Python binding use. Returns false for any other name.
inline constexpr EnumName<TransformKind> kTransformKindNames[] = {
    {TransformKind::kTrain, "train"},
    {TransformKind::kVal, "val"},
    {TransformKind::kResize, "resize"},
    {TransformKind::kCrop, "crop"},
    {TransformKind::kNone, "none"}};
const char* TransformKindName(TransformKind kind);
bool TransformKindFromName(std::string_view name, TransformKind* kind);

// The transform rule, one for every front end (the tools, the trainer, the
// Python binding): JPEG records take every transform; raw records are
// returned as stored (kNone) or cropped (kCrop: pixels copied, as
// torchvision's RandomCrop copies them), never resized, so they take only
// those two. A transform that does not apply is refused by Loader::Open,
// naming the dataset and the records, never ignored.
bool TransformApplies(format::RecordKind record, TransformKind transform);

// RandomCrop's padding_mode, as torchvision names them: what a padded pixel
// holds. kConstant: the fill; kEdge: the nearest pixel of the image;
// kReflect: the image mirrored about its edge pixel (d c b | a b c d);
// kSymmetric: mirrored with the edge repeated (c b a | a b c d). Padding
// wider than the image repeats the mirroring, as NumPy's pad (torchvision's
// for PIL images) does.
enum class PaddingMode { kConstant, kEdge, kReflect, kSymmetric };
inline constexpr EnumName<PaddingMode> kPaddingModeNames[] = {
    {PaddingMode::kConstant, "constant"},
    {PaddingMode::kEdge, "edge"},
    {PaddingMode::kReflect, "reflect"},
    {PaddingMode::kSymmetric, "symmetric"}};

// Padding and cropping up to this many pixels a side (the sizes' bound).
inline constexpr int kMaxPadding = 16384;

struct TransformParams {
  TransformKind kind = TransformKind::kNone;
  int size = 224;             // the output's side, unless height and width are set
  int height = 0, width = 0;  // a non-square output (both, or neither)
  double min_scale = 0.08, max_scale = 1.0;
  double min_ratio = 3.0 / 4.0, max_ratio = 4.0 / 3.0;
  // RandomHorizontalFlip(p) after the geometry; below 0: torchvision's
  // pipelines' habit, 0.5 for train and none otherwise.
  double flip_prob = -1;
  // val's Resize: the short side to `resize` (aspect kept, torchvision's
  // Resize(int)), or to resize_height x resize_width (Resize((h, w))); with
  // neither, the short side to round(size / crop_fraction).
  int resize = 0;
  int resize_height = 0, resize_width = 0;
  double crop_fraction = 0.875;  // val: 224 / 256
  // crop (torchvision's RandomCrop, in its order): the image is padded by
  // pad_left/top/right/bottom with padding_mode; then, with pad_if_needed,
  // a side still shorter than the output is padded by the difference on
  // both of its ends (torchvision's F.pad(img, [diff, 0]), mode and fill
  // alike); then a window of the output size is taken at a random offset.
  // fill: the constant mode's value for every channel (fill_channels 1) or
  // for each (fill_channels = the image's channels).
  int pad_left = 0, pad_top = 0, pad_right = 0, pad_bottom = 0;
  PaddingMode padding_mode = PaddingMode::kConstant;
  bool pad_if_needed = false;
  uint8_t fill[4] = {0, 0, 0, 0};
  int fill_channels = 1;

  int out_height() const { return height > 0 ? height : size; }
  int out_width() const { return width > 0 ? width : size; }
  double flip() const {
    return flip_prob >= 0 ? flip_prob : kind == TransformKind::kTrain ? 0.5 : 0;
  }
};

enum class CorruptPolicy {
  kFail,  // the batch's error is returned by Next(), naming shard and record
  kSkip,  // replace the sample by another of the rank's samples, count it, and
          // fail once more than `skip_budget` samples were skipped
};

// The names the tools and the Python binding use: "fail", "skip".
inline constexpr EnumName<CorruptPolicy> kCorruptPolicyNames[] = {{CorruptPolicy::kFail, "fail"},
                                                                  {CorruptPolicy::kSkip, "skip"}};
const char* CorruptPolicyName(CorruptPolicy policy);
bool CorruptPolicyFromName(std::string_view name, CorruptPolicy* policy);

// Full shuffle: whether records are read around the page cache (see
// StorageOptions::direct_reads): "auto", "on", "off".
enum class DirectReads { kAuto, kAlways, kNever };
inline constexpr EnumName<DirectReads> kDirectReadsNames[] = {
    {DirectReads::kAuto, "auto"}, {DirectReads::kAlways, "on"}, {DirectReads::kNever, "off"}};

// Which samples the rank reads, in which order: the part of the options the
// sampler and the partition take (RecordSource).
struct EpochOptions {
  // Under ShuffleMode::kGiven the orders given are this rank's already:
  // rank must be 0 and world_size 1 (a sampler that partitions, as
  // DistributedSampler does, has its own rank and number of replicas).
  int rank = 0;
  int world_size = 1;
  int batch_size = 32;
  uint64_t seed = 0;
  // kAuto: full permutation, unless the dataset is compressed and larger than
  // the block cache (block-local shuffling then keeps each block decompressed
  // about once per epoch), or larger than the memory available for the page
  // cache (every epoch then comes from storage, which block-local reads
  // sequentially, at its bandwidth, instead of record by record).
  // kGiven: every epoch reads the order Loader::SetEpochOrder gave it, cut
  // into batches of batch_size (drop_last: without a short last batch).
  ShuffleMode shuffle = ShuffleMode::kAuto;
  uint32_t block_window = 32;  // block-local: blocks whose records are mixed
  bool drop_last = false;      // see Partition
};

inline constexpr int kAutoReadDepth = -1;
inline constexpr int kFilesystemReadDepth = 32, kRemoteReadDepth = 128;

// How the bytes are read: the part of the options the record source's
// storage side takes.
struct StorageOptions {
  // Where shards are read from: null is the POSIX filesystem
  // (Env::Default()); another Env reads another storage (storage/env.h).
  Env* env = nullptr;
  // Decompressed blocks of compressed datasets, per rank (a node runs 4-8).
  // Bounded whatever the dataset's size: a compressed dataset larger than
  // this is read block-local under kAuto (a full shuffle would decompress
  // nearly every block for its first batch and then hold them all), with
  // windows of a third of it.
  uint64_t block_cache_bytes = 256ull << 20;
  // Where access is sequential (block-local or no shuffle), let the storage
  // hand out views of the shards (the POSIX Env: read-only mappings), so
  // compressed blocks are checksummed and decompressed straight from the
  // page cache, without pread's copy. A full shuffle always reads each
  // record with one read of exactly its bytes (a mapping would fault a
  // random record in a page at a time, reading more than the record from
  // cold storage). Turn off where shards may be truncated or replaced in
  // place while training reads them, or where the filesystem's mmap
  // misbehaves: a mapped page that vanishes raises SIGBUS, not an error.
  bool mmap = true;
  // Full shuffle only: read records around the page cache (the POSIX Env:
  // O_DIRECT, sector-aligned; see storage/env.h): a random record of a few KB
  // then costs its bytes rounded to sectors, not whole pages. kAuto
  // does so when the dataset is larger than the memory available for the
  // page cache, where caching it is futile; smaller datasets keep the cache.
  using DirectReads = shardkit::DirectReads;
  DirectReads direct_reads = DirectReads::kAuto;
  // Reads kept in flight ahead of the decoders (ReadQueue: a pool of I/O
  // threads), for stored records (JPEGs, large raw records) in every shuffle
  // mode and read path: network storage's milliseconds per read are hidden
  // by depth, whatever the number of workers. 0: each worker reads what it
  // decodes (with page-cache read-ahead hints where reads are buffered).
  // kAutoReadDepth: 32 on a filesystem, 128 on object storage (tens of
  // milliseconds a request).
  int read_depth = kAutoReadDepth;
  // Bytes the reads ahead may hold (read or being read, not yet decoded).
  uint64_t read_ahead_bytes = 64ull << 20;
  // Object storage only: a node cache (storage/remote/node_cache.h) in this local
  // directory keeps what is read, shared by the node's ranks and by later
  // jobs naming the same directory, at most cache_limit bytes (0: no
  // limit). Empty: every epoch reads from storage.
  std::string cache_dir;
  uint64_t cache_limit = 0;
  // Once set (by another thread: a signal's handler, the Python binding on
  // Ctrl-C), an open waiting on remote storage (the manifest, a shard's HEAD
  // and their retries) ends with Aborted. Read by Loader::Open only.
  const Cancel* cancel_open = nullptr;
};

// Everything a Loader is told. Each layer takes its part (the Loader passes
// this object as its EpochOptions and StorageOptions), and a field is named
// the same at every level: options.batch_size, options.read_depth.
struct LoaderOptions : EpochOptions, StorageOptions {
  int workers = 1;   // OpenMP threads decoding
  int prefetch = 4;  // batches decoded ahead of the consumer (ring slots)
  TransformParams transform;
  Layout layout = Layout::kNCHW;
  CorruptPolicy corrupt_policy = CorruptPolicy::kFail;
  uint64_t skip_budget = 100;
  // Where batch memory comes from (see PrefetchRing): pinned host memory for
  // a CUDA consumer, say. Empty: the heap.
  SlotAllocator allocator;
};

// Seconds summed over workers for the stages, and the consumer's wait.
struct LoaderStats {
  double read_s = 0, decompress_s = 0, decode_s = 0, transform_s = 0;
  double wait_s = 0;  // time Next() spent waiting for a batch
  uint64_t samples = 0, batches = 0, bytes_read = 0;
  // on_corrupt skip, since the loader opened (CorruptSamples): the distinct
  // records found corrupt, the samples delivered with another record in
  // their place, and the distinct damages (records, or compressed blocks).
  uint64_t corrupt_records = 0, samples_replaced = 0;
  uint64_t corrupt_units = 0;
  std::vector<std::string> corrupt_messages;  // one per unit, the first few
  // The read-ahead queue (read_depth > 0): reads it made, reads in flight
  // (mean at each read's start, peak), the mean latency of a read, and the
  // most bytes it held (of read_ahead_bytes, plus reads a worker waited for).
  uint64_t queued_reads = 0;
  double mean_reads_in_flight = 0, mean_read_latency_s = 0;
  uint64_t peak_reads_in_flight = 0, peak_read_ahead_bytes = 0;
  // How batches were filled (workers > 1): fills run on the producer thread
  // alone and on the whole team, and whether the loader has measured both
  // ways yet and so settled on the faster (it still tries the other now and
  // then). A benchmark warms up until it has.
  uint64_t fills_alone = 0, fills_shared = 0;
  bool fill_settled = false;
  // Object storage since the loader opened: requests and the bytes of
  // their replies, tries retried (counted over the whole process's object
  // storage, which its loaders share), and the node cache's chunk lookups
  // (cache_dir: found on disk, or fetched from storage).
  uint64_t storage_requests = 0, storage_bytes = 0, storage_retries = 0;
  uint64_t cache_hits = 0, cache_misses = 0;
};

// Loader threads per rank at most: more is a typo, not a machine.
inline constexpr int kMaxLoaderWorkers = 256;
// Batches decoded ahead (ring slots) at most.
inline constexpr int kMaxPrefetch = 1024;
// Ranks and per-rank batch: what a loader (and a saved LoaderState) may say.
inline constexpr int kMaxWorldSize = 1 << 16;
inline constexpr int kMaxBatchSize = 1 << 20;

// Checks every option's range (workers, prefetch, batch size, rank, transform
// ranges, no NaN) without touching the dataset; Loader::Open calls it.
Status ValidateLoaderOptions(const LoaderOptions& options);

}  // namespace shardkit
