// shardkit-pack: pack ImageNet trees, IDX files and HDF5 arrays into shard
// datasets; verify, inspect and extract from them.
#include "base/openmp.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "base/format.h"
#include "base/version.h"
#include "shard/shard.h"
#include "tools/common/cli.h"
#include "tools/common/progress.h"
#include "tools/pack/hdf5_pack.h"
#include "tools/pack/idx_file.h"
#include "tools/pack/imagenet_pack.h"

namespace shardkit {
namespace {

constexpr int kExitBadData = cli::kExitBadData;
constexpr int kExitError = cli::kExitError;

int Fail(const Status& s, const std::string& hint = "") {
  return cli::Fail("shardkit-pack", s, hint);
}

void Report(const std::string& msg) { std::fprintf(stderr, "  %s\n", msg.c_str()); }

std::string CreatedBy(const std::string& tool, const std::string& argv_json,
                      const nlohmann::json& options) {
  nlohmann::json j;
  j["tool"] = tool;
  j["version"] = kVersion;
  j["argv"] = nlohmann::json::parse(argv_json);
  j["options"] = options;
  return j.dump(-1, ' ', false,
                nlohmann::json::error_handler_t::replace);  // paths may hold any bytes
}

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t c = s.find(',', pos);
    if (c == std::string::npos) c = s.size();
    out.push_back(s.substr(pos, c - pos));
    pos = c + 1;
  }
  return out;
}

int RunIdx(const std::string& images, const std::string& labels, const std::string& out,
           uint64_t shard_size, const std::string& class_names, bool force,
           const std::string& argv_json) {
  auto ds = ReadIdxDataset(images, labels);
  if (!ds.ok())
    return Fail(ds.status(),
                "pass MNIST-format files: --images *-images-idx3-ubyte[.gz] --labels "
                "*-labels-idx1-ubyte[.gz]");
  uint8_t max_label = 0;
  for (uint8_t l : ds->labels.data) max_label = std::max(max_label, l);
  std::vector<std::string> classes;
  if (!class_names.empty()) {
    classes = SplitComma(class_names);
    if (classes.size() <= max_label) {
      return Fail(Status::InvalidArgument("--class-names lists " + std::to_string(classes.size()) +
                                          " classes but the labels go up to " +
                                          std::to_string(max_label)));
    }
  } else {
    for (int c = 0; c <= max_label; ++c) classes.push_back(std::to_string(c));
  }
  DatasetWriterOptions wo;
  wo.shard_size = shard_size;
  wo.overwrite = force;
  wo.shard.compression = CompressionMode::kZstd;
  wo.shard.kind = format::RecordKind::kRawU8;
  wo.num_classes = classes.size();
  wo.raw_record_size = ds->images.item_size();
  auto writer = DatasetWriter::Create(out, wo);
  if (!writer.ok()) return Fail(writer.status());
  const uint64_t n = ds->count(), item = ds->images.item_size();
  Progress progress("pack idx", n, "records");
  char key[32];
  for (uint64_t i = 0; i < n; ++i) {
    std::snprintf(key, sizeof(key), "%08llu", static_cast<unsigned long long>(i));
    std::string_view payload(reinterpret_cast<const char*>(ds->images.data.data() + i * item),
                             item);
    Status s = (*writer)->Add(payload, ds->labels.data[i], key);
    if (!s.ok()) return Fail(s);
    if ((i & 4095) == 0) progress.Update(i, i * item);
  }
  progress.Update(n, n * item);
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {ds->height, ds->width, ds->channels};
  m.classes = classes;
  m.created_by = CreatedBy("shardkit-pack idx", argv_json,
                           {{"images", images}, {"labels", labels}, {"shard_size", shard_size}});
  Status s = (*writer)->Finish(m);
  if (!s.ok()) return Fail(s);
  progress.Finish();
  auto written = ReadManifest(out);
  if (!written.ok()) return Fail(written.status());
  std::printf("packed %llu records (%dx%dx%d, %zu classes) into %zu shard(s) in %s: %s raw -> %s\n",
              static_cast<unsigned long long>(n), ds->height, ds->width, ds->channels,
              classes.size(), written->shards.size(), out.c_str(),
              FormatBytes(written->raw_bytes()).c_str(), FormatBytes(written->bytes()).c_str());
  return 0;
}

