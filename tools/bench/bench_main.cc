// shardkit-bench loader: loader throughput per worker count, with the stage
// breakdown, as a table, CSV, JSON and an SVG plot against ideal scaling.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "image/codec.h"
#include "loader/loader.h"
#include "shard/shard.h"
#include "storage/file_io.h"
#include "storage/output_file.h"
#include "storage/system.h"
#include "tools/common/cli.h"
#include "tools/common/progress.h"
#include "tools/common/svg_plot.h"

namespace shardkit {
namespace {

struct Row {
  int workers = 0;
  double images_per_sec = 0, mb_per_sec = 0, seconds = 0;
  uint64_t images = 0;
  double read_us = 0, decompress_us = 0, decode_us = 0,
         transform_us = 0;  // per image, summed over workers
  double wait_fraction = 0;
  // --on-corrupt skip: the distinct records found corrupt, and the samples
  // delivered with another record in their place, over every round.
  uint64_t corrupt_records = 0, samples_replaced = 0;
  // --cold: bytes storage read (/proc/self/io) while batches were read, after
  // the loader was open, and the records' stored bytes the loader asked for,
  // in the fastest round; peak resident memory.
  uint64_t storage_bytes = 0, record_bytes = 0, peak_rss = 0;
  // The read-ahead queue: reads in flight (mean, peak), mean latency of a
  // read, and the most bytes it held.
  double reads_in_flight = 0, read_latency_ms = 0;
  uint64_t peak_reads_in_flight = 0, peak_read_ahead_bytes = 0;
  double open_seconds = 0;          // Loader::Open: manifest, every shard's header and index
  double first_batch_seconds = 0;   // --cold: from the open loader to its first batch
  uint64_t warmup_batches = 0;      // until the loader's fill choice settled (Measure)
  double shared_fills = 0;          // of the fastest round's fills, those run on the whole team
  uint64_t open_storage_bytes = 0;  // --cold: what that open read (storage_bytes is what followed)
};

struct FastestRound;
void FillRow(const LoaderOptions& opt, const FastestRound& best, const LoaderStats& st, Row* row);

// Every measurement here is the fastest of several timed rounds: on a shared
// machine the slow rounds measure the neighbours (the PyTorch peer in bench/
// is timed the same way).
struct FastestRound {
  double seconds = 0;
  uint64_t items = 0, bytes = 0;
  // Keeps the round if it is the first or the fastest yet; says whether it did.
  bool Offer(uint64_t n, uint64_t nb, double t) {
    if (seconds > 0 && n / t <= items / seconds) return false;
    seconds = t;
    items = n;
    bytes = nb;
    return true;
  }
};

int Fail(const Status& s) { return cli::Fail("shardkit-bench", s); }

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Peak resident memory (VmHWM) since the last ResetPeakRss().
uint64_t PeakRssBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return 0;
}
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// Cold: every shard out of the page cache (no root needed). Object storage
// is read anew by every loader.
Status EvictDataset(const std::string& dir) {
  SK_ASSIGN_OR_RETURN(Env * env, Env::ForPath(dir));
  if (env->remote()) return Status::OK();
  SK_ASSIGN_OR_RETURN(Manifest m, ReadManifest(dir));
  for (const ShardInfo& s : m.shards) SK_RETURN_IF_ERROR(EvictFromPageCache(JoinPath(dir, s.file)));
  return Status::OK();
}

// Cold rounds: before each, the shards leave the page cache and a fresh
// loader is opened (a mapping keeps its pages resident); no warm-up. Records
// the storage bytes read and the loader's own bytes of the fastest round.
Status MeasureCold(const std::string& dir, const LoaderOptions& opt, uint64_t batches, int repeat,
                   Row* row) {
  // Bytes storage delivered: the page cache's misses (/proc/self/io), or
  // what object storage sent.
  SK_ASSIGN_OR_RETURN(Env * env, Env::ForPath(dir));
  auto StorageReadBytes = [env] {
    return env->remote() ? env->counters().bytes : shardkit::StorageReadBytes();
  };
  FastestRound best;
  LoaderStats st;
  uint64_t storage = 0;
  for (int round = 0; round < std::max(1, repeat); ++round) {
    SK_RETURN_IF_ERROR(EvictDataset(dir));
    const uint64_t io0 = StorageReadBytes();
    const auto t0 = std::chrono::steady_clock::now();
    SK_ASSIGN_OR_RETURN(auto loader, Loader::Open(dir, opt));
    const double open_seconds = SecondsSince(t0);
    const uint64_t io_open = StorageReadBytes();  // manifest, headers and every shard's index
    uint64_t n = 0, nb = 0, epoch = 0;
    const auto t_first = std::chrono::steady_clock::now();
    double first_batch = 0;
    SK_RETURN_IF_ERROR(loader->StartEpoch(epoch));
    for (uint64_t i = 0; i < batches; ++i) {
      const Batch* b = nullptr;
      SK_RETURN_IF_ERROR(loader->Next(&b));
      if (b == nullptr) {
        SK_RETURN_IF_ERROR(loader->StartEpoch(++epoch));
        SK_RETURN_IF_ERROR(loader->Next(&b));
      }
      if (i == 0) first_batch = SecondsSince(t_first);
      n += b->size;
      nb += b->sample_bytes() * b->size;
    }
    const double t = SecondsSince(t0);
    const uint64_t io = StorageReadBytes() - io_open;
    // Each round reads the same batches with a fresh loader: the records it
    // finds are the same ones, the samples it replaces are more.
    const LoaderStats round_stats = loader->stats();
    row->corrupt_records = std::max(row->corrupt_records, round_stats.corrupt_records);
    row->samples_replaced += round_stats.samples_replaced;
    if (best.Offer(n, nb, t)) {
      st = loader->stats();
      storage = io;
      row->open_seconds = open_seconds;
      row->first_batch_seconds = first_batch;
      row->open_storage_bytes = io_open - io0;
    }
  }
  row->storage_bytes = storage;
  row->record_bytes = st.bytes_read;
  row->reads_in_flight = st.mean_reads_in_flight;
  row->peak_reads_in_flight = st.peak_reads_in_flight;
  row->read_latency_ms = st.mean_read_latency_s * 1e3;
  row->peak_read_ahead_bytes = st.peak_read_ahead_bytes;
  FillRow(opt, best, st, row);
  return Status::OK();
}

// Batches a warm-up may go on for the loader's fill choice to settle.
constexpr uint64_t kMaxSettleBatches = 20000;

// Times `repeat` rounds of `batches` batches on one loader, after the warm-up.
Status Measure(const std::string& dir, LoaderOptions opt, uint64_t warmup, uint64_t batches,
               int repeat, Row* row) {
  const auto t_open = std::chrono::steady_clock::now();
  SK_ASSIGN_OR_RETURN(auto loader, Loader::Open(dir, opt));
  row->open_seconds = SecondsSince(t_open);
  uint64_t epoch = 0;
  SK_RETURN_IF_ERROR(loader->StartEpoch(epoch));
  auto next = [&](const Batch** b) -> Status {
    SK_RETURN_IF_ERROR(loader->Next(b));
    if (*b == nullptr) {  // wrap into the next epoch
      SK_RETURN_IF_ERROR(loader->StartEpoch(++epoch));
      SK_RETURN_IF_ERROR(loader->Next(b));
    }
    return Status::OK();
  };
  const Batch* b = nullptr;
  // The warm-up, and on until the loader has measured filling alone and with
  // its team (BatchFiller's choice), so the rounds time the way it settles on,
  // not its first tries (more workers timed slower than fewer, on a new
  // machine), within a bound.
  uint64_t warm = 0;
  for (; warm < warmup || (!loader->stats().fill_settled && warm < kMaxSettleBatches); ++warm) {
    SK_RETURN_IF_ERROR(next(&b));
  }
  row->warmup_batches = warm;
  FastestRound best;
  LoaderStats st;
  for (int round = 0; round < std::max(1, repeat); ++round) {
    loader->ResetStats();
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t n = 0, nb = 0;
    for (uint64_t i = 0; i < batches; ++i) {
      SK_RETURN_IF_ERROR(next(&b));
      n += b->size;
      nb += b->sample_bytes() * b->size;
    }
    const LoaderStats round_stats = loader->stats();
    if (best.Offer(n, nb, SecondsSince(t0))) st = round_stats;
  }
  // The loader's counts since it opened (ResetStats leaves them): warm-up and rounds.
  const LoaderStats total = loader->stats();
  row->corrupt_records = total.corrupt_records;
  row->samples_replaced = total.samples_replaced;
  FillRow(opt, best, st, row);
  return Status::OK();
}

void FillRow(const LoaderOptions& opt, const FastestRound& best, const LoaderStats& st, Row* row) {
  const double secs = best.seconds;
  const uint64_t images = best.items, bytes = best.bytes;
  row->workers = opt.workers;
  row->images = images;
  row->seconds = secs;
  row->images_per_sec = images / secs;
  row->mb_per_sec = bytes / secs / 1e6;
  const double per = st.samples > 0 ? 1e6 / st.samples : 0;
  row->read_us = st.read_s * per;
  row->decompress_us = st.decompress_s * per;
  row->decode_us = st.decode_s * per;
  row->transform_us = st.transform_s * per;
  row->wait_fraction = st.wait_s / secs;
  const uint64_t fills = st.fills_alone + st.fills_shared;
  row->shared_fills = fills > 0 ? double(st.fills_shared) / fills : 0;
}

// The physical reference: how fast one core turns the dataset's stored bytes,
// already in memory, into pixels with no loader at all: a full-size
// libjpeg-turbo decode for JPEG records, zstd decompression for raw blocks.
// A reference's timing: `warmup` untimed passes over the data, then `repeat`
// rounds of passes lasting at least a second each. pass() adds one pass's
// records and output bytes to its arguments, or fails.
Status TimeReference(int repeat, int warmup,
                     const std::function<Status(uint64_t*, uint64_t*)>& pass, FastestRound* best) {
  uint64_t n = 0, nb = 0;
  for (int i = 0; i < warmup; ++i) SK_RETURN_IF_ERROR(pass(&n, &nb));
  for (int round = 0; round < std::max(1, repeat); ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    double t = 0;
    n = nb = 0;
    do {
      SK_RETURN_IF_ERROR(pass(&n, &nb));
      t = SecondsSince(t0);
    } while (t < 1.0);
    best->Offer(n, nb, t);
  }
  return Status::OK();
}

int RunReference(const std::string& dir, uint64_t max_records, int repeat, bool json) {
  auto ds = Dataset::Open(dir);
  if (!ds.ok()) return Fail(ds.status());
  const Manifest& m = (*ds)->manifest();
  ReadScratch scratch;
  FastestRound best;
  Status st;
  std::string what;
  if (m.record.kind == format::RecordKind::kJpeg) {
    what = "libjpeg-turbo full-size decode";
    std::vector<std::string> jpegs;  // each record read (its checksum checked) once
    std::vector<std::pair<size_t, uint32_t>> where;
    for (size_t s = 0; s < (*ds)->num_shards() && jpegs.size() < max_records; ++s) {
      const ShardReader& r = (*ds)->shard(s);
      for (uint32_t i = 0; i < r.num_records() && jpegs.size() < max_records; ++i) {
        std::string_view p;
        Status rs = r.ReadRecord(i, &scratch, &p);
        if (!rs.ok()) return Fail(rs);
        jpegs.emplace_back(p);
        where.emplace_back(s, i);
      }
    }
    JpegDecoder dec;
    DecodedRegion out;
    st = TimeReference(
        repeat, /*warmup=*/0,
        [&](uint64_t* n, uint64_t* nb) {
          for (size_t k = 0; k < jpegs.size(); ++k) {
            const std::string& j = jpegs[k];
            Status decoded = dec.Decode(reinterpret_cast<const uint8_t*>(j.data()), j.size(),
                                        DecodeRequest{}, &out);
            if (!decoded.ok()) {
              return Status::Corruption((*ds)->shard(where[k].first).Where(where[k].second) + ": " +
                                        decoded.message());
            }
            *nb += out.image.pixels.size();
            ++*n;
          }
          return Status::OK();
        },
        &best);
  } else {
    what = "zstd decompression of the shards' blocks";
    struct Blk {
      std::string stored;
      uint32_t raw_size, records;
    };
    std::vector<Blk> blocks;
    uint64_t records = 0;
    for (size_t s = 0; s < (*ds)->num_shards() && records < max_records; ++s) {
      const ShardReader& r = (*ds)->shard(s);
      auto file = Env::Default()->OpenForReads(r.path());
      if (!file.ok()) return Fail(file.status());
      for (uint32_t b = 0; b < r.num_blocks() && records < max_records; ++b) {
        const auto& e = r.block(b);
        if (e.codec != static_cast<uint32_t>(format::Codec::kZstd)) continue;
        // Read once through the reader (stored CRC, decompression, bounds):
        // the timed passes below then decompress bytes known to be good.
        std::string_view raw;
        if (Status rs = r.ReadBlock(b, &scratch, &raw); !rs.ok()) return Fail(rs);
        Blk blk{std::string(e.stored_size, '\0'), e.raw_size, e.num_records};
        if (Status rs = (*file)->Read(e.offset, e.stored_size, blk.stored.data()); !rs.ok())
          return Fail(rs);
        records += e.num_records;
        blocks.push_back(std::move(blk));
      }
    }
    // The readers' own decompression (shard/shard_reader.h), so the probe
    // measures the loader's code path.
    ReadScratch dscratch;
    std::vector<char> out;
    st = TimeReference(
        repeat, /*warmup=*/1,
        [&](uint64_t* n, uint64_t* nb) {
          for (const Blk& b : blocks) {
            SK_RETURN_IF_ERROR(DecompressBlock(b.stored, b.raw_size, &dscratch, &out));
            *nb += out.size();
            *n += b.records;
          }
          return Status::OK();
        },
        &best);
  }
  if (!st.ok()) return Fail(st);
  const double secs = best.seconds, bytes = static_cast<double>(best.bytes);
  const uint64_t records = best.items;
  const double rate = records / std::max(secs, 1e-9);
  if (json) {
    nlohmann::json j = {{"reference", what},
                        {"records", records},
                        {"seconds", secs},
                        {"records_per_sec", rate},
                        {"mb_per_sec", bytes / std::max(secs, 1e-9) / 1e6}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "reference (%s, 1 core, from memory): %llu records in %.3f s = %.0f records/s, %.1f MB/s "
        "out\n",
        what.c_str(), (unsigned long long)records, secs, rate, bytes / std::max(secs, 1e-9) / 1e6);
  }
  return 0;
}

// `shardkit-bench loader`'s flags, and the loader options they fill.
struct LoaderFlags {
  std::string dir, workers_list = "1,2,4,8,16";
  std::string csv, plot, title;
  int batch = 32, size = 224, prefetch = 4, repeat = 3;
  uint64_t batches = 200, warmup = 20, seed = 0, cache_mb = 256;
  bool json = false, no_mmap = false, cold = false;
  int read_depth = LoaderOptions().read_depth;
  int read_ahead_mb = static_cast<int>(LoaderOptions().read_ahead_bytes >> 20);
  uint64_t skip_budget = 100;
  std::string cache_dir;
  uint64_t cache_limit = 0;
  LoaderOptions opt;                 // the enum flags write here directly; ToOptions() the rest
  CLI::Option* transform = nullptr;  // --transform, to tell whether it was given
};

// `shardkit-bench reference`'s flags.
struct ReferenceFlags {
  std::string dir;
  uint64_t max_records = 5000;
  int repeat = 3;
  bool json = false;
};

// `shardkit-bench loader`'s flags.
CLI::App* AddLoaderCommand(CLI::App& app, LoaderFlags* f) {
  auto* cmd =
      app.add_subcommand("loader", "images/s of the loader per worker count, with stage breakdown");
  cmd->add_option("DIR", f->dir, "dataset directory, or s3://BUCKET/PREFIX or http(s)://HOST/PATH")
      ->required();
  cmd->add_option("--workers", f->workers_list, "comma-separated worker counts")
      ->capture_default_str();
  cmd->add_option("--batch", f->batch, "batch size")
      ->capture_default_str()
      ->check(cli::IntIn(1, 1 << 20));
  f->opt.transform.kind = TransformKind::kTrain;
  f->transform = cli::AddEnum(cmd, "--transform", &f->opt.transform.kind, kTransformKindNames,
                              "the JPEG transform (not given: train, or none for raw records)");
  cmd->add_option("--size", f->size, "output side for JPEG transforms")
      ->capture_default_str()
      ->check(cli::IntIn(1, 4096));
  cmd->add_option("--batches", f->batches, "batches timed per worker count")
      ->capture_default_str()
      ->check(cli::IntIn(1, 1ll << 40));
  cmd->add_option("--warmup", f->warmup, "batches before timing starts")
      ->capture_default_str()
      ->check(cli::IntIn(0, 1ll << 40));
  cmd->add_option("--repeat", f->repeat, "timed rounds per worker count; the fastest counts")
      ->capture_default_str()
      ->check(cli::IntIn(1, 1000));
  cli::AddEnum(cmd, "--direct", &f->opt.direct_reads, kDirectReadsNames,
               "full shuffle: read records with O_DIRECT (auto: when the dataset is larger than "
               "free memory)");
  cmd->add_flag("--no-mmap", f->no_mmap, "read shards with pread instead of read-only mappings");
  cmd->add_option(
         "--read-depth", f->read_depth,
         "reads kept in flight ahead of the decoders (0: each worker reads what it decodes; "
         "default 32, or 128 for an s3:// or http(s):// dataset)")
      ->check(cli::IntIn(0, 1024));
  cmd->add_option("--read-ahead-mb", f->read_ahead_mb, "memory the reads ahead may hold")
      ->capture_default_str()
      ->check(cli::IntIn(1, 65536));
  cmd->add_option("--cache-dir", f->cache_dir,
                  "object storage: read through a node cache in this directory (the first round "
                  "fills it; with --cold the page cache is not dropped for it)");
  cli::AddBytes(cmd, "--cache-limit", &f->cache_limit,
                "the node cache's size at most (default: none)");
  cmd->add_flag("--cold", f->cold,
                "evict the shards from the page cache before each round (posix_fadvise); report "
                "bytes read from "
                "storage per byte of record delivered, and peak resident memory");
  cmd->add_option("--prefetch", f->prefetch, "ring slots")
      ->capture_default_str()
      ->check(cli::IntIn(1, 1024));
  cli::AddEnum(cmd, "--shuffle", &f->opt.shuffle, kShuffleModeNames, "sample order");
  cli::AddEnum(cmd, "--layout", &f->opt.layout, kLayoutNames, "batch memory layout");
  cmd->add_option("--seed", f->seed, "seed")->capture_default_str()->check(cli::Unsigned());
  cmd->add_option("--cache-mb", f->cache_mb,
                  "decompressed block cache (MB); small values measure streaming")
      ->capture_default_str()
      ->check(cli::IntIn(1, 1 << 24));
  cli::AddEnum(cmd, "--on-corrupt", &f->opt.corrupt_policy, kCorruptPolicyNames,
               "a corrupt record ends the run, or is replaced and counted");
  cmd->add_option("--skip-budget", f->skip_budget,
                  "with --on-corrupt skip: fail after this many corrupt records or blocks (a "
                  "corrupt compressed block counts once)")
      ->capture_default_str()
      ->check(cli::IntIn(0, 1ll << 40));
  cmd->add_option("--csv", f->csv, "write the table as CSV");
  cmd->add_option("--plot", f->plot, "write an SVG plot of images/s against workers");
  cmd->add_option("--title", f->title, "plot title");
  cmd->add_flag("--json", f->json, "print the results as JSON (and nothing else on stdout)");
  return cmd;
}

CLI::App* AddReferenceCommand(CLI::App& app, ReferenceFlags* f) {
  auto* ref = app.add_subcommand(
      "reference", "one core, from memory: full-size JPEG decode or zstd decompression");
  ref->add_option("DIR", f->dir, "dataset directory")->required();
  ref->add_option("--max-records", f->max_records, "records to use at most")
      ->capture_default_str()
      ->check(cli::IntIn(1, 1ll << 40));
  ref->add_flag("--json", f->json, "print JSON");
  ref->add_option("--repeat", f->repeat, "rounds of at least a second; the fastest counts")
      ->capture_default_str()
      ->check(cli::IntIn(1, 1000));
  return ref;
}

// The loader options the flags ask for, the worker count aside.
LoaderOptions ToOptions(const LoaderFlags& f) {
  LoaderOptions opt = f.opt;
  opt.batch_size = f.batch;
  opt.prefetch = f.prefetch;
  opt.seed = f.seed;
  opt.block_cache_bytes = f.cache_mb << 20;
  opt.mmap = !f.no_mmap;
  opt.read_depth = f.read_depth;
  opt.read_ahead_bytes = static_cast<uint64_t>(f.read_ahead_mb) << 20;
  opt.cache_dir = f.cache_dir;
  opt.cache_limit = f.cache_limit;
  opt.transform.size = f.size;
  opt.skip_budget = f.skip_budget;
  return opt;
}

// Throughput relative to the first (fewest workers) row, in workers' worth.
double Speedup(const Row& r, const Row& base) {
  return r.images_per_sec / base.images_per_sec * base.workers;
}

void PrintTableHeader(FILE* out, const LoaderFlags& f, const LoaderOptions& opt) {
  std::fprintf(out,
               "shardkit-bench loader %s: batch %d, transform %s, size %d, best of %d rounds of "
               "%llu batches per point\n",
               f.dir.c_str(), f.batch, TransformKindName(opt.transform.kind), f.size, f.repeat,
               (unsigned long long)f.batches);
  std::fprintf(
      out, "%7s %12s %9s %8s %10s | %8s %8s %8s %8s  (us/img, all workers) %6s | %10s %10s %9s\n",
      "workers", "images/s", "MB/s", "speedup", "efficiency", "read", "zstd", "decode", "xform",
      "wait", f.cold ? "storage MB" : "", f.cold ? "read/rec" : "", "peak RSS");
}

void PrintTableRow(FILE* out, const LoaderFlags& f, const Row& r, const Row& base) {
  const int w = r.workers;
  const double speedup = Speedup(r, base);
  char cold_cols[64] = "";
  if (f.cold) {
    std::snprintf(cold_cols, sizeof(cold_cols), "%10.1f %9.2fx", r.storage_bytes / 1e6,
                  r.record_bytes > 0 ? double(r.storage_bytes) / r.record_bytes : 0.0);
  }
  std::fprintf(
      out,
      "%7d %12.0f %9.1f %8.2f %9.0f%% | %8.1f %8.1f %8.1f %8.1f  %21s %5.0f%% | %21s %6.0f MB\n", w,
      r.images_per_sec, r.mb_per_sec, speedup, 100 * speedup / w, r.read_us, r.decompress_us,
      r.decode_us, r.transform_us, "", 100 * r.wait_fraction, cold_cols, r.peak_rss / 1e6);
  if (f.cold && r.peak_reads_in_flight > 0) {
    const std::string depth =
        f.read_depth == kAutoReadDepth ? "auto" : std::to_string(f.read_depth);
    std::fprintf(out,
                 "        reads in flight: mean %.1f, peak %llu (depth %s); %.2f ms per read; "
                 "read-ahead memory peak %.1f MB of %d MB\n",
                 r.reads_in_flight, (unsigned long long)r.peak_reads_in_flight, depth.c_str(),
                 r.read_latency_ms, r.peak_read_ahead_bytes / 1e6, f.read_ahead_mb);
  }
  if (f.cold) {
    std::fprintf(out, "        open %.3f s, first batch %.3f s after it\n", r.open_seconds,
                 r.first_batch_seconds);
  }
  std::fflush(out);
}

// One worker count: the fastest round (warm, or --cold), with peak resident memory.
Status MeasureWorkers(const LoaderFlags& f, const LoaderOptions& opt, Row* r) {
  ResetPeakRss();
  Status s = f.cold ? MeasureCold(f.dir, opt, f.batches, f.repeat, r)
                    : Measure(f.dir, opt, f.warmup, f.batches, f.repeat, r);
  r->peak_rss = PeakRssBytes();
  if (!s.ok()) return s;
  if (r->samples_replaced > 0) {
    std::fprintf(stderr,
                 "shardkit-bench: %llu corrupt record(s) found, %llu sample(s) replaced by others "
                 "with %d worker(s) (--on-corrupt skip)\n",
                 (unsigned long long)r->corrupt_records, (unsigned long long)r->samples_replaced,
                 opt.workers);
  }
  return Status::OK();
}

Status WriteCsv(const std::string& path, const std::vector<Row>& rows) {
  const Row& base = rows.front();
  std::ostringstream c;
  c << "workers,images_per_sec,mb_per_sec,speedup,efficiency,read_us,decompress_us,decode_us,"
       "transform_us,"
       "wait_fraction,storage_bytes,record_bytes,peak_rss_bytes\n";
  for (const Row& r : rows) {
    c << r.workers << "," << r.images_per_sec << "," << r.mb_per_sec << "," << Speedup(r, base)
      << "," << Speedup(r, base) / r.workers << "," << r.read_us << "," << r.decompress_us << ","
      << r.decode_us << "," << r.transform_us << "," << r.wait_fraction << "," << r.storage_bytes
      << "," << r.record_bytes << "," << r.peak_rss << "\n";
  }
  return WriteOutputFile(path, c.str());
}

// images/s against workers, with the ideal (linear from the first row) line.
Status WritePlot(const LoaderFlags& f, const LoaderOptions& opt, const std::vector<Row>& rows) {
  const Row& base = rows.front();
  LinePlot p;
  p.title = f.title.empty()
                ? "shardkit loader: " + std::string(TransformKindName(opt.transform.kind)) +
                      " transform, batch " + std::to_string(f.batch)
                : f.title;
  p.x_label = "loader workers";
  p.y_label = "images/s";
  p.log2_x = true;
  PlotSeries meas{"measured", {}, {}, false}, ideal{"ideal (linear)", {}, {}, true};
  for (const Row& r : rows) {
    meas.x.push_back(r.workers);
    meas.y.push_back(r.images_per_sec);
    ideal.x.push_back(r.workers);
    ideal.y.push_back(base.images_per_sec / base.workers * r.workers);
  }
  p.series = {meas, ideal};
  return WriteOutputFile(f.plot, p.ToSvg());
}

void PrintJson(const std::vector<Row>& rows, bool cold) {
  const Row& base = rows.front();
  nlohmann::json j = nlohmann::json::array();
  for (const Row& r : rows) {
    j.push_back({{"workers", r.workers},
                 {"images_per_sec", r.images_per_sec},
                 {"mb_per_sec", r.mb_per_sec},
                 {"speedup", Speedup(r, base)},
                 {"efficiency", Speedup(r, base) / r.workers},
                 {"read_us", r.read_us},
                 {"decompress_us", r.decompress_us},
                 {"decode_us", r.decode_us},
                 {"transform_us", r.transform_us},
                 {"wait_fraction", r.wait_fraction},
                 {"images", r.images},
                 {"seconds", r.seconds},
                 {"corrupt_records", r.corrupt_records},
                 {"samples_replaced", r.samples_replaced},
                 {"corrupt_skipped", r.samples_replaced},  // samples_replaced's old name
                 {"peak_rss_bytes", r.peak_rss},
                 {"open_seconds", r.open_seconds},
                 {"warmup_batches", r.warmup_batches},
                 {"shared_fills", r.shared_fills}});
    if (cold) {
      j.back()["storage_bytes"] = r.storage_bytes;
      j.back()["open_storage_bytes"] = r.open_storage_bytes;
      j.back()["first_batch_seconds"] = r.first_batch_seconds;
      j.back()["record_bytes"] = r.record_bytes;
      j.back()["storage_per_record_byte"] =
          r.record_bytes > 0 ? double(r.storage_bytes) / r.record_bytes : 0.0;
      j.back()["reads_in_flight_mean"] = r.reads_in_flight;
      j.back()["reads_in_flight_peak"] = r.peak_reads_in_flight;
      j.back()["read_latency_ms"] = r.read_latency_ms;
      j.back()["read_ahead_bytes_peak"] = r.peak_read_ahead_bytes;
    }
  }
  std::printf("%s\n", j.dump(1).c_str());
}

// `shardkit-bench loader`: a table row per worker count as it is measured
// (on stderr with --json), then the CSV, the plot and the JSON asked for.
int RunLoader(const LoaderFlags& f) {
  LoaderOptions opt = ToOptions(f);
  auto workers_or = cli::ParseIntList(f.workers_list, 1, kMaxLoaderWorkers, "--workers");
  if (!workers_or.ok()) return Fail(workers_or.status());
  const std::vector<int> workers = *workers_or;
  for (size_t i = 1; i < workers.size(); ++i) {
    if (std::find(workers.begin(), workers.begin() + i, workers[i]) != workers.begin() + i) {
      return Fail(Status::InvalidArgument("--workers " + f.workers_list + ": " +
                                          std::to_string(workers[i]) +
                                          " is listed twice; name each worker count once"));
    }
  }
  if (Status v = ValidateLoaderOptions(opt); !v.ok()) return Fail(v);
  // Outputs are checked before the minutes of measuring: a file that cannot
  // be written, or one inside the dataset being read, ends the run now.
  for (const std::string* out : {&f.csv, &f.plot}) {
    if (out->empty()) continue;
    Status s = CheckOutputFile(*out);
    if (s.ok()) s = CheckOutputOutsideInputs(*out, {f.dir, f.cache_dir});
    if (s.ok() && out == &f.plot) s = CheckOutputOutsideInputs(f.plot, {f.csv});
    if (!s.ok()) return Fail(s);
  }
  // Raw records take only transform none (TransformApplies): the default
  // follows them; a transform asked for is the loader's to refuse.
  if (f.transform->count() == 0) {
    auto manifest = ReadManifest(f.dir);
    if (manifest.ok() && !TransformApplies(manifest->record.kind, opt.transform.kind)) {
      opt.transform.kind = TransformKind::kNone;
    }
  }

  // Open once before printing anything, so that a bad dataset or options
  // that cannot be met (memory) end with one error line.
  opt.workers = workers.front();
  if (auto probe = Loader::Open(f.dir, opt); !probe.ok()) return Fail(probe.status());
  std::vector<Row> rows;
  FILE* out = f.json ? stderr : stdout;
  PrintTableHeader(out, f, opt);
  for (int w : workers) {
    opt.workers = w;
    Row r;
    if (Status s = MeasureWorkers(f, opt, &r); !s.ok()) return Fail(s);
    rows.push_back(r);
    PrintTableRow(out, f, r, rows.front());
  }
  if (!f.csv.empty()) {
    if (Status s = WriteCsv(f.csv, rows); !s.ok()) return Fail(s);
  }
  if (!f.plot.empty()) {
    if (Status s = WritePlot(f, opt, rows); !s.ok()) return Fail(s);
  }
  if (f.json) PrintJson(rows, f.cold);
  return 0;
}

int Run(int argc, char** argv, bool parse_only) {
  CLI::App app{"shardkit-bench: measure the loader"};
  app.require_subcommand(1);
  LoaderFlags loader_flags;
  ReferenceFlags ref_flags;
  AddLoaderCommand(app, &loader_flags);
  CLI::App* ref = AddReferenceCommand(app, &ref_flags);
  if (int rc = cli::Parse(app, argc, argv, "shardkit-bench"); rc >= 0) return rc;
  if (parse_only) return 0;
  if (*ref)
    return RunReference(ref_flags.dir, ref_flags.max_records, ref_flags.repeat, ref_flags.json);
  return RunLoader(loader_flags);
}

}  // namespace

int BenchMain(int argc, char** argv, bool parse_only) { return Run(argc, argv, parse_only); }

}  // namespace shardkit

#ifndef SHARDKIT_NO_MAIN
int main(int argc, char** argv) {
  return shardkit::cli::FlushedExit("shardkit-bench",
                                    shardkit::BenchMain(argc, argv, /*parse_only=*/false));
}
#endif
