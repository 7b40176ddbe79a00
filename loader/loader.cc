// Loader: the facade that wires RecordSource -> SampleDecoder -> PrefetchRing.
// The producer thread claims free slots, has the source prepare their reads,
// fills them on the OpenMP team (one path for JPEG and raw records), applies
// the corrupt policy, and publishes them.
#include "loader/loader.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>

#include "base/openmp.h"
#include "base/system.h"
#include "loader/record_source.h"
#include "loader/sample_decoder.h"

namespace shardkit {
namespace {

constexpr size_t kParallelCopyBytes = 128 << 10;
constexpr size_t kMaxCorruptMessages = 10;
// A prime: replacements for skipped samples spread over the rank's samples.
constexpr uint64_t kReplacementStride = 7919;
// Full shuffle: raw records smaller than this are not read ahead one by one.
constexpr size_t kReadAheadMinRecordBytes = 16 << 10;
// Samples fetched ahead of the one being decoded, so that their bytes are on
// their way to the CPU cache (raw records: the copies are the cost, and
// their sources are scattered).
constexpr int kFetchAhead = 4;

}  // namespace

struct Loader::Impl {
  LoaderOptions opt;
  std::unique_ptr<RecordSource> source;
  SampleDecoder decoder;
  std::unique_ptr<PrefetchRing> ring;
  std::vector<std::unique_ptr<SampleDecoder::State>> decode_states;
  std::vector<std::vector<SampleLocation>> where;  // per worker: a range's locations

  // One batch being filled.
  struct Job {
    PrefetchRing::Slot* slot;
    uint64_t k;     // batch index
    uint64_t base;  // the rank's first sample index of the batch
    int n;          // samples
  };
  struct Item {
    int job, i0, i1;  // samples [i0, i1) of jobs[job]
  };
  std::vector<Job> jobs;
  std::vector<BatchSpan> spans;
  std::vector<Item> items;
  std::vector<PrefetchRing::Slot*> claimed;

  // Epoch state: written only while no producer runs.
  uint64_t epoch = 0;
  bool started = false;
  std::thread producer;
  // Consumer state.
  uint64_t next_batch = 0;
  Status error;                       // sticky until StartEpoch
  std::shared_ptr<const Batch> held;  // Next(const Batch**)'s lease

  std::atomic<uint64_t> wait_ns{0}, samples{0}, batches{0}, skipped{0};
  mutable std::mutex msg_mu;
  std::vector<std::string> messages;

  const Partition& part() const { return source->partition(); }
  bool stopping() const { return ring->stopped(); }

  void StopProducer() {
    ring->Stop();
    if (producer.joinable()) producer.join();
    ring->Reset();
  }

  void ProducerLoop(uint64_t first) {
    const uint64_t end = part().batches;
    for (uint64_t k = first; k < end;) {
      // Raw records: wait until half the ring is free and fill those slots
      // in one parallel region, so that the team's wake-up (tens of
      // microseconds, as long as copying a batch of 28x28 records) is paid
      // once for several batches, while the other half stays ready for the
      // consumer. JPEG batches are long enough to fill one at a time.
      const uint64_t want =
          std::min<uint64_t>(end - k, decoder.jpeg() ? 1 : std::max<size_t>(1, ring->size() / 2));
      if (!ring->Claim(k, want, end, &claimed)) return;
      jobs.clear();
      for (PrefetchRing::Slot* s : claimed) {
        jobs.push_back(Job{s, s->index, s->index * part().batch_size,
                           static_cast<int>(part().BatchLength(s->index))});
      }
      FillMany();
      for (const Job& job : jobs) {
        const bool failed = !job.slot->status.ok();
        if (!ring->Publish(job.slot)) return;
        if (failed) return;  // the consumer gets the error at this batch
      }
      k += jobs.size();
    }
  }

  // Fetches and decodes the rank's `local_index`-th sample into sample slot i.
  Status LoadSample(int worker, uint64_t local_index, PrefetchRing::Slot* slot, int i) {
    const SampleLocation l = source->Locate(local_index);
    std::string_view payload;
    SK_RETURN_IF_ERROR(source->Fetch(source->cursor(worker), l, &payload, [] {}));
    return Emit(worker, l, payload, slot, i);
  }

