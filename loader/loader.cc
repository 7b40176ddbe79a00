// Loader: the facade. Opens the stages (RecordSource, SampleDecoder,
// CorruptSamples, BatchFiller, PrefetchRing) from the options, runs the
// producer thread that claims ring slots and has the filler fill them, and
// hands batches to the consumer.
#include "loader/loader.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include "loader/batch_filler.h"
#include "loader/record_source.h"
#include "loader/resume_plan.h"
#include "loader/sample_decoder.h"
#include "storage/system.h"

namespace shardkit {

struct Loader::Impl {
  LoaderOptions opt;
  std::string dir;
  std::unique_ptr<RecordSource> source;
  SampleDecoder decoder;
  std::unique_ptr<CorruptSamples> corrupt;
  std::unique_ptr<PrefetchRing> ring;
  std::unique_ptr<BatchFiller> filler;

  // Epoch state: written only while no producer runs.
  uint64_t epoch = 0;
  // After Restore on another world or batch size: epoch rest_epoch is only
  // these positions (the ones left of it), until it is read to its end (Next
  // gives no batch) or another epoch starts. Under consumer_mu.
  std::shared_ptr<const EpochPositions> rest;
  uint64_t rest_epoch = 0;
  bool started = false;
  // Passes (BeginPass), under consumer_mu: the epoch SetEpoch or Restore
  // chose for the next pass (if chosen), the (epoch, batch) Restore saved,
  // kept until that epoch is read to its end, and whether a pass is over.
  bool epoch_chosen = true;  // a new loader's first pass reads epoch 0
  uint64_t chosen_epoch = 0;
  std::optional<std::pair<uint64_t, uint64_t>> resume_at;
  bool between_passes = true;
  bool pass_read = false;  // the epoch started last was read to its end (Next gave no batch)
  // ShuffleMode::kGiven, under consumer_mu: the order given for epoch
  // given_epoch (SetEpochOrder, or the one a restored state saved), and the
  // order of the epoch started last (what its pass reads and state() saves).
  GivenOrder given;
  uint64_t given_epoch = 0;
  GivenOrder reading;
  std::thread producer;
  std::vector<PrefetchRing::Slot*> claimed;
  std::vector<BatchFiller::Job> jobs;
  // Consumer state, under consumer_mu (a second consumer thread waits).
  mutable std::mutex consumer_mu;
  uint64_t next_batch = 0;
  Status error;                       // sticky until StartEpoch
  std::shared_ptr<const Batch> held;  // Next(const Batch**)'s lease
  std::atomic<uint64_t> wait_ns{0};

  const Partition& part() const { return source->partition(); }
  bool given_mode() const { return opt.shuffle == ShuffleMode::kGiven; }
  GivenOrder GivenFor(uint64_t e) const { return given && given_epoch == e ? given : nullptr; }
  std::shared_ptr<const EpochPositions> RestFor(uint64_t e) const {
    return rest && rest_epoch == e ? rest : nullptr;
  }

  void StopProducer() {
    ring->Stop();
    if (producer.joinable()) producer.join();
    ring->Reset();
  }

  // Under consumer_mu: StartEpoch and Next.
  Status Start(uint64_t epoch, uint64_t start_batch);
  // Under consumer_mu: SetSize (between epochs), Restore (`anytime`: what
  // is being read is replaced).
  Status Resize(int size, int resize, bool anytime);
  // An output side to set: JPEGs (every transform sizes them), or raw
  // records cropped (RandomCrop); raw records as stored have none.
  // SetSize (or a Restore of a state it made) chose the output side:
  // state() saves it. A loader never resized saves none, so a state from
  // another --size is refused as before rather than taken on.
  bool size_set = false;
  bool sizable() const { return decoder.jpeg() || opt.transform.kind != TransformKind::kNone; }
  uint64_t NextPassEpoch() const {
    if (epoch_chosen) return chosen_epoch;
    return pass_read ? epoch + 1 : epoch;
  }
  // The batch a pass of `epoch` starts at: Restore's, for its epoch.
  uint64_t NextPassStart(uint64_t pass_epoch) const {
    return resume_at && resume_at->first == pass_epoch ? resume_at->second : 0;
  }
  // Whether a pass of `pass_epoch` continues what Restore() saved of it.
  bool Resumes(uint64_t pass_epoch) const {
    return (resume_at && resume_at->first == pass_epoch) || RestFor(pass_epoch) != nullptr;
  }
  Status Take(std::shared_ptr<const Batch>* batch, uint64_t timeout_ns, bool* ready);

