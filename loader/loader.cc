// Loader: producer thread + OpenMP team filling a ring of batch slots.
#include "loader/loader.h"

#include <cmath>

#include "shard/omp_compat.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <tuple>
#include <unordered_set>

#include "loader/block_cache.h"
#include "shard/system.h"

namespace shardkit {
namespace {

using Clock = std::chrono::steady_clock;

inline uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

constexpr size_t kMemoSlots = 32;
constexpr size_t kParallelCopyBytes = 128 << 10;
constexpr size_t kMaxCorruptMessages = 10;
constexpr uint64_t kReplacementStride =
    7919;  // a prime: replacements spread over the rank's samples

// Everything one worker thread owns: decoder handles, buffers, counters.
struct WorkerContext {
  JpegDecoder jpeg;
  ReadScratch scratch;
  ResampleScratch resample;
  DecodedRegion region;
  std::vector<uint8_t> hwc;
  struct Where {
    uint64_t rec;
    uint32_t shard, local;
  };
  std::vector<Where> where;  // LoadRawRange's sample locations
  struct Memo {
    uint64_t key = ~uint64_t{0};
    std::shared_ptr<BlockCache::Block> block;
  } memo[kMemoSlots];
  std::atomic<uint64_t> read_ns{0}, decompress_ns{0}, decode_ns{0}, transform_ns{0}, bytes{0};
};

struct Slot {
  enum class State { kFree, kFilling, kReady };
  State state = State::kFree;
  uint64_t index = 0;
  Status status;
  std::vector<uint8_t> data;
  std::vector<int32_t> labels;
  std::vector<uint64_t> ids;
  std::vector<Status> sample_status;
  Batch batch;
};

}  // namespace

// Full shuffle: batches beyond the ones being filled whose records are read
// ahead into the page cache.
constexpr uint64_t kReadAheadBatches = 2;
// Full shuffle: raw records smaller than this are not read ahead one by one.
constexpr size_t kReadAheadMinRecordBytes = 16 << 10;

struct Loader::Impl {
  LoaderOptions opt;
  std::unique_ptr<Dataset> ds;
  std::vector<uint32_t> block_sizes;
  uint32_t window = 1;
  bool compressed = false;
  uint64_t max_warm = 1;  // blocks decompressed ahead per batch, at most
  // Look-ahead over the epoch: the rank's samples up to scan_next have had
  // their blocks scheduled for decompression.
  uint64_t scan_next = 0;
  uint64_t read_ahead_next =
      0;  // full shuffle: the first batch whose records are not yet asked for
  uint64_t read_ahead_pos =
      0;                // otherwise: the first rank position whose blocks are not yet asked for
  bool direct = false;  // records read with O_DIRECT (no page cache to read ahead into)
  std::unordered_set<uint64_t> scheduled;
  std::deque<uint64_t> ahead;  // first positions of scheduled blocks past the current batch
  std::vector<std::pair<uint32_t, uint32_t>> warm;  // (shard, block) to decompress now
  struct Item {
    int job, i0, i1;  // samples [i0, i1) of jobs[job]
  };
  std::vector<Item> items;
  std::vector<uint32_t> segment;
  std::vector<std::pair<uint32_t, uint32_t>>
      global_blocks;  // dataset block number -> (shard, block)
  ShuffleMode mode = ShuffleMode::kFull;
  Partition part;
  int channels = 0, height = 0, width = 0;
  size_t sample_bytes = 0;
  bool jpeg = false;
  std::unique_ptr<BlockCache> cache;
  std::vector<std::unique_ptr<WorkerContext>> ctx;

  // Epoch state. `sampler` and `epoch` are written only while no producer runs.
  uint64_t epoch = 0;
  std::unique_ptr<EpochSampler> sampler;
  // Block-local: the materialised windows the current batch reads. Written by
  // the producer before a batch's parallel region, only read inside it.
  struct LiveWindow {
    size_t w = 0;
    uint64_t begin = 0, end = 0;
    std::vector<uint64_t> records;
  };
  std::vector<LiveWindow> live, spare_live;

  std::mutex mu;
  std::condition_variable producer_cv, consumer_cv;
  std::vector<Slot> slots;
  std::thread producer;
  std::atomic<bool> stop{false};
  uint64_t next_batch = 0;  // the consumer's next batch
  Slot* held = nullptr;     // the slot the consumer is reading
  Status error;             // sticky until StartEpoch
  bool started = false;

  // Counters.
  std::atomic<uint64_t> wait_ns{0}, samples{0}, batches{0}, skipped{0};
  mutable std::mutex msg_mu;
  std::vector<std::string> messages;

  void StopProducer() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    producer_cv.notify_all();
    consumer_cv.notify_all();
    if (producer.joinable()) producer.join();
    stop = false;
  }

