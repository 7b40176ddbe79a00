// shardkit-augment: synthesise bigMNIST (an MNIST-format set enlarged by random
// affine and elastic transforms, then replicated) into shards or HDF5, whole
// or one part of it (--part I/N) at a time.
#include "base/openmp.h"

#include <CLI/CLI.hpp>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/crc32c.h"
#include "base/format.h"
#include "base/system.h"
#include "base/version.h"
#include "image/codec.h"
#include "ingest/hdf5.h"
#include "ingest/idx_file.h"
#include "shard/parts.h"
#include "shard/shard.h"
#include "tools/augment/augment.h"
#include "tools/augment/bigmnist_plan.h"
#include "tools/common/cli.h"
#include "tools/common/progress.h"

namespace shardkit {
namespace {

using nlohmann::json;

int Fail(const Status& s, const std::string& hint = "") {
  return cli::Fail("shardkit-augment", s, hint);
}

// Paths and other bytes in JSON are replaced, never thrown on.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz] in dir.
Result<IdxDataset> ReadSource(const std::string& dir) {
  auto find = [&](const std::string& stem) -> std::string {
    for (const char* ext : {"", ".gz"}) {
      if (FileExists(JoinPath(dir, stem + ext))) return JoinPath(dir, stem + ext);
    }
    return "";
  };
  const std::string images = find("train-images-idx3-ubyte"),
                    labels = find("train-labels-idx1-ubyte");
  if (images.empty() || labels.empty()) {
    return Status::NotFound(dir +
                            ": no train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz]");
  }
  SK_ASSIGN_OR_RETURN(IdxDataset ds, ReadIdxDataset(images, labels));
  if (ds.channels != 1)
    return Status::InvalidArgument(images + ": bigMNIST needs single-channel images");
  return ds;
}

// Every (source, version) augmented once, in parallel: V x N images in memory,
// whatever the number of copies. Identical copies only.
std::vector<uint8_t> AugmentAll(const IdxDataset& src, const Plan& plan, int threads) {
  const uint64_t count = plan.n * plan.versions;
  std::vector<uint8_t> out(count * plan.item());
  Progress progress("augment", count, "samples");
  std::atomic<uint64_t> done{0};
#pragma omp parallel num_threads(threads)
  {
    AugmentScratch scratch;
#pragma omp for schedule(dynamic, 256)
    for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) {
      const uint64_t index = static_cast<uint64_t>(k) / plan.versions,
                     version = static_cast<uint64_t>(k) % plan.versions;
      SampleTransform t = DrawTransform(plan.params, plan.Key(index, version, 0), plan.w, plan.h);
      ApplyTransform(src.images.data.data() + index * plan.item(), plan.w, plan.h, t,
                     out.data() + k * plan.item(), &scratch);
      const uint64_t d = done.fetch_add(1) + 1;
      if ((d & 4095) == 0) progress.Update(d, d * plan.item());
    }
  }
  progress.Update(count, count * plan.item());
  progress.Finish();
  return out;
}

// One thread's buffers for RecordMaker.
struct RecordScratch {
  AugmentScratch augment;
  std::vector<uint8_t> pixels;
  char key[64];
};

// The records of the output, by position: pixels, label and key. Identical
// copies come from AugmentAll's table; distinct copies are computed record by
// record and never held, so memory does not grow with the output.
// Thread-safe; each thread brings its own RecordScratch.
class RecordMaker {
 public:
  // table: AugmentAll's output, or null for distinct copies. Both outlive this.
  RecordMaker(const IdxDataset& src, const Plan& plan, const std::vector<uint8_t>* table)
      : src_(src), plan_(plan), table_(table), order_(plan) {}

  // Record `pos`: its label in *label, its key ("index/version/copy") in
  // s->key, and its pixels (plan.item() bytes, valid until s is used again).
  const uint8_t* Make(uint64_t pos, RecordScratch* s, int32_t* label) const {
    uint64_t index, version, copy;
    order_.At(pos, &index, &version, &copy);
    std::snprintf(s->key, sizeof(s->key), "%llu/%llu/%llu", (unsigned long long)index,
                  (unsigned long long)version, (unsigned long long)copy);
    *label = src_.labels.data[index];
    if (table_ != nullptr)
      return table_->data() + (index * plan_.versions + version) * plan_.item();
    const SampleTransform t =
        DrawTransform(plan_.params, plan_.Key(index, version, copy), plan_.w, plan_.h);
    s->pixels.resize(plan_.item());
    ApplyTransform(src_.images.data.data() + index * plan_.item(), plan_.w, plan_.h, t,
                   s->pixels.data(), &s->augment);
    return s->pixels.data();
  }