  // kGiven, a state at the start of `epoch`: the next pass reads it, in
  // the order it will be given; no pass starts (there is no order yet).
  Status RestoreEpochStart(uint64_t at_epoch) {
    StopProducer();
    held.reset();
    error = Status::OK();
    started = false;
    rest.reset();
    resume_at.reset();
    epoch = at_epoch;
    next_batch = 0;
    chosen_epoch = at_epoch;
    epoch_chosen = true;
    between_passes = true;
    return Status::OK();
  }

  // Claims the slots of the next batches, fills them, publishes them; a
  // failed batch is published (the consumer gets its error) and ends the epoch.
  void ProducerLoop(uint64_t first) {
    const uint64_t end = part().batches;
    filler->NewRun();
    for (uint64_t k = first; k < end;) {
      // The first fill is one batch (a full shuffle of a compressed dataset
      // decompresses a block per sample: the first batch waits for its own
      // blocks only); see BatchFiller::NextClaim.
      const BatchFiller::Claim c = filler->NextClaim(ring->size(), end - k, k == first);
      if (!ring->Claim(k, c.want, end, &claimed, c.most)) return;
      jobs.clear();
      for (PrefetchRing::Slot* s : claimed) {
        jobs.push_back(BatchFiller::Job{s, s->index, s->index * part().batch_size,
                                        static_cast<int>(part().BatchLength(s->index))});
      }
      // Each batch goes to the consumer as soon as it is filled.
      bool ended = false;  // a failed batch, or the ring stopped
      filler->Fill(epoch, &jobs, [&](const BatchFiller::Job& job) {
        ended = !ring->Publish(job.slot) || !job.slot->status.ok();
        return !ended;
      });
      if (ended) return;
      k += jobs.size();
    }
  }
};

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Loader::~Loader() {
  // Reads still waiting on storage (a slow server, retries) end at once.
  impl_->source->dataset().AbortReads();
  impl_->StopProducer();
}

namespace {

// The ring is allocated as it fills: refuse what this machine cannot hold
// (the slots and the batch the consumer holds).
Status CheckRingFits(const SampleDecoder& decoder, const LoaderOptions& options) {
  const size_t sample_bytes = decoder.sample_bytes();
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
  return Status::OK();
}

// `t` with a square output of side `size` (val: Resize's short side
// `resize`; 0: derived from the crop fraction).
TransformParams SizedTransform(TransformParams t, int size, int resize) {
  t.size = size;
  t.height = t.width = 0;
  if (t.kind == TransformKind::kVal) {
    t.resize = resize;
    t.resize_height = t.resize_width = 0;
  }
  return t;
}

// What LoaderState::transform says of `t` (records decoded by `decoder`).
std::string StateTransform(const SampleDecoder& decoder, const TransformParams& t) {
  return decoder.jpeg() || t.kind == TransformKind::kCrop ? TransformSignature(t) : "raw";
}

Batch ShapeOf(const SampleDecoder& decoder, Layout layout) {
  Batch shape;
  shape.channels = decoder.channels();
  shape.height = decoder.height();
  shape.width = decoder.width();
  shape.layout = layout;
  return shape;
}

}  // namespace

Result<std::unique_ptr<Loader>> Loader::Open(const std::string& dir, const LoaderOptions& options) {
  SK_RETURN_IF_ERROR(ValidateLoaderOptions(options));
  auto impl = std::make_unique<Impl>();
  Impl& d = *impl;
  d.opt = options;
  d.opt.cancel_open = nullptr;  // the open's alone: not kept past it
  d.dir = dir;
  SK_ASSIGN_OR_RETURN(d.source, RecordSource::Open(dir, options, options, options.workers));
  SK_ASSIGN_OR_RETURN(d.decoder,
                      SampleDecoder::Make(d.source->dataset().manifest().record, options.transform,
                                          options.layout, options.seed, dir));
  SK_RETURN_IF_ERROR(CheckRingFits(d.decoder, options));
  d.ring = std::make_unique<PrefetchRing>(options.prefetch, options.batch_size,
                                          ShapeOf(d.decoder, options.layout), options.allocator);
  d.corrupt = std::make_unique<CorruptSamples>(options.corrupt_policy, options.skip_budget,
                                               d.part().per_rank);  // set again at each start
  d.filler = std::make_unique<BatchFiller>(d.source.get(), &d.decoder, d.corrupt.get(),
                                           options.workers, &d.ring->stop_flag());
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

Status Loader::SetSize(int size, int resize) {
  Impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.consumer_mu);
  SK_RETURN_IF_ERROR(d.Resize(size, resize, false));
  d.size_set = true;
  return Status::OK();
}

Status Loader::Impl::Resize(int size, int resize, bool anytime) {
  if (!anytime && started && !between_passes && !pass_read) {
    return Status::InvalidArgument(
        "the output size changes between epochs, not in the middle of "
        "one (epoch " +
        std::to_string(epoch) + " is being read)");
  }
  if (!sizable()) {
    return Status::InvalidArgument(
        "raw records are returned as stored (transform none): there is no output size to set");
  }
  const TransformParams t = SizedTransform(opt.transform, size, resize);
  if (TransformSignature(t) == TransformSignature(opt.transform)) return Status::OK();
  LoaderOptions o = opt;
  o.transform = t;
  SK_RETURN_IF_ERROR(ValidateLoaderOptions(o));
  SK_ASSIGN_OR_RETURN(SampleDecoder made, SampleDecoder::Make(source->dataset().manifest().record,
                                                              t, o.layout, o.seed, dir));
  SK_RETURN_IF_ERROR(CheckRingFits(made, o));
  StopProducer();
  decoder = std::move(made);  // the filler's pointer to it stays valid
  ring->Reshape(ShapeOf(decoder, o.layout), o.allocator);
  opt.transform = t;
  return Status::OK();
}

Status Loader::StartEpoch(uint64_t epoch, uint64_t start_batch) {
  std::lock_guard<std::mutex> lock(impl_->consumer_mu);
  impl_->epoch_chosen = false;
  impl_->between_passes = false;
  return impl_->Start(epoch, start_batch);
}

void Loader::SetEpoch(uint64_t epoch) {
  std::lock_guard<std::mutex> lock(impl_->consumer_mu);
  impl_->chosen_epoch = epoch;
  impl_->epoch_chosen = true;
}

Status Loader::BeginPass() {
  Impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.consumer_mu);
  const uint64_t epoch = d.NextPassEpoch();
  const uint64_t start = d.NextPassStart(epoch);
  if (d.resume_at && d.resume_at->first != epoch) {
    d.resume_at.reset();  // another epoch was chosen: the saved one is not resumed
  }
  d.epoch_chosen = false;
  d.between_passes = false;
  return d.Start(epoch, start);
}