  // One batch being filled.
  struct Job {
    Slot* slot;
    uint64_t k;     // batch index
    uint64_t base;  // the rank's first sample index of the batch
    int n;          // samples
  };

  void ProducerLoop(uint64_t first) {
    std::vector<Job> jobs;
    for (uint64_t k = first; k < part.batches;) {
      jobs.clear();
      {
        std::unique_lock<std::mutex> lock(mu);
        // Raw records: wait until half the ring is free and fill those slots
        // in one parallel region, so that the team's wake-up (tens of
        // microseconds, as long as copying a batch of 28x28 records) is paid
        // once for several batches, while the other half stays ready for the
        // consumer. JPEG batches are long enough to fill one at a time.
        const uint64_t want =
            std::min<uint64_t>(part.batches - k, jpeg ? 1 : std::max<size_t>(1, slots.size() / 2));
        auto free_run = [&] {
          uint64_t n = 0;
          while (n < want && slots[(k + n) % slots.size()].state == Slot::State::kFree) ++n;
          return n;
        };
        producer_cv.wait(lock, [&] { return stop || free_run() >= want; });
        if (stop) return;
        // Claim those slots and any free ones after them.
        for (uint64_t j = k; j < part.batches && jobs.size() < slots.size(); ++j) {
          Slot& s = slots[j % slots.size()];
          if (s.state != Slot::State::kFree) break;
          s.state = Slot::State::kFilling;
          jobs.push_back(Job{&s, j, j * part.batch_size, static_cast<int>(part.BatchLength(j))});
        }
      }
      FillMany(jobs);
      for (const Job& job : jobs) {
        const bool failed = !job.slot->status.ok();
        {
          std::lock_guard<std::mutex> lock(mu);
          if (stop) return;
          job.slot->index = job.k;
          job.slot->state = Slot::State::kReady;
        }
        consumer_cv.notify_all();
        if (failed) return;  // the consumer gets the error at this batch
      }
      k += jobs.size();
    }
  }

  static size_t MemoSlot(uint64_t key) { return (key ^ (key >> 29)) % kMemoSlots; }

  // Fetches record `rec`'s payload into *payload (checksum verified). The
  // payload stays valid until a later Fetch by the same worker calls
  // before_reuse(): that happens just before the read scratch is overwritten
  // (stored records) or a memo slot lets go of its block (a memo miss).
  template <typename BeforeReuse>
  Status Fetch(WorkerContext& c, uint32_t shard, uint32_t local, std::string_view* payload,
               BeforeReuse before_reuse) {
    const ShardReader& r = ds->shard(shard);
    const format::RecordEntry& e = r.record(local);
    const format::BlockEntry& b = r.block(e.block);
    if (b.codec == static_cast<uint32_t>(format::Codec::kStored)) {
      before_reuse();
      const uint64_t t0 = NowNs();
      Status s = r.ReadRecord(local, &c.scratch, payload);
      c.read_ns.fetch_add(NowNs() - t0, std::memory_order_relaxed);
      c.bytes.fetch_add(e.length, std::memory_order_relaxed);
      return s;
    }
    const uint64_t key = BlockCache::MakeKey(shard, e.block);
    WorkerContext::Memo& m = c.memo[MemoSlot(key)];
    if (m.key != key || !m.block) {
      before_reuse();
      bool decompressed = false;
      const uint64_t t0 = NowNs();
      m.block = cache->Get(shard, e.block, &c.scratch, &decompressed);
      m.key = key;
      if (decompressed) {
        c.decompress_ns.fetch_add(NowNs() - t0, std::memory_order_relaxed);
        c.bytes.fetch_add(b.stored_size, std::memory_order_relaxed);
      }
    }
    if (!m.block->status.ok()) {
      Status s = m.block->status;
      m.block.reset();
      m.key = ~uint64_t{0};
      return s;
    }
    // The block passed its CRC (stored bytes) and decompressed to exactly its
    // declared size, so its records are what was written: slice, no second CRC.
    *payload = m.block->view().substr(e.offset, e.length);
    return Status::OK();
  }