 private:
  const IdxDataset& src_;
  const Plan& plan_;
  const std::vector<uint8_t>* table_;
  Order order_;
};

// The ranges the recipe draws from, for created_by and the settings.
json TransformsJson(const AugmentParams& p) {
  if (p.recipe == Recipe::kRcc) {
    return {{"views", {"original", "rotation", "translation", "scale", "hflip", "elastic"}},
            {"rotation_deg", kRcc.rotation_deg},
            {"translate_frac", kRcc.translate_frac},
            {"scale", {kRcc.scale_min, kRcc.scale_max}},
            {"elastic_alpha", kRcc.elastic_alpha},
            {"elastic_sigma", kRcc.elastic_sigma},
            {"elastic", "torchvision"},
            {"resampling", p.interpolation == Interpolation::kNearest
                               ? "nearest (rotation, scale), bilinear (elastic)"
                               : "bilinear"}};
  }
  return {{"rotation_deg", p.rotation_deg},
          {"shear", p.shear},
          {"translate_px", p.translate_px},
          {"scale", {p.scale_min, p.scale_max}},
          {"flip_prob", p.flip_prob},
          {"elastic_alpha", p.elastic_alpha},
          {"elastic_sigma", p.elastic_sigma},
          {"resampling", NameOf(kInterpolationNames, p.interpolation)}};
}

// Every setting that decides the output's bytes: the source's content (the
// CRC32C of the pixels and labels used, not its path), the counts, the seed,
// the recipe and its ranges, the copies' mode, the shard layout and
// compression, the format and the tool's version. Not the threads or the
// part. json objects keep their keys sorted, so the dump is canonical.
json Settings(const IdxDataset& src, const Plan& p, const std::string& fmt, uint64_t per_shard,
              int level, uint64_t block_size) {
  const uint32_t pixels_crc = crc32c::Value(src.images.data.data(), p.n * p.item()),
                 labels_crc = crc32c::Value(src.labels.data.data(), p.n);
  return {{"tool", "shardkit-augment bigmnist"},
          {"version", kVersion},
          {"source",
           {{"images", p.n},
            {"height", p.h},
            {"width", p.w},
            {"pixels_crc32c", Crc32cHex(pixels_crc)},
            {"labels_crc32c", Crc32cHex(labels_crc)}}},
          {"versions", p.versions},
          {"copies", p.copies},
          {"seed", p.seed},
          {"recipe", NameOf(kRecipeNames, p.params.recipe)},
          {"transforms", TransformsJson(p.params)},
          {"distinct_copies", p.distinct_copies},
          {"format", fmt},
          {"records_per_shard", per_shard},
          {"zstd_level", level},
          {"block_size", block_size}};
}

// An output directory made ready and locked against a second writer. resume:
// it holds an unfinished run of this same fingerprint, whose finished shards
// are kept.
struct Output {
  std::unique_ptr<DirLock> lock;
  bool resume = false;
};

Result<Output> OpenOutput(const std::string& out, const std::string& fingerprint, bool force) {
  const std::string fp_path = JoinPath(out, ".augment-plan.json"),
                    part_json = JoinPath(out, kPartManifestName);
  SK_RETURN_IF_ERROR(CreateDirs(out));
  Output o;
  SK_ASSIGN_OR_RETURN(o.lock, DirLock::Acquire(out));
  const bool finished = FileExists(JoinPath(out, kManifestName)) || FileExists(part_json);
  if (!finished && FileExists(fp_path)) {
    auto old = ReadFileToString(fp_path, 1 << 20);
    o.resume = old.ok() && *old == fingerprint;
  }
  if (o.resume) return o;
  // A finished part is replaced only with --force, as a finished dataset is
  // (PrepareOutputDir), and stops being one before any shard is touched.
  if (FileExists(part_json)) {
    if (!force) {
      return Status::InvalidArgument(out + " already holds a part of a dataset (" +
                                     kPartManifestName + " exists); pass --force to replace it");
    }
    SK_RETURN_IF_ERROR(RemoveFile(part_json));
    SK_RETURN_IF_ERROR(SyncDir(out));
  }
  SK_RETURN_IF_ERROR(PrepareOutputDir(out, force));
  SK_RETURN_IF_ERROR(WriteFileAtomic(fp_path, fingerprint));
  return o;
}

// What every shard of one run shares.
struct ShardJob {
  std::string out;
  const RecordMaker* maker;
  const Plan* plan;
  uint64_t per_shard;
  ShardWriterOptions options;
  bool resume;
  int inner_threads;  // computing the records of one shard
};

// Records [begin, end) appended to w in order, computed a block at a time by
// job.inner_threads threads: a part with fewer shards than threads still
// uses them all. *done counts the records behind the progress line.
Status AppendRecords(const ShardJob& job, uint64_t begin, uint64_t end, ShardWriter* w,
                     std::atomic<uint64_t>* done, Progress* progress) {
  constexpr uint64_t kBlock = 256;
  const size_t item = job.plan->item();
  std::vector<uint8_t> pixels(kBlock * item);
  std::vector<int32_t> labels(kBlock);
  std::vector<std::array<char, sizeof(RecordScratch::key)>> keys(kBlock);
  std::vector<RecordScratch> scratch(job.inner_threads);
  for (uint64_t first = begin; first < end; first += kBlock) {
    const int64_t n = static_cast<int64_t>(std::min(kBlock, end - first));
#pragma omp parallel for num_threads(job.inner_threads) if (job.inner_threads > 1)
    for (int64_t k = 0; k < n; ++k) {
      RecordScratch& s = scratch[omp_get_thread_num()];
      std::memcpy(pixels.data() + k * item, job.maker->Make(first + k, &s, &labels[k]), item);
      std::memcpy(keys[k].data(), s.key, sizeof(s.key));
    }
    for (int64_t k = 0; k < n; ++k) {
      SK_RETURN_IF_ERROR(
          w->Add(std::string_view(reinterpret_cast<const char*>(pixels.data() + k * item), item),
                 labels[k], keys[k].data()));
    }
    const uint64_t d = done->fetch_add(n) + n;
    progress->Update(d, d * item);
  }
  return Status::OK();
}

// Shard s, into *info: kept if an interrupted run of the same settings
// finished it, else written under its temporary name and published.
// *done counts the records behind the progress line.
Status WriteShard(const ShardJob& job, uint64_t s, ShardInfo* info, bool* kept,
                  std::atomic<uint64_t>* done, Progress* progress) {
  const uint64_t begin = s * job.per_shard,
                 end = std::min(job.plan->total(), begin + job.per_shard);
  const size_t item = job.plan->item();
  const std::string final_path = JoinPath(job.out, ShardFileName(s));
  info->file = ShardFileName(s);
  *kept = false;
  if (job.resume && FileExists(final_path)) {
    auto r = ShardReader::Open(final_path);
    auto crc = FileCrc32c(final_path);
    if (r.ok() && crc.ok() && (*r)->CheckIndex().ok() && (*r)->num_records() == end - begin) {
      *info = {ShardFileName(s), end - begin, (*r)->file_size(), (end - begin) * item, *crc};
      *kept = true;
      done->fetch_add(end - begin);
      return Status::OK();
    }
  }
  const std::string temp = JoinPath(job.out, TempShardFileName(s));
  SK_ASSIGN_OR_RETURN(auto w, ShardWriter::Create(temp, job.options));
  Status st = AppendRecords(job, begin, end, w.get(), done, progress);
  if (st.ok()) st = w->Finish(info);
  w.reset();
  if (st.ok()) st = PublishShard(job.out, s);
  if (!st.ok()) RemoveFile(temp).IgnoreError();
  return st;
}

// Where a run writes and what it is part of.
struct Target {
  std::string out;
  PartSpec part;
  PartRange range;
  uint64_t per_shard = 1;
  int level = 1;
  uint32_t block_size = 1;
  bool force = false;
};

// The manifest of a whole run, or part.json of a part: what the merge of
// parts needs (index, count, first record and shard, the whole's record
// count, the settings digest) beside the usual manifest.
Status WriteOutputManifest(const Target& t, const IdxDataset& src, const Plan& plan,
                           std::vector<ShardInfo> shards, const std::string& digest,
                           const std::string& created_by) {
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {plan.h, plan.w, 1};
  uint8_t max_label = 0;
  for (uint8_t l : src.labels.data) max_label = std::max(max_label, l);
  for (int c = 0; c <= max_label; ++c) m.classes.push_back(std::to_string(c));
  m.shards = std::move(shards);
  m.created_by = created_by;
  m.created_at = UtcNow();
  SK_RETURN_IF_ERROR(SyncDir(t.out));
  if (t.part.whole()) return WriteManifest(t.out, m);
  m.part = {t.part.index,        t.part.count, t.range.first_record,
            t.range.first_shard, plan.total(), digest};
  return WritePartManifest(t.out, m);
}

void PrintSummary(const Target& t, const Plan& plan, const Manifest& m, uint64_t kept,
                  double seconds) {
  const std::string resumed =
      kept > 0 ? " (" + std::to_string(kept) + " shards kept from an interrupted run)" : "";
  if (t.part.whole()) {
    std::printf(
        "bigmnist: %llu samples (%llu source x %llu versions x %llu copies) in %llu "
        "shards at %s%s\n",
        (unsigned long long)plan.total(), (unsigned long long)plan.n,
        (unsigned long long)plan.versions, (unsigned long long)plan.copies,
        (unsigned long long)t.range.shards(), t.out.c_str(), resumed.c_str());
  } else {
    std::printf("bigmnist part %u/%u: samples %llu..%llu of %llu in shards %llu..%llu at %s%s\n",
                t.part.index, t.part.count, (unsigned long long)t.range.first_record,
                (unsigned long long)t.range.end_record - 1, (unsigned long long)plan.total(),
                (unsigned long long)t.range.first_shard, (unsigned long long)t.range.end_shard - 1,
                t.out.c_str(), resumed.c_str());
  }
  std::printf("  %s raw, %s on disk (zstd level %d), %.1f s, %s samples/s\n",
              FormatBytes(static_cast<double>(m.raw_bytes())).c_str(),
              FormatBytes(static_cast<double>(m.bytes())).c_str(), t.level, seconds,
              FormatCount(seconds > 0 ? t.range.records() / seconds : 0).c_str());
}

int WriteShards(const Target& t, const IdxDataset& src, const Plan& plan, const RecordMaker& maker,
                const json& settings, int threads, const std::string& created_by) {
  const std::string digest = SettingsDigest(Dump(settings));
  const json fingerprint = {{"settings", settings},
                            {"part", {{"index", t.part.index}, {"count", t.part.count}}}};
  auto output = OpenOutput(t.out, Dump(fingerprint), t.force);
  if (!output.ok()) return Fail(output.status());
  // As many shards at once as there are threads, or as the part has shards
  // and the threads left over compute their records.
  const uint64_t nshards = t.range.shards();
  const int outer = static_cast<int>(std::min<uint64_t>(threads, nshards));
  ShardJob job{t.out, &maker, &plan, t.per_shard, {}, output->resume, threads / outer};
  if (job.inner_threads > 1) omp_set_max_active_levels(2);
  job.options.compression = CompressionMode::kZstd;
  job.options.zstd_level = t.level;
  job.options.block_size = t.block_size;
  job.options.kind = format::RecordKind::kRawU8;
  std::vector<ShardInfo> infos(nshards);
  std::vector<Status> errors(nshards);
  std::atomic<uint64_t> done{0}, kept{0};
  Progress progress("write shards", t.range.records(), "samples");
#pragma omp parallel for num_threads(outer) schedule(dynamic, 1)
  for (int64_t i = 0; i < static_cast<int64_t>(nshards); ++i) {
    bool was_kept = false;
    errors[i] = WriteShard(job, t.range.first_shard + i, &infos[i], &was_kept, &done, &progress);
    if (was_kept) kept.fetch_add(1);
  }
  progress.Update(t.range.records(), t.range.records() * plan.item());
  progress.Finish();
  for (const Status& e : errors) {
    if (!e.ok()) return Fail(e, "rerun the same command to resume: finished shards are kept");
  }
  Manifest sums;
  sums.shards = infos;
  Status s = WriteOutputManifest(t, src, plan, std::move(infos), digest, created_by);
  if (!s.ok()) return Fail(s);
  RemoveFile(JoinPath(t.out, ".augment-plan.json")).IgnoreError();
  PrintSummary(t, plan, sums, kept.load(), progress.elapsed_seconds());
  return 0;
}

int WriteHdf5(const std::string& out, const Plan& plan, const RecordMaker& maker, int threads) {
  auto w = Hdf5ImageWriter::Create(out, plan.total(), plan.h, plan.w);
  if (!w.ok()) return Fail(w.status());
  const uint64_t chunk = 1 << 16;
  std::vector<uint8_t> images(chunk * plan.item());
  std::vector<int32_t> labels(chunk);
  Progress progress("write hdf5", plan.total(), "samples");
  for (uint64_t first = 0; first < plan.total(); first += chunk) {
    const uint64_t n = std::min(chunk, plan.total() - first);
#pragma omp parallel num_threads(threads)
    {
      RecordScratch scratch;
#pragma omp for
      for (int64_t k = 0; k < static_cast<int64_t>(n); ++k) {
        const uint8_t* px = maker.Make(first + k, &scratch, &labels[k]);
        std::memcpy(images.data() + k * plan.item(), px, plan.item());
      }
    }
    Status s = (*w)->Write(first, n, images.data(), labels.data());
    if (!s.ok()) return Fail(s);
    progress.Update(first + n, (first + n) * plan.item());
  }
  Status s = (*w)->Close();
  if (!s.ok()) return Fail(s);
  progress.Finish();
  std::printf(
      "bigmnist: %llu samples written to %s (HDF5: /images uint8 N x %d x %d, /labels int32)\n",
      (unsigned long long)plan.total(), out.c_str(), plan.h, plan.w);
  return 0;
}

// A grid: each row a source digit followed by its versions (copy 0), 3x enlarged.
int Preview(const IdxDataset& src, const Plan& plan, int samples, const std::string& out) {
  const int zoom = 3, pad = 2, cols = 1 + static_cast<int>(plan.versions);
  const int cw = plan.w * zoom + pad, ch = plan.h * zoom + pad;
  Image grid;
  grid.Resize(cols * cw + pad, samples * ch + pad, 1);
  std::fill(grid.pixels.begin(), grid.pixels.end(), 128);
  AugmentScratch scratch;
  std::vector<uint8_t> cell(plan.item());
  for (int r = 0; r < samples && static_cast<uint64_t>(r) < plan.n; ++r) {
    for (int c = 0; c < cols; ++c) {
      const uint8_t* px = src.images.data.data() + r * plan.item();
      if (c > 0) {
        ApplyTransform(px, plan.w, plan.h,
                       DrawTransform(plan.params, plan.Key(r, c - 1, 0), plan.w, plan.h),
                       cell.data(), &scratch);
        px = cell.data();
      }
      for (int y = 0; y < plan.h * zoom; ++y) {
        for (int x = 0; x < plan.w * zoom; ++x) {
          grid.pixels[static_cast<size_t>(pad + r * ch + y) * grid.width + pad + c * cw + x] =
              px[(y / zoom) * plan.w + x / zoom];
        }
      }
    }
  }
  std::string png;
  Status s = EncodePng(grid, &png);
  if (s.ok()) s = WriteFileAtomic(out, png);
  if (!s.ok()) return Fail(s);
  std::printf("wrote %s: %d source digits (first column) and %llu augmented versions each\n",
              out.c_str(), samples, (unsigned long long)plan.versions);
  return 0;
}

// Everything the command line sets.
struct Options {
  Plan plan;
  std::string src_dir, out, png, fmt = "shards", part_text;
  int threads = 0, level = 1, samples = 8;
  uint64_t limit = 0, shard_size = 256ull << 20;
  // A full shuffle of a compressed dataset decompresses a block per sample:
  // smaller blocks make its batches cheaper (128 KiB: the first batch at 72M
  // records in half the time) and streamed reading dearer (128 KiB: about
  // 30% fewer samples/s per worker), so the default favours streaming.
  uint32_t block_size = 1u << 20;
  bool force = false;
  PartSpec part;
  std::vector<CLI::Option*> range_flags;  // the compose recipe's, on both subcommands
};

constexpr char kRecipeHelp[] =
    "how the versions are made. compose: each version applies every transform at once, drawn "
    "from the range flags below. rcc: 6 versions, 0 the source unchanged, then one transform "
    "each, as torchvision's: 1 rotation uniform in [-20, 20] degrees (RandomAffine(20)); "
    "2 translation round(U[-0.2 W, 0.2 W]) px across and round(U[-0.2 H, 0.2 H]) px down "
    "(RandomAffine(0, translate=(0.2, 0.2))); 3 scale uniform in [0.8, 1.2]; 4 horizontal flip, "
    "always (RandomHorizontalFlip(p=1): the view is the mirrored image); 5 elastic "
    "(ElasticTransform(alpha=30), sigma 5, both in pixels as torchvision means them). "
    "rcc's ranges are fixed: the range flags are refused with it. Resampling: --interpolation";

void AddRecipeFlags(CLI::App* cmd, Options* o) {
  cli::AddEnum(cmd, "--recipe", &o->plan.params.recipe, kRecipeNames, kRecipeHelp);
  cli::AddEnum(cmd, "--interpolation", &o->plan.params.interpolation, kInterpolationNames,
               "how rotated, sheared and scaled pixels are sampled: bilinear (the default, as "
               "before), or nearest, torchvision's default for RandomAffine (the study's); under "
               "rcc the elastic view is bilinear either way, as ElasticTransform's default is; "
               "whole-pixel shifts and flips are exact either way");
  AugmentParams* p = &o->plan.params;
  auto add = [&](CLI::Option* opt) { o->range_flags.push_back(opt->capture_default_str()); };
  add(cmd->add_option("--rotation", p->rotation_deg, "max rotation, degrees (uniform in [-r, r])")
          ->check(cli::RealIn(0, 180)));
  add(cmd->add_option("--shear", p->shear, "max x-shear factor")->check(cli::RealIn(0, 10)));
  add(cmd->add_option("--translate", p->translate_px, "max shift, pixels, each axis")
          ->check(cli::RealIn(0, 1000)));
  add(cmd->add_option("--scale-min", p->scale_min, "min scale")->check(cli::RealIn(0, 100, true)));
  add(cmd->add_option("--scale-max", p->scale_max, "max scale")->check(cli::RealIn(0, 100, true)));
  add(cmd->add_option("--flip-prob", p->flip_prob, "probability of a horizontal flip")
          ->check(cli::RealIn(0, 1)));
  add(cmd->add_option("--elastic-alpha", p->elastic_alpha,
                      "elastic displacement scale, pixels (0: off)")
          ->check(cli::RealIn(0, 1000)));
  add(cmd->add_option("--elastic-sigma", p->elastic_sigma, "elastic smoothing sigma, pixels")
          ->check(cli::RealIn(0, 100, true)));
}

CLI::Validator PartValidator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        auto p = ParsePart(s);
        return p.ok() ? "" : p.status().message();
      },
      "I/N");
}

