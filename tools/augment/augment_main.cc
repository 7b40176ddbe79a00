// shardkit-augment: synthesise bigMNIST (an MNIST-format set enlarged by random
// affine and elastic transforms, then replicated) into shards or HDF5, whole
// or one part of it (--part I/N) at a time. The command line only: the
// source, its augmentation and the Packer that writes it are ingest/'s.
#include "base/openmp.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/humanize.h"
#include "base/version.h"
#include "image/codec.h"
#include "ingest/bigmnist_source.h"
#include "ingest/hdf5.h"
#include "ingest/packer.h"
#include "shard/parts.h"
#include "shard/shard.h"
#include "storage/output_file.h"
#include "storage/system.h"
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

void PrintSummary(const PackOptions& po, const PartRange& range, const Plan& plan,
                  const PackSummary& sum) {
  const std::string resumed = sum.resumed_shards > 0 ? " (" + std::to_string(sum.resumed_shards) +
                                                           " shards kept from an interrupted run)"
                                                     : "";
  if (po.part_count == 0) {
    std::printf(
        "bigmnist: %llu samples (%llu source x %llu versions x %llu copies) in %llu "
        "shards at %s%s\n",
        (unsigned long long)plan.total(), (unsigned long long)plan.n,
        (unsigned long long)plan.versions, (unsigned long long)plan.copies,
        (unsigned long long)sum.shards, po.out.c_str(), resumed.c_str());
  } else {
    std::printf("bigmnist part %u/%u: samples %llu..%llu of %llu in shards %llu..%llu at %s%s\n",
                po.part_index, po.part_count, (unsigned long long)range.first_record,
                (unsigned long long)range.end_record - 1, (unsigned long long)plan.total(),
                (unsigned long long)range.first_shard, (unsigned long long)range.end_shard - 1,
                po.out.c_str(), resumed.c_str());
  }
  std::printf("  %s raw, %s on disk (zstd level %d), %.1f s, %s samples/s\n",
              FormatBytes(static_cast<double>(range.records() * plan.item())).c_str(),
              FormatBytes(static_cast<double>(sum.bytes_out)).c_str(), po.zstd_level, sum.seconds,
              FormatCount(sum.seconds > 0 ? range.records() / sum.seconds : 0).c_str());
}

// The output as shards, through the Packer: its order, bytes, parts and
// resume are the Packer's, as for every source.
int WriteShards(BigMnistSource* source, PackOptions po, const PartRange& range) {
  PhaseProgress progress;
  PackEvents events;
  events.report = [](const std::string& msg) { std::fprintf(stderr, "  %s\n", msg.c_str()); };
  events.progress = [&progress](const std::string& phase, uint64_t done, uint64_t total,
                                uint64_t bytes,
                                bool final) { progress(phase, done, total, bytes, final); };
  PackSummary sum;
  Status s = Pack(source, po, events, &sum);
  if (!s.ok()) return Fail(s);
  PrintSummary(po, range, source->plan(), sum);
  return 0;
}

// The output as one HDF5 file (another format, not a dataset: no Packer).
int WriteHdf5(const std::string& out, BigMnistSource* source, int threads) {
  const Plan& plan = source->plan();
  {
    Progress augment("augment", plan.n * plan.versions, "samples");
    source->AugmentTable(
        [&](uint64_t done, uint64_t) { augment.Update(done, done * plan.item()); });
    augment.Finish();
  }
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
      BigMnistScratch scratch;
#pragma omp for
      for (int64_t k = 0; k < static_cast<int64_t>(n); ++k) {
        const uint8_t* px = source->Make(first + k, &scratch, &labels[k]);
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
  // As many rows as there are source images, at most; a grid this tool can
  // hold and PNG can carry (each side under 2^16 pixels, 256 MiB in all).
  samples = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(samples), plan.n));
  const uint64_t grid_w = uint64_t(cols) * (uint64_t(plan.w) * zoom + pad) + pad;
  const uint64_t grid_h = uint64_t(samples) * (uint64_t(plan.h) * zoom + pad) + pad;
  if (samples < 1 || grid_w >= (1u << 16) || grid_h >= (1u << 16) ||
      grid_w * grid_h > (256u << 20)) {
    return Fail(Status::InvalidArgument(
        "preview: " + std::to_string(samples) + " rows of " + std::to_string(cols) + " images of " +
        std::to_string(plan.w) + " x " + std::to_string(plan.h) + " px make a grid of " +
        std::to_string(grid_w) + " x " + std::to_string(grid_h) +
        " px, too large for a preview; use fewer --samples or --versions"));
  }
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
  if (s.ok()) s = WriteOutputFile(out, png);
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