int RunImageNet(ImageNetPackOptions o) {
  ImageNetPackSummary sum;
  Status s = PackImageNet(o, Report, &sum);
  if (!s.ok()) {
    return Fail(s, o.strict ? "rerun without --strict to skip bad files and report them" : "");
  }
  std::printf(
      "packed %llu of %llu files (%llu classes) into %llu shard(s) in %s\n"
      "  %s read, %s written, %.1f s: %.0f files/s, %s/s\n"
      "  converted: %llu CMYK, %llu PNG; re-encoded: %llu; skipped (bad): %llu; empty class "
      "folders: %llu\n",
      (unsigned long long)sum.packed, (unsigned long long)sum.files_seen,
      (unsigned long long)sum.classes, (unsigned long long)sum.shards, o.out.c_str(),
      FormatBytes(sum.bytes_in).c_str(), FormatBytes(sum.bytes_out).c_str(), sum.seconds,
      sum.packed / std::max(sum.seconds, 1e-9),
      FormatBytes(sum.bytes_in / std::max(sum.seconds, 1e-9)).c_str(),
      (unsigned long long)sum.converted_cmyk, (unsigned long long)sum.converted_png,
      (unsigned long long)sum.reencoded, (unsigned long long)sum.bad,
      (unsigned long long)sum.empty_classes);
  if (sum.unsafe_members + sum.link_members + sum.oversized_members + sum.bad_inner_tars > 0) {
    std::printf(
        "  archive members skipped: %llu unsafe paths, %llu links or special files, %llu over the "
        "size limit, %llu unreadable class tars\n",
        (unsigned long long)sum.unsafe_members, (unsigned long long)sum.link_members,
        (unsigned long long)sum.oversized_members, (unsigned long long)sum.bad_inner_tars);
  }
  return 0;
}

int RunVerify(const std::string& dir, int threads) {
  VerifyReport r;
  uint64_t problems = 0;
  Status s = VerifyDataset(
      dir, threads,
      [&](const std::string& msg) {
        ++problems;
        std::fprintf(stderr, "BAD %s\n", msg.c_str());
      },
      &r);
  if (!s.ok()) {
    // A manifest that is there but damaged is bad data; anything else (no
    // manifest, not a regular file, unreadable) is an error.
    cli::Fail("shardkit-pack", s);
    return s.IsCorruption() ? kExitBadData : kExitError;
  }
  if (r.ok()) {
    std::printf("OK %s: %llu records in %llu shards, %s, every checksum matches\n", dir.c_str(),
                (unsigned long long)r.records, (unsigned long long)r.shards,
                FormatBytes(r.bytes).c_str());
    return 0;
  }
  std::printf("FAILED %s: %llu of %llu shards bad, %llu of %llu records bad\n", dir.c_str(),
              (unsigned long long)r.shards_bad, (unsigned long long)r.shards,
              (unsigned long long)r.records_bad, (unsigned long long)r.records);
  return kExitBadData;
}

// One line per shard: file, bytes, crc32c (what slurm/stage.sh reads).
int RunListShards(const std::string& dir) {
  auto m = ReadManifest(dir);
  if (!m.ok()) return Fail(m.status());
  for (const auto& s : m->shards) {
    std::printf("%s\t%llu\t%s\n", s.file.c_str(), (unsigned long long)s.bytes,
                Crc32cHex(s.crc32c).c_str());
  }
  return 0;
}

int RunChecksum(const std::vector<std::string>& files) {
  int rc = 0;
  for (const auto& f : files) {
    auto crc = FileCrc32c(f);
    auto size = FileSize(f);
    if (!crc.ok() || !size.ok()) {
      rc = Fail(crc.ok() ? size.status() : crc.status());
      continue;
    }
    std::printf("%s\t%llu\t%s\n", Crc32cHex(*crc).c_str(), (unsigned long long)*size, f.c_str());
  }
  return rc;
}