CLI::App* AddBigmnist(CLI::App* app, Options* o) {
  auto* big =
      app->add_subcommand("bigmnist", "augment an MNIST-format training set and replicate it");
  big->add_option("--src", o->src_dir,
                  "folder with train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz]")
      ->required();
  big->add_option("OUT", o->out, "output dataset directory (or .h5 file with --format hdf5)")
      ->required();
  big->add_option("--versions", o->plan.versions, "augmented versions of each source image")
      ->capture_default_str()
      ->check(cli::IntIn(1, 10000));
  big->add_option("--copies", o->plan.copies,
                  "copies of each version: the output holds source images x versions x copies")
      ->capture_default_str()
      ->check(cli::IntIn(1, 1000000));
  big->add_flag("--distinct-copies", o->plan.distinct_copies,
                "every copy draws its own transform, keyed by (seed, source, version, copy), "
                "computed as its record is written (nothing held in memory); without it the "
                "copies of a version are identical. rcc's versions 0 (the source) and 4 (its "
                "mirror image) hold nothing random: they are the same in every copy");
  big->add_option("--seed", o->plan.seed, "seed of every random choice")
      ->capture_default_str()
      ->check(cli::Unsigned());
  big->add_option("--threads", o->threads, "threads (0: all cores); the bytes do not depend on it")
      ->check(cli::IntIn(0, cli::kMaxThreads));
  big->add_option("--format", o->fmt, "shards | hdf5")
      ->capture_default_str()
      ->check(cli::OneOf({"shards", "hdf5"}));
  big->add_option("--shard-size", o->shard_size, "target raw bytes per shard")
      ->capture_default_str()
      ->check(cli::IntIn(4096, 1ll << 40));
  big->add_option("--zstd-level", o->level, "zstd level of the shards")
      ->capture_default_str()
      ->check(cli::IntIn(1, 19));
  big->add_option("--block-size", o->block_size,
                  "target raw bytes per compressed block: what a random read decompresses")
      ->capture_default_str()
      ->check(cli::IntIn(4096, 64ll << 20));
  big->add_option("--limit", o->limit, "use only the first N source images (0: all)")
      ->check(cli::IntIn(0, 1ll << 40));
  big->add_option("--part", o->part_text,
                  "write only part I (0-based) of N of the output: the shards of the whole run's "
                  "[I*S/N, (I+1)*S/N) of S, with its file names and bytes, and part.json instead "
                  "of manifest.json; join the parts with shardkit-pack merge OUT PART...")
      ->check(PartValidator());
  big->add_flag("--force", o->force, "replace an existing dataset (or part) in OUT");
  AddRecipeFlags(big, o);
  return big;
}