  Status DecodeJpeg(WorkerContext& c, std::string_view payload, uint64_t position, uint8_t* out) {
    const auto* p = reinterpret_cast<const uint8_t*>(payload.data());
    uint64_t t0 = NowNs();
    const TransformParams& tp = opt.transform;
    CropDecision crop;
    DecodeRequest req;
    req.choose_crop = [&](int width, int height) {
      if (tp.kind == TransformKind::kTrain) {
        KeyedRng rng(opt.seed, epoch, position, 0xA06);
        crop = RandomResizedCrop(width, height, tp, &rng);
      } else if (tp.kind == TransformKind::kVal) {
        crop = CenterCrop(width, height, tp);
      } else {
        crop.rect = RectF{0, 0, double(width), double(height)};
      }
      return crop.rect;
    };
    req.min_width = req.min_height = tp.size;
    req.simd_scales_only = true;
    req.fast = tp.kind != TransformKind::kVal;
    SK_RETURN_IF_ERROR(c.jpeg.Decode(p, payload.size(), req, &c.region));
    uint64_t t1 = NowNs();
    c.decode_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
    Resample(c.region.image, c.region.crop, tp.size, tp.size, crop.flip, out, &c.resample,
             opt.layout == Layout::kNHWC ? PixelLayout::kHWC : PixelLayout::kCHW);
    c.transform_ns.fetch_add(NowNs() - t1, std::memory_order_relaxed);
    return Status::OK();
  }

  // The record at epoch position `position`: from the live windows in
  // block-local mode, else from the sampler.
  uint64_t RecordFor(uint64_t position) const {
    for (const LiveWindow& lw : live) {
      if (position >= lw.begin && position < lw.end) return lw.records[position - lw.begin];
    }
    return sampler->RecordAt(position);
  }

  // Block-local: materialises the windows the jobs' batches read (reusing
  // those already live) and releases the others.
  void PrepareWindows(const std::vector<Job>& jobs) {
    if (mode != ShuffleMode::kBlockLocal) return;
    spare_live.swap(live);
    live.clear();
    for (const Job& job : jobs) {
      for (uint64_t i = 0; i < static_cast<uint64_t>(job.n);) {
        const uint64_t pos = part.Position(job.base + i);
        const size_t w = sampler->WindowOf(pos);
        i += std::min(sampler->window_end(w) - pos, job.n - i);
        auto same = [&](const LiveWindow& lw) { return lw.w == w; };
        if (std::find_if(live.begin(), live.end(), same) != live.end()) continue;
        auto it = std::find_if(spare_live.begin(), spare_live.end(), same);
        if (it != spare_live.end()) {
          live.push_back(std::move(*it));
          spare_live.erase(it);
          continue;
        }
        LiveWindow lw;
        lw.w = w;
        lw.begin = sampler->window_begin(w);
        lw.end = sampler->window_end(w);
        sampler->WindowRecords(w, &lw.records);
        live.push_back(std::move(lw));
      }
    }
    spare_live.clear();
  }

  // Fetches record `rec` (shard, local) for sample slot i; sets its label and id.
  template <typename BeforeReuse = void (*)()>
  Status Resolve(
      WorkerContext& c, uint64_t rec, uint32_t shard, uint32_t local, Slot* slot, int i,
      std::string_view* payload, BeforeReuse before_reuse = [] {}) {
    SK_RETURN_IF_ERROR(Fetch(c, shard, local, payload, before_reuse));
    slot->labels[i] = ds->shard(shard).record(local).label;
    slot->ids[i] = rec;
    return Status::OK();
  }

  Status CheckRawSize(uint32_t shard, uint32_t local, size_t size) const {
    if (size == sample_bytes) return Status::OK();
    return Status::Corruption(ds->shard(shard).Where(local) + ": " + std::to_string(size) +
                              " bytes, the record shape needs " + std::to_string(sample_bytes));
  }

  void EmitRaw(const char* src, uint8_t* out) const {
    if (opt.layout == Layout::kNCHW && channels > 1) {
      HwcToChw(reinterpret_cast<const uint8_t*>(src), width, height, channels, out);
    } else {
      std::memcpy(out, src, sample_bytes);
    }
  }

  // Loads the rank's `local_index`-th sample of the epoch into sample slot i.
  Status LoadSample(WorkerContext& c, uint64_t local_index, Slot* slot, int i) {
    const uint64_t position = part.Position(local_index);
    const uint64_t rec = RecordFor(position);
    const auto [shard, local] = ds->Locate(rec);
    std::string_view payload;
    SK_RETURN_IF_ERROR(Resolve(c, rec, shard, local, slot, i, &payload));
    uint8_t* out = slot->data.data() + static_cast<size_t>(i) * sample_bytes;
    if (jpeg) {
      Status s = DecodeJpeg(c, payload, position, out);
      if (!s.ok()) return Status::Corruption(ds->shard(shard).Where(local) + ": " + s.message());
      return Status::OK();
    }
    SK_RETURN_IF_ERROR(CheckRawSize(shard, local, payload.size()));
    EmitRaw(payload.data(), out);
    return Status::OK();
  }