void Loader::EndPass() {
  std::lock_guard<std::mutex> lock(impl_->consumer_mu);
  impl_->between_passes = true;
}

uint64_t Loader::pass_epoch() const {
  std::lock_guard<std::mutex> lock(impl_->consumer_mu);
  return impl_->between_passes ? impl_->NextPassEpoch() : impl_->epoch;
}

Status Loader::Impl::Start(uint64_t new_epoch, uint64_t start_batch) {
  Impl& d = *this;
  d.StopProducer();
  GivenOrder order = d.GivenFor(new_epoch);
  if (d.given_mode() && !order) {
    d.started = false;
    return Status::InvalidArgument(
        "epoch " + std::to_string(new_epoch) +
        " has no order: this loader reads the orders it is given (a sampler's indices); give "
        "the epoch's with SetEpochOrder before starting it");
  }
  if (d.rest && d.rest_epoch != new_epoch) d.rest.reset();
  d.source->StartEpoch(new_epoch, start_batch, d.rest, order);
  d.reading = std::move(order);
  d.corrupt->set_rank_samples(d.part().per_rank);  // replacements come from this epoch's samples
  if (start_batch >= d.part().batches) d.rest.reset();  // nothing left of a resumed epoch
  if (start_batch > d.part().batches) {
    d.started = false;
    return Status::InvalidArgument("start batch " + std::to_string(start_batch) +
                                   " past the epoch's " + std::to_string(d.part().batches) +
                                   " batches");
  }
  d.held.reset();
  d.error = Status::OK();
  d.pass_read = false;
  d.next_batch = start_batch;
  d.epoch = new_epoch;
  d.started = true;
  d.producer = std::thread([&d, start_batch] { d.ProducerLoop(start_batch); });
  return Status::OK();
}

