// shardkit-augment: synthesise bigMNIST (an MNIST-format set enlarged by random
// affine and elastic transforms, then replicated) into shards or HDF5.
#include "base/openmp.h"

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/format.h"
#include "base/random.h"
#include "base/system.h"
#include "base/version.h"
#include "image/codec.h"
#include "ingest/hdf5.h"
#include "ingest/idx_file.h"
#include "shard/shard.h"
#include "tools/augment/augment.h"
#include "tools/common/cli.h"
#include "tools/common/progress.h"

namespace shardkit {
namespace {

int Fail(const Status& s, const std::string& hint = "") {
  return cli::Fail("shardkit-augment", s, hint);
}

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

struct Plan {
  uint64_t n = 0, versions = 6, copies = 200, seed = 0;
  int h = 28, w = 28;
  AugmentParams params;
  uint64_t total() const { return n * versions * copies; }
  size_t item() const { return static_cast<size_t>(h) * w; }
};

// Every (source, version) augmented once, in parallel: V x N images in memory,
// whatever the number of copies.
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
      SampleTransform t =
          DrawTransform(plan.params, {plan.seed, index, version, 0}, plan.w, plan.h);
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

// Output position -> (source index, version, copy), a seeded bijection: the
// copies of one sample land far apart, in every shard.
struct Order {
  KeyedPermutation perm;
  const Plan* plan;
  void At(uint64_t pos, uint64_t* index, uint64_t* version, uint64_t* copy) const {
    const uint64_t q = perm(pos), per_copy = plan->n * plan->versions;
    *copy = q / per_copy;
    const uint64_t r = q % per_copy;
    *index = r / plan->versions;
    *version = r % plan->versions;
  }
};

std::string Fingerprint(const Plan& p, const std::string& src, uint64_t records_per_shard,
                        int level) {
  nlohmann::json j = {{"src", src},
                      {"n", p.n},
                      {"versions", p.versions},
                      {"copies", p.copies},
                      {"seed", p.seed},
                      {"records_per_shard", records_per_shard},
                      {"zstd_level", level},
                      {"rotation_deg", p.params.rotation_deg},
                      {"shear", p.params.shear},
                      {"translate_px", p.params.translate_px},
                      {"scale_min", p.params.scale_min},
                      {"scale_max", p.params.scale_max},
                      {"flip_prob", p.params.flip_prob},
                      {"elastic_alpha", p.params.elastic_alpha},
                      {"elastic_sigma", p.params.elastic_sigma}};
  return j.dump(-1, ' ', false,
                nlohmann::json::error_handler_t::replace);  // paths may hold any bytes
}

int WriteShards(const std::string& out, const IdxDataset& src, const Plan& plan,
                const std::vector<uint8_t>& aug, uint64_t shard_size, int level, int threads,
                bool force, const std::string& src_dir, const std::string& created_by) {
  const uint64_t per_shard = std::max<uint64_t>(1, shard_size / (plan.item() + 40));
  const uint64_t nshards = (plan.total() + per_shard - 1) / per_shard;
  const std::string fp = Fingerprint(plan, src_dir, per_shard, level);
  const std::string fp_path = JoinPath(out, ".augment-plan.json");
  // One writer per directory: a second augment (or pack) into OUT fails at once.
  Status locked = CreateDirs(out);
  if (!locked.ok()) return Fail(locked);
  auto lock = DirLock::Acquire(out);
  if (!lock.ok()) return Fail(lock.status());
  // Resume: a directory holding this same plan (and no manifest) keeps the
  // shards it had finished; anything else starts over.
  bool resume = false;
  if (!FileExists(JoinPath(out, kManifestName)) && FileExists(fp_path)) {
    auto old = ReadFileToString(fp_path, 1 << 20);
    resume = old.ok() && *old == fp;
  }
  if (!resume) {
    Status s = PrepareOutputDir(out, force);
    if (!s.ok()) return Fail(s);
    s = WriteFileAtomic(fp_path, fp);
    if (!s.ok()) return Fail(s);
  }
  Order order{KeyedPermutation(plan.total(), plan.seed, 0xC0B1E5), &plan};
  std::vector<ShardInfo> infos(nshards);
  std::vector<Status> errors(nshards);
  std::atomic<uint64_t> written{0}, reused{0};
  Progress progress("write shards", plan.total(), "samples");
  ShardWriterOptions so;
  so.compression = CompressionMode::kZstd;
  so.zstd_level = level;
  so.kind = format::RecordKind::kRawU8;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t si = 0; si < static_cast<int64_t>(nshards); ++si) {
    const uint64_t s = static_cast<uint64_t>(si);
    const uint64_t begin = s * per_shard, end = std::min(plan.total(), begin + per_shard);
    const std::string final_path = JoinPath(out, ShardFileName(s));
    ShardInfo& info = infos[s];
    info.file = ShardFileName(s);
    if (resume && FileExists(final_path)) {
      auto r = ShardReader::Open(final_path);
      auto crc = FileCrc32c(final_path);
      if (r.ok() && crc.ok() && (*r)->num_records() == end - begin) {
        info.records = end - begin;
        info.bytes = (*r)->file_size();
        info.raw_bytes = (end - begin) * plan.item();
        info.crc32c = *crc;
        reused.fetch_add(1);
        written.fetch_add(end - begin);
        continue;
      }
    }
    auto w = ShardWriter::Create(JoinPath(out, TempShardFileName(s)), so);
    if (!w.ok()) {
      errors[s] = w.status();
      continue;
    }
    char key[64];
    Status st;
    for (uint64_t p = begin; p < end && st.ok(); ++p) {
      uint64_t index, version, copy;
      order.At(p, &index, &version, &copy);
      std::snprintf(key, sizeof(key), "%llu/%llu/%llu", (unsigned long long)index,
                    (unsigned long long)version, (unsigned long long)copy);
      const uint8_t* px = aug.data() + (index * plan.versions + version) * plan.item();
      st = (*w)->Add(std::string_view(reinterpret_cast<const char*>(px), plan.item()),
                     src.labels.data[index], key);
      if (((p - begin) & 8191) == 8191) {
        const uint64_t d = written.fetch_add(8192) + 8192;
        progress.Update(d, d * plan.item());
      }
    }
    written.fetch_add((end - begin) % 8192);
    if (st.ok()) st = (*w)->Finish(&info);
    w->reset();
    if (st.ok()) st = PublishShard(out, s);
    if (!st.ok()) {
      RemoveFile(JoinPath(out, TempShardFileName(s))).IgnoreError();
      errors[s] = st;
      continue;
    }
  }
  progress.Update(plan.total(), plan.total() * plan.item());
  progress.Finish();
  for (const Status& e : errors) {
    if (!e.ok()) return Fail(e, "rerun the same command to resume: finished shards are kept");
  }
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {plan.h, plan.w, 1};
  uint8_t max_label = 0;
  for (uint8_t l : src.labels.data) max_label = std::max(max_label, l);
  for (int c = 0; c <= max_label; ++c) m.classes.push_back(std::to_string(c));
  m.shards = infos;
  m.created_by = created_by;
  m.created_at = UtcNow();
  Status s = SyncDir(out);
  if (s.ok()) s = WriteManifest(out, m);
  if (!s.ok()) return Fail(s);
  RemoveFile(fp_path).IgnoreError();
  std::printf(
      "bigmnist: %llu samples (%llu source x %llu versions x %llu copies) in %llu shards at %s%s\n"
      "  %s raw, %s on disk (zstd level %d), %.1f s\n",
      (unsigned long long)plan.total(), (unsigned long long)plan.n,
      (unsigned long long)plan.versions, (unsigned long long)plan.copies,
      (unsigned long long)nshards, out.c_str(),
      reused > 0
          ? (" (" + std::to_string(reused.load()) + " shards kept from an interrupted run)").c_str()
          : "",
      FormatBytes(static_cast<double>(m.raw_bytes())).c_str(),
      FormatBytes(static_cast<double>(m.bytes())).c_str(), level, progress.elapsed_seconds());
  return 0;
}

int WriteHdf5(const std::string& out, const IdxDataset& src, const Plan& plan,
              const std::vector<uint8_t>& aug, int threads) {
  auto w = Hdf5ImageWriter::Create(out, plan.total(), plan.h, plan.w);
  if (!w.ok()) return Fail(w.status());
  Order order{KeyedPermutation(plan.total(), plan.seed, 0xC0B1E5), &plan};
  const uint64_t chunk = 1 << 16;
  std::vector<uint8_t> images(chunk * plan.item());
  std::vector<int32_t> labels(chunk);
  Progress progress("write hdf5", plan.total(), "samples");
  for (uint64_t first = 0; first < plan.total(); first += chunk) {
    const uint64_t n = std::min(chunk, plan.total() - first);
#pragma omp parallel for num_threads(threads)
    for (int64_t k = 0; k < static_cast<int64_t>(n); ++k) {
      uint64_t index, version, copy;
      order.At(first + k, &index, &version, &copy);
      std::memcpy(images.data() + k * plan.item(),
                  aug.data() + (index * plan.versions + version) * plan.item(), plan.item());
      labels[k] = src.labels.data[index];
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

// A grid: each row a source digit followed by its versions, 3x enlarged.
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
                       DrawTransform(plan.params, {plan.seed, uint64_t(r), uint64_t(c - 1), 0},
                                     plan.w, plan.h),
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

void AddTransformFlags(CLI::App* cmd, AugmentParams* p) {
  cmd->add_option("--rotation", p->rotation_deg, "max rotation, degrees (uniform in [-r, r])")
      ->capture_default_str()
      ->check(cli::RealIn(0, 180));
  cmd->add_option("--shear", p->shear, "max x-shear factor")
      ->capture_default_str()
      ->check(cli::RealIn(0, 10));
  cmd->add_option("--translate", p->translate_px, "max shift, pixels, each axis")
      ->capture_default_str()
      ->check(cli::RealIn(0, 1000));
  cmd->add_option("--scale-min", p->scale_min, "min scale")
      ->capture_default_str()
      ->check(cli::RealIn(0, 100, true));
  cmd->add_option("--scale-max", p->scale_max, "max scale")
      ->capture_default_str()
      ->check(cli::RealIn(0, 100, true));
  cmd->add_option("--flip-prob", p->flip_prob, "probability of a horizontal flip")
      ->capture_default_str()
      ->check(cli::RealIn(0, 1));
  cmd->add_option("--elastic-alpha", p->elastic_alpha,
                  "elastic displacement scale, pixels (0: off)")
      ->capture_default_str()
      ->check(cli::RealIn(0, 1000));
  cmd->add_option("--elastic-sigma", p->elastic_sigma, "elastic smoothing sigma, pixels")
      ->capture_default_str()
      ->check(cli::RealIn(0, 100, true));
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
  Plan plan;
  std::string src_dir, out, fmt = "shards";
  int threads = 0, level = 1, samples = 8;
  uint64_t limit = 0, shard_size = 256ull << 20;
  bool force = false;
  auto* big =
      app.add_subcommand("bigmnist", "augment an MNIST-format training set and replicate it");
  big->add_option("--src", src_dir,
                  "folder with train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz]")
      ->required();
  big->add_option("OUT", out, "output dataset directory (or .h5 file with --format hdf5)")
      ->required();
  big->add_option("--versions", plan.versions, "augmented versions of each source image")
      ->capture_default_str()
      ->check(cli::IntIn(1, 10000));
  big->add_option("--copies", plan.copies, "copies of the augmented set")
      ->capture_default_str()
      ->check(cli::IntIn(1, 1000000));
  big->add_option("--seed", plan.seed, "seed of every random choice")
      ->capture_default_str()
      ->check(cli::Unsigned());
  big->add_option("--threads", threads, "threads (0: all cores)")
      ->check(cli::IntIn(0, cli::kMaxThreads));
  big->add_option("--format", fmt, "shards | hdf5")
      ->capture_default_str()
      ->check(cli::OneOf({"shards", "hdf5"}));
  big->add_option("--shard-size", shard_size, "target raw bytes per shard")
      ->capture_default_str()
      ->check(cli::IntIn(4096, 1ll << 40));
  big->add_option("--zstd-level", level, "zstd level of the shards")
      ->capture_default_str()
      ->check(cli::IntIn(1, 19));
  big->add_option("--limit", limit, "use only the first N source images (0: all)")
      ->check(cli::IntIn(0, 1ll << 40));
  big->add_flag("--force", force, "replace an existing dataset in OUT");
  AddTransformFlags(big, &plan.params);
  std::string png;
  auto* preview =
      app.add_subcommand("preview", "draw source digits next to their augmented versions (PNG)");
  preview->add_option("--src", src_dir, "folder with the MNIST-format training IDX files")
      ->required();
  preview->add_option("OUT", png, "PNG file")->required();
  preview->add_option("--samples", samples, "source digits (rows)")
      ->capture_default_str()
      ->check(cli::IntIn(1, 1000));
  preview->add_option("--versions", plan.versions, "versions (columns after the source)")
      ->capture_default_str()
      ->check(cli::IntIn(1, 100));
  preview->add_option("--seed", plan.seed, "seed")->capture_default_str()->check(cli::Unsigned());
  AddTransformFlags(preview, &plan.params);
  if (int rc = cli::Parse(app, argc, argv, "shardkit-augment"); rc >= 0) return rc;
  if (parse_only) return 0;

  if (plan.versions < 1 || plan.copies < 1)
    return Fail(Status::InvalidArgument("--versions and --copies must be >= 1"));
  if (plan.params.scale_min <= 0 || plan.params.scale_max < plan.params.scale_min) {
    return Fail(Status::InvalidArgument("need 0 < --scale-min <= --scale-max"));
  }
  if (plan.params.elastic_alpha != 0 && plan.params.elastic_sigma <= 0) {
    return Fail(Status::InvalidArgument("--elastic-sigma must be positive"));
  }
  auto src = ReadSource(src_dir);
  if (!src.ok())
    return Fail(src.status(),
                "Fashion-MNIST: --src /usr/share/datasets/fashion-mnist (dataset-fashion-mnist)");
  plan.n = limit > 0 ? std::min<uint64_t>(limit, src->count()) : src->count();
  plan.h = src->height;
  plan.w = src->width;
  if (threads <= 0) threads = omp_get_max_threads();
  // The augmented set (N x versions images) is held in memory before it is
  // replicated into shards: refuse what this machine cannot hold.
  const double aug_bytes = double(plan.n) * double(plan.versions) * double(plan.item());
  const double memory = double(PhysicalMemoryBytes());
  if (!*preview && memory > 0 && aug_bytes > memory / 2) {
    return Fail(Status::InvalidArgument(
        "--versions " + std::to_string(plan.versions) + " x " + std::to_string(plan.n) +
        " source images needs " + FormatBytes(aug_bytes) +
        " in memory, more than half of this machine's " + FormatBytes(memory)));
  }
  if (*preview) return Preview(*src, plan, samples, png);

  nlohmann::json created = {{"tool", "shardkit-augment bigmnist"},
                            {"version", kVersion},
                            {"src", src_dir},
                            {"source_images", plan.n},
                            {"versions", plan.versions},
                            {"copies", plan.copies},
                            {"seed", plan.seed},
                            {"samples", plan.total()},
                            {"transforms",
                             {{"rotation_deg", plan.params.rotation_deg},
                              {"shear", plan.params.shear},
                              {"translate_px", plan.params.translate_px},
                              {"scale", {plan.params.scale_min, plan.params.scale_max}},
                              {"flip_prob", plan.params.flip_prob},
                              {"elastic_alpha", plan.params.elastic_alpha},
                              {"elastic_sigma", plan.params.elastic_sigma},
                              {"resampling", "bilinear"}}}};
  nlohmann::json argv_json = nlohmann::json::parse(ArgvJson(argc, argv));
  created["argv"] = argv_json;
  std::vector<uint8_t> aug = AugmentAll(*src, plan, threads);
  if (fmt == "hdf5") return WriteHdf5(out, *src, plan, aug, threads);
  if (fmt != "shards") return Fail(Status::InvalidArgument("--format must be shards or hdf5"));
  return WriteShards(out, *src, plan, aug, shard_size, level, threads, force, src_dir,
                     created.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace shardkit

#ifndef SHARDKIT_NO_MAIN
int main(int argc, char** argv) { return shardkit::AugmentMain(argc, argv, /*parse_only=*/false); }
#endif