  Status Emit(int worker, const SampleLocation& l, std::string_view payload,
              PrefetchRing::Slot* slot, int i) {
    slot->batch.labels[i] = source->label(l);
    slot->batch.sample_ids[i] = l.record;
    uint8_t* out = slot->batch.data + static_cast<size_t>(i) * decoder.sample_bytes();
    Status s = decoder.Decode(*decode_states[worker], payload, epoch, l.position, out);
    if (!s.ok()) return Status::Corruption(source->Where(l) + ": " + s.message());
    return Status::OK();
  }

  // Samples [i0, i1) of a batch. Fetches run kFetchAhead samples ahead of
  // decoding, with each payload's first bytes prefetched into the CPU cache;
  // a payload stays valid until the source is about to reuse what it points
  // into (once per block, or per stored record), so pending ones are decoded
  // first then.
  void LoadRange(int worker, const Job& job, int i0, int i1) {
    RecordSource::Cursor& c = source->cursor(worker);
    PrefetchRing::Slot* slot = job.slot;
    std::vector<SampleLocation>& locs = where[worker];
    locs.resize(static_cast<size_t>(i1 - i0));
    for (int i = i0; i < i1; ++i) {
      locs[i - i0] = source->Locate(job.base + i);
      source->TouchIndex(locs[i - i0]);
    }
    struct Pending {
      int i;
      std::string_view payload;
    } pending[kFetchAhead];
    int head = 0, count = 0;
    auto decode_one = [&] {
      const Pending& p = pending[head];
      slot->sample_status[p.i] = Emit(worker, locs[p.i - i0], p.payload, slot, p.i);
      head = (head + 1) % kFetchAhead;
      --count;
    };
    const size_t touch = decoder.jpeg() ? 256 : decoder.sample_bytes();
    for (int i = i0; i < i1; ++i) {
      if (stopping()) {
        slot->sample_status[i] = Status::Aborted("loader stopped");
        continue;
      }
      std::string_view payload;
      Status s = source->Fetch(c, locs[i - i0], &payload, [&] {
        while (count > 0) decode_one();
      });
      if (!s.ok()) {
        slot->sample_status[i] = std::move(s);
        continue;
      }
      for (size_t off = 0; off < std::min(touch, payload.size()); off += 64) {
        __builtin_prefetch(payload.data() + off);
      }
      if (count == kFetchAhead) decode_one();
      pending[(head + count) % kFetchAhead] = Pending{i, payload};
      ++count;
    }
    while (count > 0) decode_one();
  }