CLI::App* AddPreview(CLI::App* app, Options* o) {
  auto* preview =
      app->add_subcommand("preview", "draw source digits next to their augmented versions (PNG)");
  preview->add_option("--src", o->src_dir, "folder with the MNIST-format training IDX files")
      ->required();
  preview->add_option("OUT", o->png, "PNG file")->required();
  preview->add_option("--samples", o->samples, "source digits (rows)")
      ->capture_default_str()
      ->check(cli::IntIn(1, 1000));
  preview->add_option("--versions", o->plan.versions, "versions (columns after the source)")
      ->capture_default_str()
      ->check(cli::IntIn(1, 100));
  preview->add_option("--seed", o->plan.seed, "seed")
      ->capture_default_str()
      ->check(cli::Unsigned());
  AddRecipeFlags(preview, o);
  return preview;
}

// The checks that span flags, once parsed.
Status CheckOptions(Options* o) {
  const Plan& plan = o->plan;
  if (plan.versions < 1 || plan.copies < 1)
    return Status::InvalidArgument("--versions and --copies must be >= 1");
  if (plan.params.recipe == Recipe::kRcc) {
    for (CLI::Option* f : o->range_flags) {
      if (f->count() > 0) {
        return Status::InvalidArgument(f->get_name() +
                                       " sets a range of --recipe compose; rcc's ranges are "
                                       "fixed (see --help)");
      }
    }
    if (plan.versions != kRccVersions) {
      return Status::InvalidArgument(
          "--recipe rcc makes 6 versions (the source and one per transform), not --versions " +
          std::to_string(plan.versions));
    }
  }
  if (plan.params.scale_min <= 0 || plan.params.scale_max < plan.params.scale_min)
    return Status::InvalidArgument("need 0 < --scale-min <= --scale-max");
  if (plan.params.elastic_alpha != 0 && plan.params.elastic_sigma <= 0)
    return Status::InvalidArgument("--elastic-sigma must be positive");
  if (!o->part_text.empty()) {
    SK_ASSIGN_OR_RETURN(o->part, ParsePart(o->part_text));
    if (o->fmt != "shards")
      return Status::InvalidArgument("--part writes shards; --format hdf5 is one file, made whole");
  }
  return Status::OK();
}