  // Raw samples [i0, i1) of batch `base`: the copies are the cost, and their
  // sources are scattered over the window, so each sample's bytes are
  // prefetched a few samples before they are copied.
  void LoadRawRange(WorkerContext& c, uint64_t base, int i0, int i1, Slot* slot) {
    constexpr int kAhead = 4;
    struct Pending {
      int i;
      const char* src;
    } ring[kAhead];
    int head = 0, count = 0;
    auto emit_one = [&] {
      const Pending& p = ring[head];
      EmitRaw(p.src, slot->data.data() + static_cast<size_t>(p.i) * sample_bytes);
      head = (head + 1) % kAhead;
      --count;
    };
    // Where every sample of the range lives, first, with the index entries
    // prefetched: they are scattered over the shards' record tables.
    c.where.resize(static_cast<size_t>(i1 - i0));
    for (int i = i0; i < i1; ++i) {
      WorkerContext::Where& w = c.where[i - i0];
      w.rec = RecordFor(part.Position(base + i));
      std::tie(w.shard, w.local) = ds->Locate(w.rec);
      __builtin_prefetch(&ds->shard(w.shard).record(w.local));
    }
    for (int i = i0; i < i1; ++i) {
      if (stop.load(std::memory_order_relaxed)) {
        slot->sample_status[i] = Status::Aborted("loader stopped");
        continue;
      }
      // Pending payloads stay valid until Fetch is about to reuse what they
      // point into (rare: once per block, or per stored record): copy them first.
      const WorkerContext::Where& w = c.where[i - i0];
      std::string_view payload;
      Status s = Resolve(c, w.rec, w.shard, w.local, slot, i, &payload, [&] {
        while (count > 0) emit_one();
      });
      if (s.ok()) s = CheckRawSize(w.shard, w.local, payload.size());
      if (!s.ok()) {
        slot->sample_status[i] = std::move(s);
        continue;
      }
      for (size_t off = 0; off < sample_bytes; off += 64) __builtin_prefetch(payload.data() + off);
      if (count == kAhead) emit_one();
      ring[(head + count) % kAhead] = Pending{i, payload.data()};
      ++count;
    }
    while (count > 0) emit_one();
  }

  void NoteSkip(const Status& s) {
    skipped.fetch_add(1);
    std::lock_guard<std::mutex> lock(msg_mu);
    if (messages.size() < kMaxCorruptMessages) messages.push_back(s.message());
  }

  // Appends to `warm` the blocks that batch k and the ones after it will
  // need and that are not cached yet, in order of first need, so they can be
  // decompressed in parallel (one worker per block) before the samples are
  // copied. Walks the order a segment (block or window) at a time; in
  // full-shuffle mode any sample may need any block, and blocks are
  // decompressed on first use.
  void ScheduleBlocks(uint64_t k) {
    if (!compressed || mode == ShuffleMode::kFull) return;
    // Scan at least this batch, and further until `want` blocks beyond it are
    // scheduled (bounded by what the cache can hold besides the blocks read).
    const uint64_t batch_end = std::min(part.per_rank, (k + 1) * part.batch_size);
    const size_t want = std::min<uint64_t>(max_warm, static_cast<uint64_t>(opt.workers));
    while (!ahead.empty() && ahead.front() < batch_end) ahead.pop_front();
    // Refill only when the look-ahead has run dry, then with a block per
    // worker, so that decompression always has every worker busy.
    const bool refill = ahead.empty();
    while (scan_next < part.per_rank) {
      if (scan_next >= batch_end && (!refill || ahead.size() >= want || warm.size() >= max_warm))
        break;
      const uint64_t pos = part.Position(scan_next);
      uint64_t end = 0;
      sampler->Segment(pos, &end, &segment);
      for (uint32_t g : segment) {
        const auto [shard, block] = global_blocks[g];
        const uint64_t key = BlockCache::MakeKey(shard, block);
        if (!scheduled.insert(key).second) continue;
        if (scan_next >= batch_end) ahead.push_back(scan_next);
        if (!cache->Contains(key)) {
          warm.emplace_back(shard, block);
          // Start its read now, in the background, beside the others ahead:
          // storage works on several blocks while workers decompress.
          ds->shard(shard).PrefetchBlock(block);
        }
      }
      scan_next += std::min(end - pos, part.per_rank - scan_next);
    }
  }

  // Workers' memos let go of blocks the cache has dropped, so that their
  // buffers go back to the pool at once: decompression then cycles through
  // about the cache's worth of buffers (warm in the CPU caches) instead of
  // the cache plus every block a memo still remembers.
  void ReleaseEvicted() {
    for (auto& c : ctx) {
      for (WorkerContext::Memo& m : c->memo) {
        if (m.block && m.block->evicted.load(std::memory_order_relaxed)) {
          m.block.reset();
          m.key = ~uint64_t{0};
        }
      }
    }
  }