int RunInspect(const std::string& dir, bool json) {
  auto ds = Dataset::Open(dir);
  if (!ds.ok())
    return Fail(ds.status(), "run 'shardkit-pack verify " + dir + "' for a full report");
  const Manifest& m = (*ds)->manifest();
  std::vector<uint64_t> hist(m.classes.size(), 0);
  uint64_t unlabeled = 0;
  for (size_t s = 0; s < (*ds)->num_shards(); ++s) {
    const ShardReader& r = (*ds)->shard(s);
    for (uint32_t i = 0; i < r.num_records(); ++i) {
      int32_t l = r.record(i).label;
      if (l >= 0 && static_cast<size_t>(l) < hist.size())
        hist[l]++;
      else
        unlabeled++;
    }
  }
  const double ratio = m.bytes() > 0 ? double(m.raw_bytes()) / m.bytes() : 0;
  if (json) {
    nlohmann::json j;
    j["records"] = m.records();
    j["classes"] = m.classes.size();
    j["shards"] = m.shards.size();
    j["bytes"] = m.bytes();
    j["raw_bytes"] = m.raw_bytes();
    j["compression_ratio"] = ratio;
    j["kind"] = RecordKindName(m.record.kind);
    if (!m.record.shape.empty()) j["shape"] = m.record.shape;
    nlohmann::json h = nlohmann::json::object();
    for (size_t c = 0; c < hist.size(); ++c) h[m.classes[c]] = hist[c];
    j["class_histogram"] = h;
    if (unlabeled) j["unlabeled"] = unlabeled;
    j["created_at"] = m.created_at;
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("dataset   %s\n", dir.c_str());
  std::printf("kind      %s", RecordKindName(m.record.kind));
  if (!m.record.shape.empty()) {
    std::printf(" %lldx%lldx%lld", (long long)m.record.shape[0], (long long)m.record.shape[1],
                (long long)m.record.shape[2]);
  }
  std::printf("\nrecords   %llu\nclasses   %zu\nshards    %zu\n", (unsigned long long)m.records(),
              m.classes.size(), m.shards.size());
  std::printf("bytes     %s on disk, %s of payload (compression ratio %.2f)\n",
              FormatBytes(m.bytes()).c_str(), FormatBytes(m.raw_bytes()).c_str(), ratio);
  std::printf("created   %s\n", m.created_at.c_str());
  std::printf("class histogram:\n");
  const size_t show = std::min<size_t>(hist.size(), 20);
  for (size_t c = 0; c < show; ++c) {
    std::printf("  %5zu %-24s %llu\n", c, m.classes[c].c_str(), (unsigned long long)hist[c]);
  }
  if (hist.size() > show) {
    auto [mn, mx] = std::minmax_element(hist.begin(), hist.end());
    std::printf("  ... %zu more classes (min %llu, max %llu records per class)\n",
                hist.size() - show, (unsigned long long)*mn, (unsigned long long)*mx);
  }
  if (unlabeled) std::printf("  unlabeled: %llu\n", (unsigned long long)unlabeled);
  return 0;
}

int RunExtract(const std::string& dir, uint64_t index, const std::string& file) {
  auto ds = Dataset::Open(dir);
  if (!ds.ok()) return Fail(ds.status());
  if (index >= (*ds)->num_records()) {
    return Fail(Status::InvalidArgument("record " + std::to_string(index) +
                                        " out of range: " + dir + " holds " +
                                        std::to_string((*ds)->num_records()) + " records"));
  }
  auto [shard, local] = (*ds)->Locate(index);
  const ShardReader& r = (*ds)->shard(shard);
  ReadScratch scratch;
  std::string_view payload;
  Status s = r.ReadRecord(local, &scratch, &payload);
  if (!s.ok()) return Fail(s, "run 'shardkit-pack verify " + dir + "' for a full report");
  if (file == "-") {
    std::fwrite(payload.data(), 1, payload.size(), stdout);
  } else {
    s = WriteFileAtomic(file, payload);
    if (!s.ok()) return Fail(s);
    std::fprintf(stderr, "record %llu (%s, label %d) -> %s (%zu bytes)\n",
                 (unsigned long long)index, std::string(r.key(local)).c_str(),
                 r.record(local).label, file.c_str(), payload.size());
  }
  return 0;
}

}  // namespace
}  // namespace shardkit