Status Loader::Impl::Take(std::shared_ptr<const Batch>* batch, uint64_t timeout_ns, bool* ready) {
  batch->reset();
  if (ready != nullptr) *ready = true;
  if (!started) return Status::InvalidArgument("Next() before StartEpoch()");
  if (!error.ok()) return error;
  if (next_batch >= part().batches) {
    // The end, seen: a restored epoch is read (a peek at its last batch is
    // not its end), and the next pass reads the epoch after it.
    rest.reset();
    if (resume_at && resume_at->first == epoch) resume_at.reset();
    pass_read = true;
    return Status::OK();
  }
  uint64_t waited = 0;
  Status s = ring->Take(next_batch, batch, &waited, timeout_ns, ready);
  wait_ns.fetch_add(waited, std::memory_order_relaxed);
  if (!s.ok()) {
    error = s;
    return s;
  }
  if (ready == nullptr || *ready) ++next_batch;
  return Status::OK();
}

Status Loader::Next(std::shared_ptr<const Batch>* batch) {
  std::lock_guard<std::mutex> lock(impl_->consumer_mu);
  return impl_->Take(batch, PrefetchRing::kForever, nullptr);
}

Status Loader::Next(std::shared_ptr<const Batch>* batch, uint64_t timeout_ns, bool* ready) {
  std::lock_guard<std::mutex> lock(impl_->consumer_mu);
  return impl_->Take(batch, timeout_ns, ready);
}

Status Loader::Next(const Batch** batch) {
  Impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.consumer_mu);
  *batch = nullptr;
  d.held.reset();  // before taking the next: its buffer can be refilled
  SK_RETURN_IF_ERROR(d.Take(&d.held, PrefetchRing::kForever, nullptr));
  *batch = d.held.get();
  return Status::OK();
}

uint64_t Loader::epoch() const {
  std::lock_guard<std::mutex> lock(impl_->consumer_mu);
  return impl_->epoch;
}
uint64_t Loader::next_batch() const {
  std::lock_guard<std::mutex> lock(impl_->consumer_mu);
  return impl_->next_batch;
}
uint64_t Loader::batches_per_epoch() const {
  std::lock_guard<std::mutex> lock(impl_->consumer_mu);  // StartEpoch recuts a resumed epoch
  return impl_->part().batches;
}
uint64_t Loader::samples_per_epoch() const {
  std::lock_guard<std::mutex> lock(impl_->consumer_mu);
  const Partition& p = impl_->part();
  return p.drop_last ? p.batches * p.batch_size : p.per_rank;
}
uint64_t Loader::real_samples_per_epoch() const {
  std::lock_guard<std::mutex> lock(impl_->consumer_mu);
  const Partition& p = impl_->part();
  return p.drop_last ? p.batches * p.batch_size : p.real;
}
uint64_t Loader::dataset_records() const { return impl_->source->dataset().num_records(); }
int Loader::channels() const { return impl_->decoder.channels(); }
int Loader::height() const { return impl_->decoder.height(); }
int Loader::width() const { return impl_->decoder.width(); }
const Manifest& Loader::manifest() const { return impl_->source->dataset().manifest(); }
ShuffleMode Loader::shuffle_mode() const { return impl_->source->mode(); }
const std::string& Loader::shuffle_reason() const { return impl_->source->shuffle_reason(); }
std::vector<uint64_t> Loader::EpochRecords(uint64_t epoch) const {
  const Impl& d = *impl_;
  if (!d.given_mode()) return d.source->EpochRecords(epoch);
  std::unique_lock<std::mutex> lock(d.consumer_mu);
  GivenOrder order = d.GivenFor(epoch);
  if (!order && d.started && d.epoch == epoch) order = d.reading;
  lock.unlock();
  return d.source->Records(epoch, 0, nullptr, std::move(order));
}