  // Stored (uncompressed) records: starts the reads of what this fill and the
  // next few batches need in the background (POSIX_FADV_WILLNEED), so that
  // cold storage serves many requests at once instead of one per worker at a
  // time: each record in a full shuffle, whole blocks otherwise. Cheap when
  // the pages are cached.
  void ReadAhead(const std::vector<Job>& jobs) {
    if (compressed || direct || jobs.empty())
      return;  // compressed: ScheduleBlocks reads blocks ahead
    if (mode != ShuffleMode::kFull) {
      // Block-local or in order: the stored blocks of the segments these
      // batches and the next few read (positions are contiguous here).
      uint64_t i = std::max(jobs.front().base, read_ahead_pos);
      const uint64_t end_i = std::min<uint64_t>(
          part.per_rank, (jobs.back().k + 1 + kReadAheadBatches) * part.batch_size);
      while (i < end_i) {
        const uint64_t pos = part.Position(i);
        uint64_t end = 0;
        sampler->Segment(pos, &end, &segment);
        for (uint32_t g : segment)
          ds->shard(global_blocks[g].first).PrefetchBlock(global_blocks[g].second);
        i += std::max<uint64_t>(1, std::min(end - pos, part.per_rank - i));
      }
      read_ahead_pos = std::max(read_ahead_pos, i);
      return;
    }
    // A hint per record costs a system call: worth it for records that take
    // far longer to decode or copy (JPEGs, large raw records), not for 28x28s.
    if (!jpeg && sample_bytes < kReadAheadMinRecordBytes) return;
    const uint64_t last = std::min<uint64_t>(jobs.back().k + kReadAheadBatches, part.batches - 1);
    for (uint64_t k = std::max(jobs.front().k, read_ahead_next); k <= last; ++k) {
      const uint64_t base = k * part.batch_size, n = part.BatchLength(k);
      for (uint64_t i = 0; i < n; ++i) {
        const auto [shard, local] = ds->Locate(RecordFor(part.Position(base + i)));
        ds->shard(shard).PrefetchRecord(local);
      }
    }
    read_ahead_next = std::max(read_ahead_next, last + 1);
  }

  void FillMany(const std::vector<Job>& jobs) {
    warm.clear();
    int total = 0;
    for (const Job& job : jobs) {
      job.slot->status = Status::OK();
      job.slot->sample_status.assign(job.n, Status::OK());
      ScheduleBlocks(job.k);
      total += job.n;
    }
    PrepareWindows(jobs);
    ReadAhead(jobs);
    ReleaseEvicted();
    const int nwarm = static_cast<int>(warm.size());
    // Work items: raw samples are cheap, handed out in chunks; JPEGs one at a time.
    items.clear();
    for (size_t j = 0; j < jobs.size(); ++j) {
      const int n = jobs[j].n;
      const int chunk = jpeg ? 1 : std::max(1, n / (4 * opt.workers));
      for (int i0 = 0; i0 < n; i0 += chunk)
        items.push_back(Item{static_cast<int>(j), i0, std::min(n, i0 + chunk)});
    }
    const int nitems = static_cast<int>(items.size());
    // Waking the team costs tens of microseconds: more than copying a batch
    // of small raw records takes. Such work, with at most one block to
    // decompress, is done by this thread alone; the team is woken for JPEG
    // decoding, for several blocks to decompress, or for large copies.
    const bool small_copy = !jpeg && total * sample_bytes < kParallelCopyBytes && nwarm <= 1;
    [[maybe_unused]] const int team = small_copy ? 1 : opt.workers;
#pragma omp parallel num_threads(team)
    {
      WorkerContext& c = *ctx[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 1)
      for (int j = 0; j < nwarm; ++j) {
        if (stop.load(std::memory_order_relaxed)) continue;
        bool decompressed = false;
        const uint64_t t0 = NowNs();
        auto b = cache->Get(warm[j].first, warm[j].second, &c.scratch, &decompressed);
        if (decompressed) {
          c.decompress_ns.fetch_add(NowNs() - t0, std::memory_order_relaxed);
          c.bytes.fetch_add(ds->shard(warm[j].first).block(warm[j].second).stored_size,
                            std::memory_order_relaxed);
        }
      }
#pragma omp for schedule(dynamic, 1)
      for (int it = 0; it < nitems; ++it) {
        const Item& item = items[it];
        const Job& job = jobs[item.job];
        try {
          if (!jpeg) {
            LoadRawRange(c, job.base, item.i0, item.i1, job.slot);
            continue;
          }
          for (int i = item.i0; i < item.i1; ++i) {
            job.slot->sample_status[i] = stop.load(std::memory_order_relaxed)
                                             ? Status::Aborted("loader stopped")
                                             : LoadSample(c, job.base + i, job.slot, i);
          }
        } catch (const std::exception& e) {  // nothing may leave an OpenMP region
          for (int i = item.i0; i < item.i1; ++i) {
            job.slot->sample_status[i] = Status::IOError(std::string("loader worker: ") + e.what());
          }
        }
      }
    }
    for (const Job& job : jobs) {
      Finish(job);
      if (!job.slot->status.ok()) break;  // batches after a failed one are never published
    }
  }