namespace shardkit {

// The whole tool; with parse_only it stops after the command line is parsed
// and checked (the command-line fuzz target calls it so).
int PackMain(int argc, char** argv, bool parse_only) {
  CLI::App app{
      "shardkit-pack: pack image datasets into checksummed zstd shards; verify, inspect, extract"};
  app.require_subcommand(1);
  const std::string argv_json = ArgvJson(argc, argv);

  const CLI::Validator kShardSize = cli::IntIn(4096, 1ll << 40),
                       kThreads = cli::IntIn(0, cli::kMaxThreads);
  ImageNetPackOptions in;
  auto* imagenet = app.add_subcommand(
      "imagenet",
      "pack an ImageNet-layout JPEG tree (class folders, or a flat folder with --val-labels or "
      "--devkit), or the same as an archive: ILSVRC2012_img_train.tar (a tar of class tars), "
      "ILSVRC2012_img_val.tar, or a .tar/.tar.gz/.zip of a tree, read without extracting");
  imagenet->add_option("SRC", in.src, "source folder or archive")->required();
  imagenet->add_option("OUT", in.out, "output dataset directory")->required();
  imagenet->add_option("--val-labels", in.val_labels,
                       "LOC_val_solution.csv: ImageId,PredictionString (synset first)");
  imagenet->add_option(
      "--devkit", in.devkit,
      "ILSVRC2012_devkit_t12.tar.gz: val labels from its ground truth and meta.mat");
  imagenet->add_option("--archive-root", in.archive_root,
                       "the folder in the archive that holds the class folders (default: found)");
  imagenet->add_option("--classes-from", in.classes_from,
                       "reuse the class list of this dataset (e.g. train for val)");
  imagenet->add_option("--shard-size", in.shard_size, "target bytes per shard")
      ->capture_default_str()
      ->check(kShardSize);
  imagenet
      ->add_option("--resize-short", in.resize_short,
                   "re-encode so the short side is at most N (0: keep bytes)")
      ->capture_default_str()
      ->check(cli::IntIn(0, 65535));
  imagenet->add_option("--quality", in.quality, "JPEG quality of re-encoded images")
      ->capture_default_str()
      ->check(cli::IntIn(1, 100));
  imagenet->add_option("--threads", in.threads, "threads (0: all cores)")
      ->capture_default_str()
      ->check(kThreads);
  imagenet->add_option("--seed", in.seed, "seed of the record order")
      ->capture_default_str()
      ->check(cli::Unsigned());
  imagenet->add_flag("--strict", in.strict, "fail on the first bad file or empty class folder");
  imagenet->add_flag("--force", in.force, "replace an existing dataset in OUT");

  std::string images, labels, out, class_names;
  uint64_t shard_size = 256ull << 20;
  bool force = false;
  auto* idx = app.add_subcommand("idx", "pack MNIST-style IDX files (plain or .gz)");
  idx->add_option("--images", images, "images IDX file (N x H x W [x C], uint8)")->required();
  idx->add_option("--labels", labels, "labels IDX file (N, uint8)")->required();
  idx->add_option("OUT", out, "output dataset directory")->required();
  idx->add_option("--class-names", class_names,
                  "comma-separated class names (default: 0..max label)");
  idx->add_option("--shard-size", shard_size, "target bytes per shard")
      ->capture_default_str()
      ->check(kShardSize);
  idx->add_flag("--force", force, "replace an existing dataset in OUT");

  Hdf5PackOptions ho;
  auto* hdf5 =
      app.add_subcommand("hdf5", "pack uint8 image arrays and integer labels from an HDF5 file");
  hdf5->add_option("FILE", ho.file, "HDF5 file")->required();
  hdf5->add_option("OUT", ho.out, "output dataset directory")->required();
  hdf5->add_option("--images", ho.images, "dataset of images, N x H x W or N x H x W x C, uint8")
      ->required();
  hdf5->add_option("--labels", ho.labels, "dataset of integer labels, N")->required();
  hdf5->add_option("--class-names", class_names,
                   "comma-separated class names (default: 0..max label)");
  hdf5->add_option("--shard-size", ho.shard_size, "target bytes per shard")
      ->capture_default_str()
      ->check(kShardSize);
  hdf5->add_flag("--force", ho.force, "replace an existing dataset in OUT");

  std::string dir;
  int threads = 0;
  auto* verify = app.add_subcommand(
      "verify", "check every shard and record checksum (exit 0 only if all is well)");
  verify->add_option("DIR", dir, "dataset directory")->required();
  verify->add_option("--threads", threads, "threads (0: all cores)")->check(kThreads);

  bool json = false, list_shards = false;
  auto* inspect = app.add_subcommand(
      "inspect", "summarise a dataset: records, classes, shards, sizes, histogram");
  inspect->add_option("DIR", dir, "dataset directory")->required();
  inspect->add_flag("--json", json, "print JSON");
  inspect->add_flag("--shards", list_shards,
                    "print one line per shard: file, bytes, crc32c (tab-separated)");

  std::vector<std::string> files;
  auto* checksum = app.add_subcommand(
      "checksum", "print the CRC32C and size of files (as the manifest records them)");
  checksum->add_option("FILE", files, "files")->required();

  uint64_t index = 0;
  std::string file;
  auto* extract =
      app.add_subcommand("extract", "write one record's payload to FILE ('-' for stdout)");
  extract->add_option("DIR", dir, "dataset directory")->required();
  extract->add_option("INDEX", index, "record number (0-based, over the whole dataset)")
      ->required()
      ->check(cli::Unsigned());
  extract->add_option("FILE", file, "output file")->required();

  auto known = [&](const char* name) {
    for (const auto* sub : app.get_subcommands({})) {
      if (sub->get_name() == name) return true;
    }
    return false;
  };
  if (argc > 1 && argv[1][0] != '-' && !known(argv[1])) {
    std::fprintf(
        stderr,
        "shardkit-pack: error: unknown command '%s'\nhint: commands are imagenet, idx, hdf5, "
        "verify, inspect, extract, checksum; see shardkit-pack --help\n",
        argv[1]);
    return kExitError;
  }
  if (int rc = cli::Parse(app, argc, argv, "shardkit-pack"); rc >= 0) return rc;
  if (parse_only) return 0;
  try {
    if (*imagenet) {
      in.created_by = CreatedBy("shardkit-pack imagenet", argv_json,
                                {{"src", in.src},
                                 {"val_labels", in.val_labels},
                                 {"shard_size", in.shard_size},
                                 {"resize_short", in.resize_short},
                                 {"quality", in.quality},
                                 {"seed", in.seed}});
      return RunImageNet(in);
    }
    if (*idx) return RunIdx(images, labels, out, shard_size, class_names, force, argv_json);
    if (*hdf5) {
      if (!class_names.empty()) ho.class_names = SplitComma(class_names);
      ho.created_by = CreatedBy("shardkit-pack hdf5", argv_json,
                                {{"file", ho.file}, {"images", ho.images}, {"labels", ho.labels}});
      Status s = PackHdf5(ho);
      return s.ok() ? 0 : Fail(s);
    }
    const int t = threads > 0 ? threads : omp_get_max_threads();
    if (*verify) return RunVerify(dir, t);
    if (*inspect) return list_shards ? RunListShards(dir) : RunInspect(dir, json);
    if (*checksum) return RunChecksum(files);
    if (*extract) return RunExtract(dir, index, file);
  } catch (const std::exception& e) {
    return cli::Fail("shardkit-pack", e.what());
  }
  return kExitError;
}

}  // namespace shardkit

#ifndef SHARDKIT_NO_MAIN
int main(int argc, char** argv) { return shardkit::PackMain(argc, argv, /*parse_only=*/false); }
#endif