// The augmented set (N x versions images) of identical copies is held in
// memory before it is replicated: refuse what this machine cannot hold.
Status CheckMemory(const Plan& plan) {
  const double table = double(plan.n) * double(plan.versions) * double(plan.item());
  const double memory = double(PhysicalMemoryBytes());
  if (plan.distinct_copies || memory <= 0 || table <= memory / 2) return Status::OK();
  return Status::InvalidArgument("--versions " + std::to_string(plan.versions) + " x " +
                                 std::to_string(plan.n) + " source images needs " +
                                 FormatBytes(table) +
                                 " in memory, more than half of this "
                                 "machine's " +
                                 FormatBytes(memory) + " (--distinct-copies holds none)");
}

json CreatedBy(const Options& o, const json& settings, int argc, char** argv) {
  const Plan& plan = o.plan;
  return {{"tool", "shardkit-augment bigmnist"},
          {"version", kVersion},
          {"src", o.src_dir},
          {"source_images", plan.n},
          {"versions", plan.versions},
          {"copies", plan.copies},
          {"seed", plan.seed},
          {"samples", plan.total()},
          {"recipe", NameOf(kRecipeNames, plan.params.recipe)},
          {"distinct_copies", plan.distinct_copies},
          {"transforms", TransformsJson(plan.params)},
          {"settings", settings},
          {"argv", json::parse(ArgvJson(argc, argv))}};
}

