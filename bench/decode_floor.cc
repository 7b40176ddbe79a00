// decode_floor: the loader's JPEG path on one core against its decode floor,
// side by side in one run (bench/decode_floor.sh runs it for train and val).
//
//   decode_floor DIR [--transform train|val] [--size 224] [--batch 32]
//                [--rounds 5] [--seed S] [--layout NCHW|NHWC]
//                [--shuffle auto|full|block|none] [--only floor|decode|loader]
//
// Three sides over the same samples, every position of epoch 0 (rank 0 of
// 1, drop_last; the records at those positions are the loader's, read from
// a pass of it, or with --shuffle none the records in order, with no pass:
// for callgrind), so each side decodes the same crops:
//   floor     SampleDecoder::DecodeRegion alone: each crop's rows and columns
//             at the DCT scale (and IDCT) the loader picks, nothing else;
//             payloads from memory, on this thread.
//   decode    SampleDecoder::Decode into one sample's memory: the floor plus
//             the resample into the output layout, still without a loader.
//   loader    the Loader with 1 worker (payloads read from the page cache,
//             checksummed, decoded, resampled into the batch), its batches
//             taken by this thread.
// The sides alternate within each round, so the machine's drift falls on all
// of them. Prints each round, then the best and the median round per side,
// by the wall clock and per CPU second of the process (every thread: steadier
// on a shared machine), the loader's stage counters, and side / floor (best
// over best, and the median of the rounds' own ratios). --only SIDE times one
// side alone (for valgrind --tool=callgrind, whose instruction counts do not
// depend on load).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loader/loader.h"
#include "loader/sample_decoder.h"
#include "shard/dataset.h"

namespace shardkit {
namespace {

struct Args {
  std::string dir, only;
  LoaderOptions loader;
  int rounds = 5;
};

int Usage(const std::string& why) {
  std::fprintf(
      stderr,
      "decode_floor: error: %s\nusage: decode_floor DIR [--transform train|val] [--size N] "
      "[--batch N] [--rounds N] [--seed S] [--layout NCHW|NHWC] "
      "[--shuffle auto|full|block|none] [--only floor|decode|loader]\n",
      why.c_str());
  return 2;
}

bool ParseArgs(int argc, char** argv, Args* a, std::string* error) {
  if (argc < 2) return (*error = "no dataset given", false);
  a->dir = argv[1];
  LoaderOptions& o = a->loader;
  o.workers = 1;
  o.drop_last = true;
  o.transform.kind = TransformKind::kTrain;
  for (int i = 2; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return (*error = flag + " needs a value", false);
    const std::string v = argv[i + 1];
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    const bool number = !v.empty() && *end == '\0' && n > 0 && n <= (1 << 20);
    if (flag == "--transform") {
      if (!TransformKindFromName(v, &o.transform.kind) ||
          (o.transform.kind != TransformKind::kTrain && o.transform.kind != TransformKind::kVal))
        return (*error = "--transform must be train or val, not '" + v + "'", false);
    } else if (flag == "--layout") {
      if (!ValueOf(kLayoutNames, v, &o.layout))
        return (*error = "--layout must be NCHW or NHWC, not '" + v + "'", false);
    } else if (flag == "--shuffle") {
      if (!ShuffleModeFromName(v, &o.shuffle))
        return (*error = "--shuffle must be auto, full, block or none, not '" + v + "'", false);
    } else if (flag == "--only") {
      if (v != "floor" && v != "decode" && v != "loader")
        return (*error = "--only must be floor, decode or loader, not '" + v + "'", false);
      a->only = v;
    } else if (!number) {
      return (*error = "bad argument '" + flag + " " + v + "'", false);
    } else if (flag == "--size") {
      o.transform.size = static_cast<int>(n);
    } else if (flag == "--batch") {
      o.batch_size = static_cast<int>(n);
    } else if (flag == "--rounds") {
      a->rounds = static_cast<int>(n);
    } else if (flag == "--seed") {
      o.seed = static_cast<uint64_t>(n);
    } else {
      return (*error = "unknown flag " + flag, false);
    }
  }
  return true;
}

// Wall-clock seconds, and the CPU seconds of the whole process (every thread).
struct Span {
  double wall = 0, cpu = 0;
};
double CpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
class Timer {
 public:
  Span Stop() const {
    return Span{std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(),
                CpuSeconds() - cpu0_};
  }

 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  double cpu0_ = CpuSeconds();
};

// The epoch's samples (the records at its positions, as the loader's first
// pass read them), their payloads in memory, and the three ways of turning
// them into pixels. Every pass reads epoch 0.
class Sides {
 public:
  Status Open(const Args& a) {
    SK_ASSIGN_OR_RETURN(loader_, Loader::Open(a.dir, a.loader));
    SK_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, Dataset::Open(a.dir));
    if (ds->manifest().record.kind != format::RecordKind::kJpeg)
      return Status::InvalidArgument(a.dir + ": not a JPEG dataset");
    SK_ASSIGN_OR_RETURN(decoder_, SampleDecoder::Make(ds->manifest().record, a.loader.transform,
                                                      a.loader.layout, a.loader.seed, a.dir));
    if (a.loader.shuffle == ShuffleMode::kNone) {  // position p holds record p
      for (uint64_t p = 0; p < loader_->samples_per_epoch(); ++p) records_.push_back(p);
    } else {  // the loader's order, from a pass of it
      SK_RETURN_IF_ERROR(loader_->StartEpoch(0));
      for (;;) {
        const Batch* b = nullptr;
        SK_RETURN_IF_ERROR(loader_->Next(&b));
        if (b == nullptr) break;
        records_.insert(records_.end(), b->sample_ids, b->sample_ids + b->size);
      }
    }
    ReadScratch scratch;
    for (uint64_t record : records_) {
      const auto [shard, local] = ds->Locate(record);
      std::string_view v;
      SK_RETURN_IF_ERROR(ds->shard(shard).ReadRecord(local, &scratch, &v));
      payloads_.emplace_back(v);
    }
    samples_ = records_.size();
    if (samples_ == 0) return Status::InvalidArgument(a.dir + ": fewer records than one batch");
    out_.resize(decoder_.sample_bytes());
    return Status::OK();
  }
  uint64_t samples() const { return samples_; }