  // After the region: fail, or replace corrupt samples and count them.
  void Finish(const Job& job) {
    Slot* slot = job.slot;
    const int n = job.n;
    const uint64_t base = job.base;
    for (int i = 0; i < n; ++i) {
      if (slot->sample_status[i].ok()) continue;
      Status s = slot->sample_status[i];
      for (uint64_t attempt = 1; !s.ok(); ++attempt) {
        if (stop || s.IsAborted()) {
          slot->status = Status::Aborted("loader stopped");
          return;
        }
        if (opt.corrupt_policy == CorruptPolicy::kFail || !s.IsCorruption()) {
          slot->status = s;
          return;
        }
        NoteSkip(s);
        if (skipped.load() > opt.skip_budget) {
          slot->status = Status::Corruption(
              "more than " + std::to_string(opt.skip_budget) +
              " corrupt samples skipped (the skip budget); last: " + s.message());
          return;
        }
        const uint64_t replacement = (base + i + attempt * kReplacementStride) % part.per_rank;
        s = LoadSample(*ctx[0], replacement, slot, i);
      }
    }
    const uint64_t k = job.k;
    slot->batch.epoch = epoch;
    slot->batch.index = k;
    slot->batch.size = n;
    slot->batch.real_size = static_cast<int>(part.BatchRealLength(k));
    samples.fetch_add(n);
    batches.fetch_add(1);
  }
};

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Loader::~Loader() { impl_->StopProducer(); }

Status ValidateLoaderOptions(const LoaderOptions& o) {
  auto bad = [](const std::string& what) { return Status::InvalidArgument(what); };
  if (o.workers < 1 || o.workers > kMaxLoaderWorkers) {
    return bad("workers must be in 1.." + std::to_string(kMaxLoaderWorkers) + ", not " +
               std::to_string(o.workers));
  }
  if (o.prefetch < 1 || o.prefetch > 1024)
    return bad("prefetch must be in 1..1024, not " + std::to_string(o.prefetch));
  if (o.batch_size < 1 || o.batch_size > (1 << 20)) {
    return bad("batch size must be in 1..1048576, not " + std::to_string(o.batch_size));
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return bad("rank " + std::to_string(o.rank) + " is not in 0..world_size-1 (world size " +
               std::to_string(o.world_size) + ")");
  }
  if (o.block_window < 1) return bad("block window must be at least 1");
  const TransformParams& t = o.transform;
  if (t.size < 1 || t.size > 4096)
    return bad("transform size must be in 1..4096, not " + std::to_string(t.size));
  auto finite = [](double v) { return std::isfinite(v); };
  if (!finite(t.min_scale) || !finite(t.max_scale) || t.min_scale <= 0 ||
      t.min_scale > t.max_scale || t.max_scale > 1) {
    return bad("crop scale range must satisfy 0 < min <= max <= 1");
  }
  if (!finite(t.min_ratio) || !finite(t.max_ratio) || t.min_ratio <= 0 ||
      t.min_ratio > t.max_ratio) {
    return bad("crop aspect-ratio range must satisfy 0 < min <= max");
  }
  if (!finite(t.crop_fraction) || t.crop_fraction <= 0 || t.crop_fraction > 1) {
    return bad("val crop fraction must be in (0, 1]");
  }
  return Status::OK();
}