Status Loader::SetEpochOrder(uint64_t epoch, std::vector<uint64_t> records) {
  Impl& d = *impl_;
  if (!d.given_mode()) {
    return Status::InvalidArgument(
        std::string("SetEpochOrder: this loader orders its epochs itself "
                    "(shuffle '") +
        ShuffleModeName(d.source->mode()) +
        "'); open it with ShuffleMode::kGiven to give their orders");
  }
  const uint64_t n = d.source->dataset().num_records();
  for (size_t i = 0; i < records.size(); ++i) {
    if (records[i] >= n) {
      return Status::InvalidArgument(
          "epoch " + std::to_string(epoch) + "'s order: index " + std::to_string(records[i]) +
          " (at position " + std::to_string(i) + ") is not a record of the dataset, " +
          "which has " + std::to_string(n) + " (0.." + std::to_string(n - 1) + ")");
    }
  }
  auto order = std::make_shared<const std::vector<uint64_t>>(std::move(records));
  std::lock_guard<std::mutex> lock(d.consumer_mu);
  d.given = std::move(order);
  d.given_epoch = epoch;
  // A position Restore() saved in this epoch counted through the saved order.
  if (d.resume_at && d.resume_at->first == epoch) d.resume_at.reset();
  if (d.rest_epoch == epoch) d.rest.reset();
  return Status::OK();
}

bool Loader::PassResumes() const {
  const Impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.consumer_mu);
  return d.Resumes(d.NextPassEpoch());
}

std::vector<uint64_t> Loader::PassRecords() const {
  const Impl& d = *impl_;
  std::unique_lock<std::mutex> lock(d.consumer_mu);  // what the pass is; located after
  const uint64_t epoch = d.NextPassEpoch(), start = d.NextPassStart(epoch);
  std::shared_ptr<const EpochPositions> rest = d.RestFor(epoch);
  GivenOrder order = d.GivenFor(epoch);
  lock.unlock();
  return d.source->Records(epoch, start, std::move(rest), std::move(order));
}

uint64_t Loader::PassSamples() const {
  const Impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.consumer_mu);
  const uint64_t epoch = d.NextPassEpoch();
  return d.source->CountRecords(d.NextPassStart(epoch), d.RestFor(epoch), d.GivenFor(epoch));
}

LoaderState Loader::state() const {
  const Impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.consumer_mu);
  LoaderState s;
  s.epoch = d.epoch;
  s.batch = d.next_batch;
  // What the positions and batch count through: the rest of an epoch cut
  // again (elastic resume), the order given for it (kGiven). A pass that
  // has begun has drawn its order (from batch 0 on: a sampler drawn again
  // would give another), and so has a restored position not yet read.
  std::shared_ptr<const EpochPositions> rest;
  GivenOrder order;
  if (d.between_passes) {  // where the next pass starts
    s.epoch = d.NextPassEpoch();
    s.batch = d.NextPassStart(s.epoch);
    if (d.started) rest = d.RestFor(s.epoch);
    if (d.Resumes(s.epoch)) order = d.GivenFor(s.epoch);
  } else if (d.started && s.batch >= d.part().batches) {  // read to its end: the next epoch's start
    ++s.epoch;
    s.batch = 0;
  } else if (d.started) {  // the pass in progress
    rest = d.part().rest;
    order = d.reading;
  }
  s.seed = d.opt.seed;
  s.world_size = static_cast<uint64_t>(d.opt.world_size);
  s.batch_size = static_cast<uint64_t>(d.opt.batch_size);
  s.records = d.source->dataset().num_records();
  s.dataset = DatasetFingerprint(d.source->dataset().manifest());
  s.drop_last = d.opt.drop_last;
  s.shuffle = ShuffleModeName(d.source->mode());
  s.block_window = d.source->mode() == ShuffleMode::kBlockLocal ? d.source->window() : 0;
  // Raw records as stored have nothing to sign; cropped, their crops.
  s.transform = StateTransform(d.decoder, d.opt.transform);
  if (d.size_set && d.sizable() && d.opt.transform.height == 0) {
    s.size = d.opt.transform.size;
    s.resize = d.opt.transform.kind == TransformKind::kVal ? d.opt.transform.resize : 0;
  }
  if (rest) s.positions = rest->ranges();
  if (order) s.order = *order;
  return s;
}

