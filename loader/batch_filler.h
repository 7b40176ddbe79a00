// BatchFiller: fills claimed ring slots with their batches. Each fill
// prepares the source's reads for its batches, decompresses the blocks they
// need and decodes their samples on a WorkerTeam (the calling thread and
// workers - 1 helpers; one path for JPEG and raw records), and settles each
// batch's failed samples with the corrupt policy (replaced, or the batch's
// error) on the calling thread once the batch's samples are all in.
//
// How work is split: raw samples are cheap and handed out in chunks, JPEGs
// one at a time. A fill runs on the calling thread alone or on the team
// (WorkerTeam: helpers join as they wake, and the caller never waits for one
// that has not started), whichever has filled faster per sample by the
// clock (the wall clock; a test's own in tests), the other tried now and
// then: small fills of cached raw records are faster alone (waking helpers
// costs more than it saves), decoding and decompressing faster shared, and a
// busy machine shifts the balance. Within
// a worker's range, fetches run RecordSource::kLivePayloads - 1 samples ahead
// of decoding, with each payload's first bytes prefetched into the CPU cache.
//
// Threading: Fill, NextClaim and NewRun from one thread at a time (the
// loader's producer); stats() from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "base/worker_team.h"
#include "loader/corrupt_policy.h"
#include "loader/prefetch_ring.h"
#include "loader/record_source.h"
#include "loader/sample_decoder.h"

namespace shardkit {

struct BatchFillerStats {
  double decode_s = 0, transform_s = 0;  // summed over workers
  uint64_t samples = 0, batches = 0;     // filled without error
  // Fills run alone and on the team; whether both ways have been measured
  // (always so with one worker): until then the choice is still exploring.
  uint64_t fills_alone = 0, fills_shared = 0;
  bool settled = false;
};

class BatchFiller {
 public:
  // One batch to fill: batch k of the epoch, the rank's samples [base, base + n).
  struct Job {
    PrefetchRing::Slot* slot = nullptr;
    uint64_t k = 0, base = 0;
    int n = 0;
  };

  // How the way of filling is chosen. The first kWarmupFills fills are cold
  // (the ring's memory touched for the first time) and not measured: raw
  // batches under kParallelCopyBytes with at most one block to decompress
  // are filled alone, others shared. Then each way is measured for up to
  // kBurst fills in a row (the warm-up's way first), and from then on the
  // faster per sample of late wins, the other tried anew (its history
  // dropped) for up to kBurst fills once every kBurst x kExplore x ratio^2
  // fills (at least 2 x kBurst, at most kMaxExploreInterval), ratio being
  // how much slower it was (a fill counts as at most 4x the best rate, so
  // the interval stays under 2048). A burst of the way not in the lead ends
  // after its first measured fill if that is more than kGiveUp times slower
  // than the other way: filling alone on JPEGs is about as many times slower
  // as there are workers, and a whole burst of it would cost many batches at
  // that pace. Such a trial alone claims one batch (NextClaim). A fill is
  // measured from the previous fill's end to its own end (its wait for free
  // slots too, so a team that slows the consumer, with whom it shares the
  // cores, counts against the team), so the next fill's way is known before
  // its slots are claimed. The first fill of an epoch or of a loader's run
  // is not measured: it takes the leading way, and a burst of the other
  // waits for the fill after it.
  static constexpr uint64_t kWarmupFills = 4;
  static constexpr size_t kParallelCopyBytes = 128 << 10;
  static constexpr uint64_t kBurst = 8;
  static constexpr double kExplore = 16;
  static constexpr double kMaxExploreInterval = 8192;
  static constexpr double kGiveUp = 1.5;

  // `stop`, once true, makes a fill end promptly with Aborted batches.
  // `clock` (outliving the filler) times the fills for the choice above.
  BatchFiller(RecordSource* source, const SampleDecoder* decoder, CorruptSamples* corrupt,
              int workers, const std::atomic<bool>* stop, const Clock& clock = SteadyClock());

