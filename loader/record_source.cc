#include "loader/record_source.h"

#include <algorithm>

#include "base/humanize.h"
#include "storage/remote/node_cache.h"
#include "storage/system.h"

namespace shardkit {

namespace {

// Object storage: neighbouring records queued one after another are read
// with one ranged GET of at most this.
constexpr uint64_t kRemoteMergeBytes = 8 << 20;

// The shuffle a kAuto asks for: full, unless the dataset is compressed and
// larger than the block cache or larger than the memory available for the
// page cache (then block-local). On object storage no page cache holds the
// dataset: small records (not worth a request each) are read block-local.
// *why says which (for kAuto only).
ShuffleMode PickMode(ShuffleMode asked, const Manifest& m, bool compressed,
                     uint64_t block_cache_bytes, uint64_t memory_available, bool remote,
                     bool records_worth_a_read, std::string* why) {
  if (asked != ShuffleMode::kAuto) return asked;
  const bool over_cache = compressed && m.raw_bytes() > block_cache_bytes;
  const bool over_memory = remote ? !records_worth_a_read : m.bytes() > memory_available;
  if (over_cache) {
    *why = "its " + FormatBytes(m.raw_bytes()) + " of compressed records are more than the " +
           FormatBytes(block_cache_bytes) + " block cache";
  } else if (over_memory && remote) {
    *why = "it is on object storage and its records are too small to be worth a request each";
  } else if (over_memory) {
    *why = "its " + FormatBytes(m.bytes()) + " are more than the " + FormatBytes(memory_available) +
           " of memory available to cache it";
  } else {
    *why = remote ? "its records are worth a request each on object storage"
                  : "it fits the block cache and memory (" + FormatBytes(m.bytes()) + ")";
  }
  return over_cache || over_memory ? ShuffleMode::kBlockLocal : ShuffleMode::kFull;
}

// How the shards will be read. Random record reads must not pull in the
// read-ahead window around each record (113x the bytes delivered, cold,
// with an 8 MB window); block-local and in-order reading is sequential
// within a shard and wants read-ahead, and views where allowed. A full
// shuffle of a dataset larger than memory reads around the cache where the
// storage can (direct_reads kAuto), or where asked to (kAlways).
AccessHints HintsFor(ShuffleMode mode, const StorageOptions& o, const Manifest& m,
                     uint64_t memory_available) {
  AccessHints h;
  if (mode == ShuffleMode::kFull || mode == ShuffleMode::kGiven) {  // any record next
    h.pattern = AccessHints::Pattern::kRandom;
    h.uncached = o.direct_reads == DirectReads::kAlways ||
                 (o.direct_reads == DirectReads::kAuto && m.bytes() > memory_available);
  } else {
    h.pattern = AccessHints::Pattern::kSequential;
    h.views = o.mmap;
  }
  return h;
}

}  // namespace

Result<std::unique_ptr<RecordSource>> RecordSource::Open(const std::string& dir,
                                                         const EpochOptions& e,
                                                         const StorageOptions& o, int workers) {
  std::unique_ptr<RecordSource> src(new RecordSource());
  RecordSource& d = *src;
  Env* env = o.env;
  if (env == nullptr) {
    SK_ASSIGN_OR_RETURN(env, Env::ForPath(dir));
  }
  if (!o.cache_dir.empty()) {  // object storage through the node cache
    if (!env->remote()) {
      return Status::InvalidArgument(dir +
                                     ": cache_dir is for object storage (s3://, http(s)://); "
                                     "a local dataset is cached by the page cache");
    }
    NodeCacheOptions cache;
    cache.dir = o.cache_dir;
    cache.limit = o.cache_limit;
    SK_ASSIGN_OR_RETURN(d.cache_env_, NewCachingEnv(env, cache));
    env = d.cache_env_.get();
  }
  d.env_ = env;
  d.opened_ = env->counters();
  SK_ASSIGN_OR_RETURN(d.ds_, Dataset::Open(dir, env, o.cancel_open));
  const Manifest& m = d.ds_->manifest();
  ReadPlanner::Setup p;
  p.dataset = d.ds_.get();
  p.layout = BlockLayout::Of(*d.ds_);
  // The cache holds the window being read, the look-ahead and some slack.
  const uint64_t cache_blocks = std::max<uint64_t>(1, o.block_cache_bytes / p.layout.max_raw_bytes);
  p.window = static_cast<uint32_t>(
      std::clamp<uint64_t>(cache_blocks / 3, 1, std::max<uint32_t>(1, e.block_window)));
  p.max_warm = std::max<uint64_t>(workers, cache_blocks / 3);
  p.workers = workers;
  p.seed = e.seed;
  // Records worth a read each (the bytes of a JPEG to decode, or of a large
  // raw record to copy) are read ahead one by one; small raw records, whose
  // copy costs less than a hint's system call, are not, unless each read is
  // a request to remote storage.
  const RecordFormat& f = m.record;
  // Remote storage decides the shuffle, alike on every rank; how this node
  // reads goes by whether its node cache holds the dataset whole.
  const bool remote = d.ds_->remote(), remote_reads = d.ds_->remote_reads();
  p.read_ahead_records =
      f.kind == format::RecordKind::kJpeg || remote_reads ||
      (f.kind == format::RecordKind::kRawU8 && f.raw_record_size() >= kReadAheadMinRecordBytes);
  // What the page cache could hold: decides the shuffle (auto) and the read path.
  const uint64_t memory_available = AvailableMemoryBytes();
  p.mode = PickMode(
      e.shuffle, m, p.layout.compressed, o.block_cache_bytes, memory_available, remote,
      f.kind == format::RecordKind::kJpeg || f.raw_record_size() >= kReadAheadMinRecordBytes,
      &d.shuffle_reason_);
  SK_RETURN_IF_ERROR(d.ds_->SetAccess(HintsFor(p.mode, o, m, memory_available)));
  if (p.mode == ShuffleMode::kGiven) {  // the cut of each epoch's order (ReadPlanner::StartEpoch)
    p.partition = Partition::Cut(0, nullptr, 0, 1, static_cast<uint64_t>(e.batch_size), e.drop_last,
                                 /*strided=*/true);
  } else {
    SK_ASSIGN_OR_RETURN(p.partition,
                        Partition::Make(d.ds_->num_records(), e.rank, e.world_size,
                                        static_cast<uint64_t>(e.batch_size), e.drop_last,
                                        /*strided=*/p.mode != ShuffleMode::kBlockLocal));
  }
  d.cache_ = std::make_unique<BlockCache>(d.ds_.get(), o.block_cache_bytes);
  p.cache = d.cache_.get();
  const int depth = o.read_depth != kAutoReadDepth ? o.read_depth
                    : remote_reads                 ? kRemoteReadDepth
                                                   : kFilesystemReadDepth;
  if (p.read_ahead_records && !p.layout.compressed && depth > 0)
    d.queue_ = std::make_unique<ReadQueue>(d.ds_.get(), depth, o.read_ahead_bytes,
                                           remote_reads ? kRemoteMergeBytes : 0);
  p.queue = d.queue_.get();
  d.planner_ = std::make_unique<ReadPlanner>(std::move(p));
  d.fetcher_ =
      std::make_unique<RecordFetcher>(d.ds_.get(), d.cache_.get(), d.queue_.get(), workers);
  return src;
}

RecordSourceStats RecordSource::stats() const {
  RecordSourceStats s;
  static_cast<FetchStats&>(s) = fetcher_->stats();
  if (queue_) {
    s.queued = true;
    s.queue = queue_->stats();
  }
  const StorageCounters now = env_->counters();
  s.storage.requests = now.requests - opened_.requests;
  s.storage.bytes = now.bytes - opened_.bytes;
  s.storage.retries = now.retries - opened_.retries;
  s.storage.cache_hits = now.cache_hits - opened_.cache_hits;
  s.storage.cache_misses = now.cache_misses - opened_.cache_misses;
  return s;
}

void RecordSource::ResetStats() {
  fetcher_->ResetStats();
  opened_ = env_->counters();
  if (queue_) queue_->ResetStats();
}

void RecordSource::StartEpoch(uint64_t epoch, uint64_t start_batch,
                              std::shared_ptr<const EpochPositions> rest, GivenOrder order) {
  planner_->StartEpoch(epoch, start_batch, std::move(rest), std::move(order));
  if (queue_) queue_->Cancel();  // the old epoch's reads: dropped, the ones in flight waited for
}

void RecordSource::Prepare(const std::vector<BatchSpan>& spans) {
  planner_->Prepare(spans);
  fetcher_->ReleaseEvicted();
}

}  // namespace shardkit