Result<std::unique_ptr<Loader>> Loader::Open(const std::string& dir, const LoaderOptions& options) {
  auto impl = std::make_unique<Impl>();
  Impl& d = *impl;
  d.opt = options;
  SK_RETURN_IF_ERROR(ValidateLoaderOptions(options));
  SK_ASSIGN_OR_RETURN(d.ds, Dataset::Open(dir));  // mapped below once the access pattern is known
  const Manifest& m = d.ds->manifest();
  bool compressed = false;
  uint64_t max_block = 1;
  for (size_t s = 0; s < d.ds->num_shards(); ++s) {
    const ShardReader& r = d.ds->shard(s);
    for (uint32_t b = 0; b < r.num_blocks(); ++b) {
      d.block_sizes.push_back(r.block(b).num_records);
      d.global_blocks.emplace_back(static_cast<uint32_t>(s), b);
      compressed |= r.block(b).codec != static_cast<uint32_t>(format::Codec::kStored);
      max_block = std::max<uint64_t>(max_block, r.block(b).raw_size);
    }
  }
  // The cache holds the window being read, the look-ahead and some slack.
  const uint64_t cache_blocks = std::max<uint64_t>(1, options.block_cache_bytes / max_block);
  d.window = static_cast<uint32_t>(
      std::clamp<uint64_t>(cache_blocks / 3, 1, std::max<uint32_t>(1, options.block_window)));
  d.max_warm = std::max<uint64_t>(options.workers, cache_blocks / 3);
  d.compressed = compressed;
  switch (m.record.kind) {
    case format::RecordKind::kJpeg:
      if (options.transform.size < 1 || options.transform.size > 4096) {
        return Status::InvalidArgument("transform size must be in 1..4096");
      }
      d.jpeg = true;
      d.channels = 3;
      d.height = d.width = options.transform.size;
      break;
    case format::RecordKind::kRawU8:
      d.height = static_cast<int>(m.record.shape[0]);
      d.width = static_cast<int>(m.record.shape[1]);
      d.channels = static_cast<int>(m.record.shape[2]);
      break;
    case format::RecordKind::kBytes:
      return Status::Unsupported(dir + ": records of kind 'bytes' have no image shape to load");
  }
  d.sample_bytes = static_cast<size_t>(d.channels) * d.height * d.width;
  // The ring is allocated up front: refuse what this machine cannot hold.
  const double ring_bytes = double(d.sample_bytes) * options.batch_size * options.prefetch;
  const double memory = double(PhysicalMemoryBytes());
  if (memory > 0 && ring_bytes > memory / 2) {
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "batch size %d x prefetch %d x %zu bytes per sample = %.1f GB of ring slots, "
                  "more than half of "
                  "this machine's %.1f GB of memory; use a smaller batch or prefetch",
                  options.batch_size, options.prefetch, d.sample_bytes, ring_bytes / 1e9,
                  memory / 1e9);
    return Status::InvalidArgument(buf);
  }
  // What the page cache could hold: decides the shuffle (auto) and O_DIRECT.
  const uint64_t memory_available = AvailableMemoryBytes();
  switch (options.shuffle) {
    case ShuffleChoice::kNone:
      d.mode = ShuffleMode::kNone;
      break;
    case ShuffleChoice::kFull:
      d.mode = ShuffleMode::kFull;
      break;
    case ShuffleChoice::kBlockLocal:
      d.mode = ShuffleMode::kBlockLocal;
      break;
    case ShuffleChoice::kAuto: {
      const bool over_cache = compressed && m.raw_bytes() > options.block_cache_bytes;
      const bool over_memory = m.bytes() > memory_available;
      d.mode = over_cache || over_memory ? ShuffleMode::kBlockLocal : ShuffleMode::kFull;
      break;
    }
  }
  // Random record reads must not pull in the read-ahead window around each
  // record (113x the bytes delivered, cold, with an 8 MB window); block-local
  // and in-order reading is sequential within a shard and wants read-ahead.
  if (options.mmap && d.mode != ShuffleMode::kFull) SK_RETURN_IF_ERROR(d.ds->Map());
  if (d.mode == ShuffleMode::kFull &&
      (options.direct_reads == LoaderOptions::DirectReads::kAlways ||
       (options.direct_reads == LoaderOptions::DirectReads::kAuto &&
        m.bytes() > memory_available))) {
    d.direct =
        d.ds->EnableDirectReads();  // where a filesystem has no O_DIRECT, its reads stay buffered
  }
  d.ds->Advise(d.mode == ShuffleMode::kFull ? RandomAccessFile::Access::kRandom
                                            : RandomAccessFile::Access::kSequential);
  SK_ASSIGN_OR_RETURN(d.part,
                      Partition::Make(d.ds->num_records(), options.rank, options.world_size,
                                      static_cast<uint64_t>(options.batch_size), options.drop_last,
                                      /*strided=*/d.mode != ShuffleMode::kBlockLocal));
  d.cache = std::make_unique<BlockCache>(d.ds.get(), options.block_cache_bytes);
  for (int w = 0; w < options.workers; ++w) d.ctx.push_back(std::make_unique<WorkerContext>());
  d.slots.resize(options.prefetch);
  for (Slot& s : d.slots) {
    s.data.resize(d.sample_bytes * options.batch_size);
    s.labels.resize(options.batch_size);
    s.ids.resize(options.batch_size);
    s.batch.channels = d.channels;
    s.batch.height = d.height;
    s.batch.width = d.width;
    s.batch.layout = options.layout;
    s.batch.data = s.data.data();
    s.batch.labels = s.labels.data();
    s.batch.sample_ids = s.ids.data();
  }
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