// bigmnist, after the options are checked.
int RunBigmnist(const Options& o, const IdxDataset& src, int argc, char** argv) {
  const Plan& plan = o.plan;
  const uint64_t per_shard = std::max<uint64_t>(1, o.shard_size / (plan.item() + 40));
  Target t{o.out, o.part, {}, per_shard, o.level, o.block_size, o.force};
  auto range = SplitIntoParts(o.part, plan.total(), per_shard);
  if (!range.ok()) return Fail(range.status());
  t.range = *range;
  const json settings = Settings(src, plan, o.fmt, per_shard, o.level, o.block_size);
  std::vector<uint8_t> table;
  if (!plan.distinct_copies) table = AugmentAll(src, plan, o.threads);
  RecordMaker maker(src, plan, plan.distinct_copies ? nullptr : &table);
  if (o.fmt == "hdf5") return WriteHdf5(o.out, plan, maker, o.threads);
  return WriteShards(t, src, plan, maker, settings, o.threads,
                     Dump(CreatedBy(o, settings, argc, argv)));
}

}  // namespace
}  // namespace shardkit

namespace shardkit {

// The whole tool; with parse_only it stops after the command line is parsed
// and checked (the command-line fuzz target calls it so).
int AugmentMain(int argc, char** argv, bool parse_only) {
  CLI::App app{
      "shardkit-augment: synthesise bigMNIST (60,000 x 6 versions x 200 copies = 72,000,000 "
      "samples)"};
  app.require_subcommand(1);
  Options o;
  AddBigmnist(&app, &o);
  CLI::App* preview = AddPreview(&app, &o);
  if (int rc = cli::Parse(app, argc, argv, "shardkit-augment"); rc >= 0) return rc;
  if (parse_only) return 0;
  if (Status s = CheckOptions(&o); !s.ok()) return Fail(s);
  auto src = ReadSource(o.src_dir);
  if (!src.ok())
    return Fail(src.status(),
                "Fashion-MNIST: --src /usr/share/datasets/fashion-mnist (dataset-fashion-mnist)");
  o.plan.n = o.limit > 0 ? std::min<uint64_t>(o.limit, src->count()) : src->count();
  o.plan.h = src->height;
  o.plan.w = src->width;
  if (o.threads <= 0) o.threads = omp_get_max_threads();
  if (*preview) return Preview(*src, o.plan, o.samples, o.png);
  if (Status s = CheckMemory(o.plan); !s.ok()) return Fail(s);
  return RunBigmnist(o, *src, argc, argv);
}

}  // namespace shardkit

#ifndef SHARDKIT_NO_MAIN
int main(int argc, char** argv) { return shardkit::AugmentMain(argc, argv, /*parse_only=*/false); }
#endif
