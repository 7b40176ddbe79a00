#include "loader/batch_filler.h"

#include <algorithm>

namespace shardkit {
namespace {

// The way not in use is tried for up to kBurst fills in a row (fills differ:
// some decompress blocks, some do not) once every kBurst x kExplore x
// ratio^2 fills: often while the two are close, rarely when it lost by far,
// and then for one fill. Each way's rate is over its recent fills (weights
// decaying by kDecay).
constexpr double kDecay = 0.95;
// Samples fetched ahead of the one being decoded, so that their bytes are on
// their way to the CPU cache (raw records: the copies are the cost, and
// their sources are scattered); as many as the source keeps payloads live.
constexpr int kFetchAhead = RecordSource::kLivePayloads - 1;

}  // namespace

BatchFiller::BatchFiller(RecordSource* source, const SampleDecoder* decoder,
                         CorruptSamples* corrupt, int workers, const std::atomic<bool>* stop,
                         const Clock& clock)
    : source_(source),
      decoder_(decoder),
      corrupt_(corrupt),
      workers_(workers),
      stop_(stop),
      clock_(clock),
      team_(workers) {
  for (int w = 0; w < workers; ++w) states_.push_back(std::make_unique<SampleDecoder::State>());
  where_.resize(static_cast<size_t>(workers));
}

uint64_t BatchFiller::batches_per_fill(size_t ring_slots) const {
  return decoder_->jpeg() ? 1 : std::max<size_t>(1, ring_slots / 2);
}

BatchFiller::Claim BatchFiller::NextClaim(size_t ring_slots, uint64_t left,
                                          bool first_of_run) const {
  if (first_of_run) return Claim{1, 1};
  Claim c;
  c.most = next_most_;
  c.want = std::max<uint64_t>(1, std::min({left, batches_per_fill(ring_slots), c.most}));
  return c;
}

Status BatchFiller::Emit(int worker, const SampleLocation& l, std::string_view payload,
                         PrefetchRing::Slot* slot, int i) {
  const int32_t label = source_->label(l);
  slot->batch.labels[i] = label;
  slot->batch.sample_ids[i] = l.record;
  if (const size_t k = source_->num_classes();
      k > 0 && (label < -1 || (label >= 0 && static_cast<uint64_t>(label) >= k))) {
    return Status::Corruption(source_->Where(l) + ": label " + std::to_string(label) +
                              " outside the manifest's " + std::to_string(k) + " classes");
  }
  uint8_t* out = slot->batch.data + static_cast<size_t>(i) * decoder_->sample_bytes();
  Status s = decoder_->Decode(*states_[worker], payload, epoch_, l.position, out);
  if (!s.ok()) return Status::Corruption(source_->Where(l) + ": " + s.message());
  return Status::OK();
}

Status BatchFiller::LoadSample(int worker, uint64_t local_index, PrefetchRing::Slot* slot, int i) {
  const SampleLocation l = source_->Locate(local_index);
  std::string_view payload;
  SK_RETURN_IF_ERROR(source_->Fetch(source_->cursor(worker), l, &payload));
  return Emit(worker, l, payload, slot, i);
}

void BatchFiller::LoadRange(int worker, const Job& job, int i0, int i1) {
  RecordSource::Cursor& c = source_->cursor(worker);
  PrefetchRing::Slot* slot = job.slot;
  std::vector<SampleLocation>& locs = where_[worker];
  locs.resize(static_cast<size_t>(i1 - i0));
  for (int i = i0; i < i1; ++i) {
    locs[i - i0] = source_->Locate(job.base + i);
    source_->TouchIndex(locs[i - i0]);
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
  const size_t touch = decoder_->jpeg() ? 256 : decoder_->sample_bytes();
  for (int i = i0; i < i1; ++i) {
    if (stopping()) {
      slot->sample_status[i] = Status::Aborted("loader stopped");
      continue;
    }
    std::string_view payload;
    Status s = source_->Fetch(c, locs[i - i0], &payload);
    if (!s.ok()) {
      slot->sample_status[i] = std::move(s);
      continue;
    }
    for (size_t off = 0; off < std::min(touch, payload.size()); off += 64) {
      __builtin_prefetch(payload.data() + off);
    }
    // The oldest pending payload was fetched kFetchAhead fetches ago: still
    // live (kLivePayloads), decoded before the next fetch.
    if (count == kFetchAhead) decode_one();
    pending[(head + count) % kFetchAhead] = Pending{i, payload};
    ++count;
  }
  while (count > 0) decode_one();
}

void BatchFiller::Fill(uint64_t epoch, std::vector<Job>* jobs_in, const Publish& publish) {
  std::vector<Job>& jobs = *jobs_in;
  epoch_ = epoch;
  spans_.clear();
  int total = 0;
  for (const Job& job : jobs) {
    job.slot->status = Status::OK();
    job.slot->sample_status.assign(job.n, Status::OK());
    spans_.push_back(BatchSpan{job.k, job.base, job.n});
    total += job.n;
  }
  source_->Prepare(spans_);
  const int nwarm = static_cast<int>(source_->blocks_to_warm());
  items_.clear();
  for (size_t j = 0; j < jobs.size(); ++j) {
    const int n = jobs[j].n;
    const int chunk = decoder_->jpeg() ? 1 : std::max(1, n / (4 * workers_));
    for (int i0 = 0; i0 < n; i0 += chunk)
      items_.push_back(Item{static_cast<int>(j), i0, std::min(n, i0 + chunk)});
  }
  const int nitems = static_cast<int>(items_.size());
  items_left_ = std::vector<std::atomic<int>>(jobs.size());
  for (const Item& item : items_) items_left_[item.job].fetch_add(1, std::memory_order_relaxed);
  next_settle_ = 0;
  handover_done_ = false;
  publish_ = publish ? &publish : nullptr;
  const bool follows = prev_.any && epoch == prev_.epoch && jobs.front().k == prev_.next_k;
  const bool alone = ChooseAlone(total, nwarm, follows);
  (alone ? fills_alone_ : fills_shared_).fetch_add(1, std::memory_order_relaxed);
  // The blocks to decompress first, then the samples: claimed in that order,
  // so a block is being warmed before the samples that need it are loaded.
  team_.Run(
      nwarm + nitems, [&](int w, int it) { RunItem(w, it, nwarm, jobs); }, alone ? 1 : workers_);
  PublishFilled(jobs);  // every item has run: the rest
  publish_ = nullptr;
  // Measured from the previous fill's end (the wait for this fill's slots
  // included) when it is the one before it in the epoch, past the warm-up,
  // and whole (every batch handed over: none failed, nothing stopped it).
  const uint64_t end = clock_.NowNs();
  const bool whole = !handover_done_ && !stopping();
  if (follows && whole && fills_ > kWarmupFills) Record(alone, end - prev_.end, total);
  prev_ = PrevFill{true, end, epoch, jobs.back().k + 1};
  ChooseNext();
}

void BatchFiller::PublishFilled(const std::vector<Job>& jobs) {
  while (!handover_done_ && next_settle_ < jobs.size() &&
         items_left_[next_settle_].load(std::memory_order_acquire) == 0) {
    const Job& job = jobs[next_settle_++];
    try {  // on worker 0 inside the team's run: nothing may leave a task
      Settle(job);
    } catch (const std::exception& e) {
      job.slot->status = Status::IOError(std::string("loader: ") + e.what());
    }
    // A failed batch is handed over (the consumer gets its error); the ones
    // after it never are.
    const bool failed = !job.slot->status.ok();
    const bool go_on = publish_ == nullptr || (*publish_)(job);
    if (failed || !go_on) handover_done_ = true;
  }
}

// Alone (the calling thread) or with the team: whichever filled faster of
// late, per sample and by the wall clock (so a busy machine, a consumer
// competing for the cores, or work too small to share all count), with the
// other tried now and then. The batches do not depend on the choice. Past
// the warm-up, the way was chosen at the end of the fill before (ChooseNext).
bool BatchFiller::ChooseAlone(int total, int nwarm, bool follows) {
  if (workers_ == 1) return true;
  ++fills_;
  if (fills_ <= kWarmupFills) {  // cold (first touch of the ring, decoder buffers): not measured
    prior_alone_ =
        !decoder_->jpeg() && total * decoder_->sample_bytes() < kParallelCopyBytes && nwarm <= 1;
    return prior_alone_;
  }
  // A fill that follows none is not measured: a burst of the way not in
  // the lead (not measured since the burst began) waits for one that is.
  if (!follows && burst_left_ > 0 && burst_fresh_ && ways_[burst_alone_ ? 1 : 0].samples > 0 &&
      !Leads(burst_alone_)) {
    return !burst_alone_;
  }
  return next_alone_;
}

// Whether both ways are measured and `alone` (the calling thread alone, or
// the team) filled at least as fast of late as the other.
bool BatchFiller::Leads(bool alone) const {
  const Way &mine = ways_[alone ? 0 : 1], &other = ways_[alone ? 1 : 0];
  return mine.samples > 0 && other.samples > 0 && mine.rate() <= other.rate();
}

// A burst of up to kBurst measured fills `alone`, the next one first; its
// first measured fill replaces what that way measured before (Record).
bool BatchFiller::Burst(bool alone) {
  burst_alone_ = alone;
  burst_left_ = kBurst;
  burst_fresh_ = true;
  return alone;
}

// The way of the next fill, from what the fills so far measured, and its
// claim: a trial alone takes one batch.
void BatchFiller::ChooseNext() {
  next_most_ = UINT64_MAX;
  if (workers_ == 1 || fills_ < kWarmupFills) return;  // one way, or the next fill is cold
  const Way &alone = ways_[0], &team = ways_[1];
  const Way& mine = burst_alone_ ? alone : team;
  const Way& other = burst_alone_ ? team : alone;
  const bool both = alone.samples > 0 && team.samples > 0;
  if (burst_left_ > 0 && both && !burst_fresh_ && mine.rate() > kGiveUp * other.rate()) {
    burst_left_ = 0;  // lost by far: the rest of the burst would cost more than it tells
  }
  // Each way is measured first: the warm-up's way, then the other.
  if (burst_left_ > 0) {
    next_alone_ = burst_alone_;
  } else if ((prior_alone_ ? alone : team).samples == 0) {
    next_alone_ = Burst(prior_alone_);
  } else if ((prior_alone_ ? team : alone).samples == 0) {
    next_alone_ = Burst(!prior_alone_);
  } else {
    const bool best_alone = Leads(true);
    const double ratio = best_alone ? team.rate() / alone.rate() : alone.rate() / team.rate();
    const uint64_t interval =
        static_cast<uint64_t>(std::min(kMaxExploreInterval, kBurst * kExplore * ratio * ratio));
    next_alone_ =
        fills_ % std::max<uint64_t>(2 * kBurst, interval) == 0 ? Burst(!best_alone) : best_alone;
  }
  if (next_alone_ && !Leads(true)) next_most_ = 1;  // a trial
}

void BatchFiller::Record(bool alone, uint64_t ns, int samples) {
  if (workers_ == 1) return;
  Way& w = ways_[alone ? 0 : 1];
  if (burst_left_ > 0 && alone == burst_alone_) {
    --burst_left_;
    if (burst_fresh_) w = Way{};  // a burst measures its way anew
    burst_fresh_ = false;
  }
  // An outlier (a consumer that paused: its first step, an evaluation) counts
  // as at most 4x the best rate measured, so one slow fill cannot lock a way
  // out for more than an interval (kBurst x kExplore x 16 fills).
  double best = 0;
  for (const Way& way : ways_) {
    if (way.samples > 0) best = best == 0 ? way.rate() : std::min(best, way.rate());
  }
  const double measured = best > 0 ? std::min(double(ns), 4 * best * samples) : double(ns);
  w.ns = w.ns * kDecay + measured;
  w.samples = w.samples * kDecay + samples;
  if (ways_[0].samples > 0 && ways_[1].samples > 0) settled_.store(true, std::memory_order_relaxed);
}

void BatchFiller::RunItem(int w, int it, int nwarm, const std::vector<Job>& jobs) {
  if (it < nwarm) {
    if (!stopping()) source_->WarmBlock(static_cast<size_t>(it), source_->cursor(w));
    return;
  }
  // The calling thread hands over what is filled before its next samples.
  if (w == 0 && publish_ != nullptr) PublishFilled(jobs);
  const Item& item = items_[it - nwarm];
  const Job& job = jobs[item.job];
  try {
    LoadRange(w, job, item.i0, item.i1);
  } catch (const std::exception& e) {  // nothing may leave a worker's task
    for (int i = item.i0; i < item.i1; ++i) {
      job.slot->sample_status[i] = Status::IOError(std::string("loader worker: ") + e.what());
    }
  }
  items_left_[item.job].fetch_sub(1, std::memory_order_release);
}

// Once every item of the job has run (PublishFilled, on the calling thread:
// during the team's run, between its own items, or after it): replace failed
// samples as the corrupt policy says, or fail the batch; then stamp it.
void BatchFiller::Settle(const Job& job) {
  PrefetchRing::Slot* slot = job.slot;
  for (int i = 0; i < job.n; ++i) {
    Status s = slot->sample_status[i];
    uint64_t loaded = job.base + i;  // the rank's sample whose record failed
    for (uint64_t attempt = 0; !s.ok(); ++attempt) {
      if (stopping() || s.IsAborted()) {
        slot->status = Status::Aborted("loader stopped");
        return;
      }
      uint64_t replacement = 0;
      Status verdict =
          corrupt_->Replace(job.base + i, source_->Locate(loaded).record, s, attempt, &replacement);
      if (!verdict.ok()) {
        slot->status = std::move(verdict);
        return;
      }
      s = LoadSample(0, replacement, slot, i);
      loaded = replacement;
      if (s.ok()) corrupt_->Replaced();
    }
  }
  slot->batch.epoch = epoch_;
  slot->batch.index = job.k;
  slot->batch.size = job.n;
  slot->batch.real_size = static_cast<int>(source_->partition().BatchRealLength(job.k));
  samples_.fetch_add(job.n, std::memory_order_relaxed);
  batches_.fetch_add(1, std::memory_order_relaxed);
}

BatchFillerStats BatchFiller::stats() const {
  BatchFillerStats s;
  for (const auto& st : states_) {
    s.decode_s += st->decode_ns.load() * 1e-9;
    s.transform_s += st->transform_ns.load() * 1e-9;
  }
  s.samples = samples_.load();
  s.batches = batches_.load();
  s.fills_alone = fills_alone_.load();
  s.fills_shared = fills_shared_.load();
  s.settled = workers_ == 1 || settled_.load();
  return s;
}

void BatchFiller::ResetStats() {
  for (auto& st : states_) st->decode_ns = st->transform_ns = 0;
  samples_ = batches_ = fills_alone_ = fills_shared_ = 0;
}

}  // namespace shardkit