Status Loader::StartEpoch(uint64_t epoch, uint64_t start_batch) {
  Impl& d = *impl_;
  d.StopProducer();
  if (start_batch > d.part.batches) {
    return Status::InvalidArgument("start batch " + std::to_string(start_batch) +
                                   " past the epoch's " + std::to_string(d.part.batches) +
                                   " batches");
  }
  for (Slot& s : d.slots) s.state = Slot::State::kFree;
  d.held = nullptr;
  d.error = Status::OK();
  d.next_batch = start_batch;
  d.epoch = epoch;
  d.sampler = std::make_unique<EpochSampler>(d.block_sizes, d.mode, d.opt.seed, epoch, d.window);
  d.scan_next = start_batch * d.part.batch_size;
  d.read_ahead_next = start_batch;
  d.read_ahead_pos = start_batch * d.part.batch_size;
  d.scheduled.clear();
  d.ahead.clear();
  d.live.clear();
  d.started = true;
  d.producer = std::thread([&d, start_batch] { d.ProducerLoop(start_batch); });
  return Status::OK();
}

Status Loader::Next(const Batch** batch) {
  Impl& d = *impl_;
  *batch = nullptr;
  if (!d.started) return Status::InvalidArgument("Next() before StartEpoch()");
  std::unique_lock<std::mutex> lock(d.mu);
  if (d.held != nullptr) {
    d.held->state = Slot::State::kFree;
    d.held = nullptr;
    d.producer_cv.notify_all();
  }
  if (!d.error.ok()) return d.error;
  if (d.next_batch >= d.part.batches) return Status::OK();
  Slot& slot = d.slots[d.next_batch % d.slots.size()];
  const uint64_t want = d.next_batch;
  const uint64_t t0 = NowNs();
  d.consumer_cv.wait(lock, [&] { return slot.state == Slot::State::kReady && slot.index == want; });
  d.wait_ns.fetch_add(NowNs() - t0, std::memory_order_relaxed);
  if (!slot.status.ok()) {
    d.error = slot.status;
    slot.state = Slot::State::kFree;
    return d.error;
  }
  d.held = &slot;
  ++d.next_batch;
  *batch = &slot.batch;
  return Status::OK();
}

uint64_t Loader::batches_per_epoch() const { return impl_->part.batches; }
uint64_t Loader::samples_per_epoch() const {
  return impl_->part.drop_last ? impl_->part.batches * impl_->part.batch_size
                               : impl_->part.per_rank;
}
uint64_t Loader::real_samples_per_epoch() const {
  return impl_->part.drop_last ? impl_->part.batches * impl_->part.batch_size : impl_->part.real;
}
uint64_t Loader::dataset_records() const { return impl_->ds->num_records(); }
int Loader::channels() const { return impl_->channels; }
int Loader::height() const { return impl_->height; }
int Loader::width() const { return impl_->width; }
const Manifest& Loader::manifest() const { return impl_->ds->manifest(); }
ShuffleMode Loader::shuffle_mode() const { return impl_->mode; }

LoaderStats Loader::stats() const {
  const Impl& d = *impl_;
  LoaderStats s;
  for (const auto& c : d.ctx) {
    s.read_s += c->read_ns.load() * 1e-9;
    s.decompress_s += c->decompress_ns.load() * 1e-9;
    s.decode_s += c->decode_ns.load() * 1e-9;
    s.transform_s += c->transform_ns.load() * 1e-9;
    s.bytes_read += c->bytes.load();
  }
  s.wait_s = d.wait_ns.load() * 1e-9;
  s.samples = d.samples.load();
  s.batches = d.batches.load();
  s.corrupt_skipped = d.skipped.load();
  std::lock_guard<std::mutex> lock(d.msg_mu);
  s.corrupt_messages = d.messages;
  return s;
}

void Loader::ResetStats() {
  Impl& d = *impl_;
  for (auto& c : d.ctx) {
    c->read_ns = c->decompress_ns = c->decode_ns = c->transform_ns = c->bytes = 0;
  }
  d.wait_ns = d.samples = d.batches = 0;
}

void NormalizeBatch(const Batch& b, const float mean[3], const float std[3], float* out) {
  const size_t plane = size_t(b.height) * b.width;
  const int c = b.channels;
  float scale[4], bias[4];
  for (int ch = 0; ch < c && ch < 4; ++ch) {
    const int k = std::min(ch, 2);
    scale[ch] = 1.f / (255.f * std[k]);
    bias[ch] = -mean[k] / std[k];
  }
  const size_t total = b.sample_bytes() * b.size;
  for (size_t i = 0; i < total; ++i) {
    const int ch =
        b.layout == Layout::kNCHW ? static_cast<int>((i / plane) % c) : static_cast<int>(i % c);
    out[i] = b.data[i] * scale[ch] + bias[ch];
  }
}

}  // namespace shardkit