  void FillMany() {
    spans.clear();
    int total = 0;
    for (const Job& job : jobs) {
      job.slot->status = Status::OK();
      job.slot->sample_status.assign(job.n, Status::OK());
      spans.push_back(BatchSpan{job.k, job.base, job.n});
      total += job.n;
    }
    source->Prepare(spans);
    const int nwarm = static_cast<int>(source->blocks_to_warm());
    // Work items: raw samples are cheap, handed out in chunks; JPEGs one at a time.
    items.clear();
    for (size_t j = 0; j < jobs.size(); ++j) {
      const int n = jobs[j].n;
      const int chunk = decoder.jpeg() ? 1 : std::max(1, n / (4 * opt.workers));
      for (int i0 = 0; i0 < n; i0 += chunk)
        items.push_back(Item{static_cast<int>(j), i0, std::min(n, i0 + chunk)});
    }
    const int nitems = static_cast<int>(items.size());
    // Waking the team costs tens of microseconds: more than copying a batch
    // of small raw records takes. Such work, with at most one block to
    // decompress, is done by this thread alone; the team is woken for JPEG
    // decoding, for several blocks to decompress, or for large copies.
    const bool small_copy =
        !decoder.jpeg() && total * decoder.sample_bytes() < kParallelCopyBytes && nwarm <= 1;
    [[maybe_unused]] const int team = small_copy ? 1 : opt.workers;
#pragma omp parallel num_threads(team)
    {
      const int w = omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
      for (int j = 0; j < nwarm; ++j) {
        if (!stopping()) source->WarmBlock(static_cast<size_t>(j), source->cursor(w));
      }
#pragma omp for schedule(dynamic, 1)
      for (int it = 0; it < nitems; ++it) {
        const Item& item = items[it];
        const Job& job = jobs[item.job];
        try {
          LoadRange(w, job, item.i0, item.i1);
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

  void NoteSkip(const Status& s) {
    skipped.fetch_add(1);
    std::lock_guard<std::mutex> lock(msg_mu);
    if (messages.size() < kMaxCorruptMessages) messages.push_back(s.message());
  }

  // After the region: fail, or replace corrupt samples and count them.
  void Finish(const Job& job) {
    PrefetchRing::Slot* slot = job.slot;
    for (int i = 0; i < job.n; ++i) {
      Status s = slot->sample_status[i];
      for (uint64_t attempt = 1; !s.ok(); ++attempt) {
        if (stopping() || s.IsAborted()) {
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
        const uint64_t replacement =
            (job.base + i + attempt * kReplacementStride) % part().per_rank;
        s = LoadSample(0, replacement, slot, i);
      }
    }
    slot->batch.epoch = epoch;
    slot->batch.index = job.k;
    slot->batch.size = job.n;
    slot->batch.real_size = static_cast<int>(part().BatchRealLength(job.k));
    samples.fetch_add(job.n);
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
  if (o.read_depth < 0 || o.read_depth > 1024)
    return bad("read depth must be in 0..1024, not " + std::to_string(o.read_depth));
  if (o.read_ahead_bytes < (1u << 20) || o.read_ahead_bytes > (64ull << 30))
    return bad("read-ahead bytes must be in 1 MiB..64 GiB");
  const TransformParams& t = o.transform;
  if (t.size < 1 || t.size > 4096)
    return bad("transform size must be in 1..4096, not " + std::to_string(t.size));
  for (int v : {t.height, t.width, t.resize, t.resize_height, t.resize_width}) {
    if (v < 0 || v > 16384)
      return bad("transform sizes must be in 1..16384, not " + std::to_string(v));
  }
  if ((t.height > 0) != (t.width > 0) || (t.resize_height > 0) != (t.resize_width > 0)) {
    return bad("give a transform's height and width together");
  }
  if (t.kind == TransformKind::kVal &&
      (t.resize_height > 0 ? t.resize_height < t.out_height() || t.resize_width < t.out_width()
                           : t.resize > 0 && t.resize < std::max(t.out_height(), t.out_width()))) {
    return bad("CenterCrop " + std::to_string(t.out_height()) + "x" +
               std::to_string(t.out_width()) + " is larger than the Resize before it");
  }
  if (!std::isfinite(t.flip_prob) || t.flip_prob > 1) {
    return bad("flip probability must be in [0, 1]");
  }
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
  SK_RETURN_IF_ERROR(ValidateLoaderOptions(options));
  auto impl = std::make_unique<Impl>();
  Impl& d = *impl;
  d.opt = options;
  SK_ASSIGN_OR_RETURN(d.source, RecordSource::Open(dir, options));
  SK_ASSIGN_OR_RETURN(d.decoder,
                      SampleDecoder::Make(d.source->dataset().manifest().record, options.transform,
                                          options.layout, options.seed, dir));
  d.source->set_read_ahead_records(d.decoder.jpeg() ||
                                   d.decoder.sample_bytes() >= kReadAheadMinRecordBytes);
  // The ring is allocated as it fills: refuse what this machine cannot hold
  // (the slots and the batch the consumer holds).
  const size_t sample_bytes = d.decoder.sample_bytes();
  const double ring_bytes = double(sample_bytes) * options.batch_size * (options.prefetch + 1);
  const double memory = double(PhysicalMemoryBytes());
  if (memory > 0 && ring_bytes > memory / 2) {
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "batch size %d x prefetch %d x %zu bytes per sample = %.1f GB of ring slots, "
                  "more than half of this machine's %.1f GB of memory; use a smaller batch or "
                  "prefetch",
                  options.batch_size, options.prefetch, sample_bytes, ring_bytes / 1e9,
                  memory / 1e9);
    return Status::InvalidArgument(buf);
  }
  for (int w = 0; w < options.workers; ++w) {
    d.decode_states.push_back(std::make_unique<SampleDecoder::State>());
  }
  d.where.resize(static_cast<size_t>(options.workers));
  Batch shape;
  shape.channels = d.decoder.channels();
  shape.height = d.decoder.height();
  shape.width = d.decoder.width();
  shape.layout = options.layout;
  d.ring = std::make_unique<PrefetchRing>(options.prefetch, options.batch_size, shape,
                                          options.allocator);
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

Status Loader::StartEpoch(uint64_t epoch, uint64_t start_batch) {
  Impl& d = *impl_;
  d.StopProducer();
  if (start_batch > d.part().batches) {
    return Status::InvalidArgument("start batch " + std::to_string(start_batch) +
                                   " past the epoch's " + std::to_string(d.part().batches) +
                                   " batches");
  }
  d.held.reset();
  d.error = Status::OK();
  d.next_batch = start_batch;
  d.epoch = epoch;
  d.source->StartEpoch(epoch, start_batch);
  d.started = true;
  d.producer = std::thread([&d, start_batch] { d.ProducerLoop(start_batch); });
  return Status::OK();
}

Status Loader::Next(std::shared_ptr<const Batch>* batch) {
  Impl& d = *impl_;
  batch->reset();
  if (!d.started) return Status::InvalidArgument("Next() before StartEpoch()");
  if (!d.error.ok()) return d.error;
  if (d.next_batch >= d.part().batches) return Status::OK();
  uint64_t waited = 0;
  Status s = d.ring->Take(d.next_batch, batch, &waited);
  d.wait_ns.fetch_add(waited, std::memory_order_relaxed);
  if (!s.ok()) {
    d.error = s;
    return s;
  }
  ++d.next_batch;
  return Status::OK();
}

Status Loader::Next(const Batch** batch) {
  Impl& d = *impl_;
  *batch = nullptr;
  d.held.reset();  // before taking the next: its buffer can be refilled
  SK_RETURN_IF_ERROR(Next(&d.held));
  *batch = d.held.get();
  return Status::OK();
}

uint64_t Loader::epoch() const { return impl_->epoch; }
uint64_t Loader::next_batch() const { return impl_->next_batch; }
uint64_t Loader::batches_per_epoch() const { return impl_->part().batches; }
uint64_t Loader::samples_per_epoch() const {
  const Partition& p = impl_->part();
  return p.drop_last ? p.batches * p.batch_size : p.per_rank;
}
uint64_t Loader::real_samples_per_epoch() const {
  const Partition& p = impl_->part();
  return p.drop_last ? p.batches * p.batch_size : p.real;
}
uint64_t Loader::dataset_records() const { return impl_->source->dataset().num_records(); }
int Loader::channels() const { return impl_->decoder.channels(); }
int Loader::height() const { return impl_->decoder.height(); }
int Loader::width() const { return impl_->decoder.width(); }
const Manifest& Loader::manifest() const { return impl_->source->dataset().manifest(); }
ShuffleMode Loader::shuffle_mode() const { return impl_->source->mode(); }

LoaderStats Loader::stats() const {
  const Impl& d = *impl_;
  LoaderStats s;
  for (int w = 0; w < d.source->workers(); ++w) {
    const RecordSource::Cursor& c = d.source->cursor(w);
    const SampleDecoder::State& st = *d.decode_states[w];
    s.read_s += c.read_ns.load() * 1e-9;
    s.decompress_s += c.decompress_ns.load() * 1e-9;
    s.decode_s += st.decode_ns.load() * 1e-9;
    s.transform_s += st.transform_ns.load() * 1e-9;
    s.bytes_read += c.bytes.load();
  }
  s.wait_s = d.wait_ns.load() * 1e-9;
  s.samples = d.samples.load();
  s.batches = d.batches.load();
  s.corrupt_skipped = d.skipped.load();
  if (const ReadQueue* q = d.source->read_queue()) {
    const ReadQueueStats r = q->stats();
    s.queued_reads = r.reads;
    s.mean_reads_in_flight = r.mean_in_flight();
    s.peak_reads_in_flight = r.peak_in_flight;
    s.mean_read_latency_s = r.mean_latency_s();
    s.peak_read_ahead_bytes = r.peak_bytes;
  }
  std::lock_guard<std::mutex> lock(d.msg_mu);
  s.corrupt_messages = d.messages;
  return s;
}

void Loader::ResetStats() {
  Impl& d = *impl_;
  for (int w = 0; w < d.source->workers(); ++w) {
    RecordSource::Cursor& c = d.source->cursor(w);
    c.read_ns = c.decompress_ns = c.bytes = 0;
    d.decode_states[w]->decode_ns = d.decode_states[w]->transform_ns = 0;
  }
  d.wait_ns = d.samples = d.batches = 0;
  d.source->ResetReadStats();
}

}  // namespace shardkit