  // One pass of a side over the epoch: its wall-clock and CPU seconds.
  Result<Span> Floor() {
    const Timer timer;
    for (uint64_t p = 0; p < samples_; ++p) {
      CropDecision crop;
      SK_RETURN_IF_ERROR(decoder_.DecodeRegion(state_, payloads_[p], 0, p, &crop));
    }
    return timer.Stop();
  }
  Result<Span> Decode() {
    const Timer timer;
    for (uint64_t p = 0; p < samples_; ++p)
      SK_RETURN_IF_ERROR(decoder_.Decode(state_, payloads_[p], 0, p, out_.data()));
    return timer.Stop();
  }
  // The whole epoch, so that nothing is left filling when the round ends.
  Result<Span> Load() {
    loader_->ResetStats();
    const Timer timer;
    SK_RETURN_IF_ERROR(loader_->StartEpoch(0));
    uint64_t p = 0;
    for (;;) {
      const Batch* b = nullptr;
      SK_RETURN_IF_ERROR(loader_->Next(&b));
      if (b == nullptr) break;
      for (int i = 0; i < b->size; ++i, ++p) {
        if (p >= samples_ || b->sample_ids[i] != records_[p])  // not the floor's samples
          return Status::Corruption("the loader's epoch differs from its first pass at " +
                                    std::to_string(p));
      }
    }
    const Span t = timer.Stop();
    if (p != samples_) return Status::Corruption("the loader's epoch has " + std::to_string(p));
    stats_ = loader_->stats();
    return t;
  }
  const LoaderStats& loader_stats() const { return stats_; }