  // How many batches one fill should take, given the ring's slots: raw
  // records fill half the ring at once (the team's wake-up then paid once
  // for several batches, the other half ready for the consumer); JPEG
  // batches are long enough to fill one at a time.
  uint64_t batches_per_fill(size_t ring_slots) const;
  // The next fill's claim, with `left` batches left in the epoch: wait for
  // `want` free slots (at least one) and take at most `most`. A run's
  // first fill (an epoch's start, or where a resumed epoch goes on) is one
  // batch, so that the first batch does not wait for the blocks the ones
  // behind it need; a trial alone is one batch, so that it
  // costs one batch at one worker's pace; other fills take batches_per_fill
  // and whatever else is free.
  struct Claim {
    uint64_t want = 1, most = 1;
  };
  Claim NextClaim(size_t ring_slots, uint64_t left, bool first_of_run) const;
  // A new run of fills (a loader's producer starting an epoch or a resumed
  // one): its first fill follows no fill and is not measured.
  void NewRun() { prev_.any = false; }

  // Fills the jobs' batches of `epoch` (consecutive batches, in order): each
  // slot's batch and its status, OK or the first failure the corrupt policy
  // did not replace; batches after a failed one are left unfilled.
  // With `publish`, each batch is settled and handed to it (in order) as
  // soon as its samples are in, by the calling thread between its own
  // samples, while the team goes on with the batches behind it: a fill of
  // several batches (the whole ring at an epoch's start, say) makes the
  // consumer wait for one batch, not for all. Nothing is handed over after a
  // failed batch or once `publish` returns false.
  using Publish = std::function<bool(const Job&)>;
  void Fill(uint64_t epoch, std::vector<Job>* jobs, const Publish& publish = nullptr);

  BatchFillerStats stats() const;
  void ResetStats();

 private:
  struct Item {
    int job, i0, i1;  // samples [i0, i1) of jobs[job]
  };
  bool stopping() const { return stop_->load(std::memory_order_relaxed); }
  Status Emit(int worker, const SampleLocation& l, std::string_view payload,
              PrefetchRing::Slot* slot, int i);
  Status LoadSample(int worker, uint64_t local_index, PrefetchRing::Slot* slot, int i);
  void LoadRange(int worker, const Job& job, int i0, int i1);
  bool ChooseAlone(int total, int nwarm, bool follows);
  void ChooseNext();
  bool Burst(bool alone);
  bool Leads(bool alone) const;
  void Record(bool alone, uint64_t ns, int samples);
  void RunItem(int worker, int item, int nwarm, const std::vector<Job>& jobs);
  void Settle(const Job& job);
  // The calling thread's part of handing over: settles and publishes the
  // batches, in order, whose samples are all in.
  void PublishFilled(const std::vector<Job>& jobs);

  RecordSource* source_;
  const SampleDecoder* decoder_;
  CorruptSamples* corrupt_;
  const int workers_;
  const std::atomic<bool>* stop_;
  const Clock& clock_;
  uint64_t epoch_ = 0;                                         // of the fill in progress
  std::vector<std::unique_ptr<SampleDecoder::State>> states_;  // per worker
  std::vector<std::vector<SampleLocation>> where_;             // per worker: a range's locations
  std::vector<BatchSpan> spans_;
  std::vector<Item> items_;
  // The fill in progress: items of each job not yet run (a worker's writes
  // to a batch come before its decrement), the next job to hand over, and
  // whether handing over has ended (a failed batch, or publish said stop).
  std::vector<std::atomic<int>> items_left_;
  size_t next_settle_ = 0;
  bool handover_done_ = false;
  const Publish* publish_ = nullptr;
  // Alone [0] and with the team [1]: wall-clock ns and samples of recent
  // fills, each from the previous fill's end to its own (decaying sums); a
  // burst of fills one way in progress; the way the warm-up took; the next
  // fill's way and claim, chosen at the end of the fill before it; the fill
  // before this one (its end, epoch and the batch after it).
  struct Way {
    double ns = 0, samples = 0;
    double rate() const { return ns / samples; }
  };
  Way ways_[2];
  uint64_t fills_ = 0, burst_left_ = 0;
  bool burst_alone_ = false, burst_fresh_ = false, prior_alone_ = false, next_alone_ = false;
  uint64_t next_most_ = UINT64_MAX;
  struct PrevFill {
    bool any = false;
    uint64_t end = 0, epoch = 0, next_k = 0;
  } prev_;
  WorkerTeam team_;  // the producer thread and workers - 1 helpers
  std::atomic<uint64_t> samples_{0}, batches_{0}, fills_alone_{0}, fills_shared_{0};
  std::atomic<bool> settled_{false};
};

}  // namespace shardkit