Status Loader::Restore(const LoaderState& saved) {
  Impl& d = *impl_;
  LoaderState current = state();
  std::lock_guard<std::mutex> lock(d.consumer_mu);
  // The output size it was saved at (a resolution schedule's) is compared
  // and set back with the rest; nothing changes unless it resumes.
  const bool sized = saved.size > 0 && d.sizable();
  if (sized) {
    const TransformParams t = SizedTransform(d.opt.transform, saved.size, saved.resize);
    current.transform = StateTransform(d.decoder, t);
    current.size = saved.size;
    current.resize = t.kind == TransformKind::kVal ? saved.resize : 0;
  }
  SK_ASSIGN_OR_RETURN(ResumePoint at, PlanResume(saved, current, d.opt.rank));
  if (sized) {
    SK_RETURN_IF_ERROR(d.Resize(saved.size, saved.resize, /*anytime=*/true));
    d.size_set = true;
  }
  if (d.given_mode() && !at.order) return d.RestoreEpochStart(at.epoch);
  if (d.given_mode()) {
    d.given = std::move(at.order);
    d.given_epoch = at.epoch;
  }
  d.rest = std::move(at.rest);
  d.rest_epoch = at.epoch;
  d.epoch_chosen = false;  // a pass of its own choosing, as StartEpoch
  d.between_passes = false;
  d.resume_at.emplace(at.epoch, at.batch);
  return d.Start(at.epoch, at.batch);
}

LoaderStats Loader::stats() const {
  const Impl& d = *impl_;
  LoaderStats s;
  const RecordSourceStats r = d.source->stats();
  s.read_s = r.read_s;
  s.decompress_s = r.decompress_s;
  s.bytes_read = r.bytes;
  const BatchFillerStats f = d.filler->stats();
  s.decode_s = f.decode_s;
  s.transform_s = f.transform_s;
  s.samples = f.samples;
  s.batches = f.batches;
  s.fills_alone = f.fills_alone;
  s.fills_shared = f.fills_shared;
  s.fill_settled = f.settled;
  s.wait_s = d.wait_ns.load() * 1e-9;
  s.storage_requests = r.storage.requests;
  s.storage_bytes = r.storage.bytes;
  s.storage_retries = r.storage.retries;
  s.cache_hits = r.storage.cache_hits;
  s.cache_misses = r.storage.cache_misses;
  s.corrupt_records = d.corrupt->corrupt_records();
  s.samples_replaced = d.corrupt->samples_replaced();
  s.corrupt_units = d.corrupt->units();
  s.corrupt_messages = d.corrupt->messages();
  if (r.queued) {
    s.queued_reads = r.queue.reads;
    s.mean_reads_in_flight = r.queue.mean_in_flight();
    s.peak_reads_in_flight = r.queue.peak_in_flight;
    s.mean_read_latency_s = r.queue.mean_latency_s();
    s.peak_read_ahead_bytes = r.queue.peak_bytes;
  }
  return s;
}

void Loader::ResetStats() {
  Impl& d = *impl_;
  d.source->ResetStats();
  d.filler->ResetStats();
  d.wait_ns = 0;
}

}  // namespace shardkit