 private:
  std::unique_ptr<Loader> loader_;
  SampleDecoder decoder_;
  SampleDecoder::State state_;
  std::vector<uint64_t> records_;  // at each position of the epoch
  std::vector<std::string> payloads_;
  std::vector<uint8_t> out_;
  uint64_t samples_ = 0;
  LoaderStats stats_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
double Best(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

struct Side {
  const char* name;
  std::function<Result<Span>()> pass;
  std::vector<double> wall, cpu;  // images per wall-clock second, per CPU second, each round
};

// side / floor: best over best, and the median of the rounds' own ratios.
void PrintRatio(const char* what, const Side& side, const Side& floor) {
  auto ratios = [](const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> r;
    for (size_t i = 0; i < a.size(); ++i) r.push_back(a[i] / b[i]);
    return r;
  };
  std::printf("%s / floor: %.3f best, %.3f median of rounds (wall clock); %.3f, %.3f (CPU time)\n",
              what, Best(side.wall) / Best(floor.wall), Median(ratios(side.wall, floor.wall)),
              Best(side.cpu) / Best(floor.cpu), Median(ratios(side.cpu, floor.cpu)));
}

int Run(const Args& a) {
  Sides sides;
  if (Status s = sides.Open(a); !s.ok()) return Usage(s.ToString());
  std::vector<Side> all = {
      {"floor", [&] { return sides.Floor(); }, {}, {}},
      {"decode", [&] { return sides.Decode(); }, {}, {}},
      {"loader", [&] { return sides.Load(); }, {}, {}},
  };
  std::vector<Side*> run;
  for (Side& s : all) {
    if (a.only.empty() || a.only == s.name) run.push_back(&s);
  }
  const LoaderOptions& o = a.loader;
  std::printf(
      "decode_floor %s: transform %s %dx%d, layout %s, shuffle %s, %llu samples per round, 1 "
      "worker, rounds alternate the sides; img/s by the wall clock (img per CPU second of the "
      "process)\n",
      a.dir.c_str(), TransformKindName(o.transform.kind), o.transform.out_height(),
      o.transform.out_width(), NameOf(kLayoutNames, o.layout), ShuffleModeName(o.shuffle),
      static_cast<unsigned long long>(sides.samples()));
  // A pass of every side first, untimed: the payloads, buffers and ring are warm after it.
  for (Side* s : run) {
    if (Result<Span> t = s->pass(); !t.ok()) return Usage(t.status().ToString());
  }
  const double n = static_cast<double>(sides.samples());
  for (int r = 0; r < a.rounds; ++r) {
    for (size_t k = 0; k < run.size(); ++k) {  // rotating which side goes first
      Side* s = run[(k + static_cast<size_t>(r)) % run.size()];
      Result<Span> t = s->pass();
      if (!t.ok()) return Usage(t.status().ToString());
      s->wall.push_back(n / t->wall);
      s->cpu.push_back(n / t->cpu);
    }
    std::printf("round %d:", r + 1);
    for (Side* s : run) std::printf("  %s %.0f (%.0f)", s->name, s->wall.back(), s->cpu.back());
    std::printf("\n");
    std::fflush(stdout);
  }
  std::printf("%-8s %11s %13s %11s %13s\n", "side", "best img/s", "median img/s", "best img/cpu-s",
              "us/img (best)");
  for (Side* s : run) {
    std::printf("%-8s %11.0f %13.0f %11.0f %13.1f\n", s->name, Best(s->wall), Median(s->wall),
                Best(s->cpu), 1e6 / Best(s->wall));
  }
  const LoaderStats& st = sides.loader_stats();
  if (st.samples > 0) {
    const double per = 1e6 / st.samples;
    std::printf("loader stages (last round, us/img): read %.1f, decode %.1f, resample %.1f\n",
                st.read_s * per, st.decode_s * per, st.transform_s * per);
  }
  if (a.only.empty()) {
    PrintRatio("decode", all[1], all[0]);
    PrintRatio("loader", all[2], all[0]);
  }
  return 0;
}

}  // namespace
}  // namespace shardkit

int main(int argc, char** argv) {
  shardkit::Args a;
  std::string error;
  if (!shardkit::ParseArgs(argc, argv, &a, &error)) return shardkit::Usage(error);
  return shardkit::Run(a);
}