// The output's count and bytes must be numbers this toolkit can hold: samples
// under 2^40 (a trillion), raw bytes under 2^60.
Status CheckOutputSize(const Plan& plan) {
  const double samples = double(plan.n) * double(plan.versions) * double(plan.copies);
  const double bytes = samples * double(plan.item());
  if (samples < double(1ull << 40) && bytes < double(1ull << 60)) return Status::OK();
  return Status::InvalidArgument(
      std::to_string(plan.n) + " source images x --versions " + std::to_string(plan.versions) +
      " x --copies " + std::to_string(plan.copies) + " is " + FormatCount(samples) + " samples (" +
      FormatBytes(bytes) + "), more than a dataset can hold (2^40 samples, 2^60 bytes)");
}

// `settings`: the pack's (PackSettings), which name the recipe's ranges.
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
          {"transforms", settings.value("transforms", json::object())},
          {"settings", settings},
          {"argv", json::parse(ArgvJson(argc, argv))}};
}

// bigmnist, after the options are checked.
int RunBigmnist(const Options& o, IdxDataset src, int argc, char** argv) {
  const Plan& plan = o.plan;
  // The part's place, for the summary (the Packer plans it alike), and any
  // refusal of --part before the images are augmented.
  auto range = SplitIntoParts(o.part, plan.total(), RecordsPerShard(o.shard_size, plan.item()));
  if (!range.ok()) return Fail(range.status());
  PackOptions po;
  po.out = o.out;
  po.shard_size = o.shard_size;
  po.zstd_level = o.level;
  po.block_size = o.block_size;
  po.threads = o.threads;
  po.force = o.force;
  po.part_index = o.part.index;
  po.part_count = o.part.whole() ? 0 : o.part.count;
  BigMnistSource source(o.src_dir, std::move(src), plan, o.threads);
  if (o.fmt == "hdf5") return WriteHdf5(o.out, &source, o.threads);
  auto settings = PackSettings(source, po);
  if (!settings.ok()) return Fail(settings.status());
  po.settings = *settings;
  po.created_by = Dump(CreatedBy(o, json::parse(*settings), argc, argv));
  return WriteShards(&source, po, *range);
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
  {  // the output, before the source is read: writable, and not the source
    const std::string& out = *preview ? o.png : o.out;
    Status s = *preview          ? CheckOutputFile(out)
               : o.fmt == "hdf5" ? ResolveRegularOutput(out).status()
                                 : CheckOutputDir(out);
    // The two IDX files read (plain or .gz), not the folder: an output beside
    // them is fine.
    std::vector<std::string> inputs;
    for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"}) {
      inputs.push_back(JoinPath(o.src_dir, name));
      inputs.push_back(JoinPath(o.src_dir, std::string(name) + ".gz"));
    }
    if (s.ok()) s = CheckOutputOutsideInputs(out, inputs);
    if (!s.ok()) return Fail(s);
  }
  auto src = ReadBigMnistImages(o.src_dir);
  if (!src.ok())
    return Fail(src.status(),
                "Fashion-MNIST: --src /usr/share/datasets/fashion-mnist (dataset-fashion-mnist)");
  o.plan.n = o.limit > 0 ? std::min<uint64_t>(o.limit, src->count()) : src->count();
  o.plan.h = src->height;
  o.plan.w = src->width;
  if (o.threads <= 0) o.threads = omp_get_max_threads();
  if (*preview) return Preview(*src, o.plan, o.samples, o.png);
  if (Status s = CheckMemory(o.plan); !s.ok()) return Fail(s);
  if (Status s = CheckOutputSize(o.plan); !s.ok()) return Fail(s);
  return RunBigmnist(o, std::move(*src), argc, argv);
}

}  // namespace shardkit

#ifndef SHARDKIT_NO_MAIN
int main(int argc, char** argv) {
  return shardkit::cli::FlushedExit("shardkit-augment",
                                    shardkit::AugmentMain(argc, argv, /*parse_only=*/false));
}
#endif
