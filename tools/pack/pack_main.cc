// shardkit-pack: pack image trees and archives, WebDataset shards, IDX files,
// HDF5 arrays and MATLAB files into shard datasets (ingest/ does it; this parses flags and
// prints); verify, inspect and extract from them.
#include "base/openmp.h"

#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/humanize.h"
#include "base/version.h"
#include "ingest/hdf5.h"
#include "ingest/idx_file.h"
#include "ingest/mat_file.h"
#include "ingest/merge.h"
#include "ingest/packer.h"
#include "ingest/text.h"
#include "ingest/tree_source.h"
#include "ingest/webdataset_source.h"
#include "shard/publish.h"
#include "shard/shard.h"
#include "shard/stage.h"
#include "storage/output_file.h"
#include "tools/common/cli.h"
#include "tools/common/progress.h"

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

// Ctrl-C and SIGTERM: the pack stops at its next member or record, removes
// what it wrote, and the tool exits 130. A second signal kills at once.
std::atomic<bool> g_interrupted{false};

void OnSignal(int) { g_interrupted.store(true); }

void CatchInterrupts() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSignal;
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// Packs `source`, prints the summary; the exit code.
int RunPack(SampleSource* source, PackOptions o, const std::string& hint_strict) {
  o.interrupt = &g_interrupted;
  CatchInterrupts();
  auto progress = std::make_shared<PhaseProgress>();
  PackEvents events;
  events.report = Report;
  events.progress = [progress](const std::string& phase, uint64_t done, uint64_t total,
                               uint64_t bytes,
                               bool final) { (*progress)(phase, done, total, bytes, final); };
  PackSummary sum;
  Status s = Pack(source, o, events, &sum);
  if (!s.ok()) {
    if (s.IsAborted()) {
      cli::Fail("shardkit-pack", s);
      return cli::kExitInterrupted;
    }
    return Fail(s, o.strict ? hint_strict : "");
  }
  const RecordSpec spec = source->spec();
  std::string shape;
  for (int64_t d : spec.shape) shape += (shape.empty() ? "" : "x") + std::to_string(d);
  uint64_t seen = sum.packed;
  for (int k = 0; k < static_cast<int>(Unusable::kCount); ++k) {
    const auto why = static_cast<Unusable>(k);
    if (why != Unusable::kEmptyClass && why != Unusable::kOutsideList) seen += sum.unusable[k];
  }
  std::printf(
      "packed %llu of %llu records (%s%llu classes) from %s into %llu shard(s) in %s\n"
      "  %s read, %s written, %.1f s: %.0f records/s, %s/s\n",
      (unsigned long long)sum.packed, (unsigned long long)seen,
      shape.empty() ? "" : (shape + ", ").c_str(), (unsigned long long)sum.classes,
      source->name().c_str(), (unsigned long long)sum.shards, o.out.c_str(),
      FormatBytes(sum.bytes_in).c_str(), FormatBytes(sum.bytes_out).c_str(), sum.seconds,
      sum.packed / std::max(sum.seconds, 1e-9),
      FormatBytes(sum.bytes_in / std::max(sum.seconds, 1e-9)).c_str());
  if (spec.kind == format::RecordKind::kJpeg) {
    std::printf("  converted: %llu CMYK, %llu PNG; re-encoded: %llu\n",
                (unsigned long long)sum.conversions.cmyk, (unsigned long long)sum.conversions.png,
                (unsigned long long)sum.conversions.resized);
  }
  std::string skipped;
  for (int k = 0; k < static_cast<int>(Unusable::kCount); ++k) {
    if (sum.unusable[k] == 0) continue;
    skipped += (skipped.empty() ? "" : ", ") + std::to_string(sum.unusable[k]) + " " +
               UnusableName(static_cast<Unusable>(k));
  }
  std::printf("  skipped: %s\n", skipped.empty() ? "none" : skipped.c_str());
  if (sum.resumed_shards > 0) {
    std::printf("  resumed: %llu shard(s) kept from an interrupted run of the same settings\n",
                (unsigned long long)sum.resumed_shards);
  }
  if (o.part_count > 0) {
    std::printf(
        "  part %u of %u (%s/part.json): join all %u with 'shardkit-pack merge OUT PART...'\n",
        o.part_index, o.part_count, o.out.c_str(), o.part_count);
  }
  return 0;
}

int RunMerge(MergeOptions o, const std::string& argv_json) {
  o.interrupt = &g_interrupted;
  o.merged_by = nlohmann::json{{"tool", "shardkit-pack merge"},
                               {"version", kVersion},
                               {"argv", nlohmann::json::parse(argv_json)}}
                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  CatchInterrupts();
  std::unique_ptr<Progress> bar;
  MergeSummary sum;
  Status s = MergeParts(
      o,
      [&bar](uint64_t done, uint64_t total, uint64_t bytes, bool final) {
        if (bar == nullptr) bar = std::make_unique<Progress>("merge", total, "shards");
        bar->Update(done, bytes);
        if (final) bar->Finish();
      },
      &sum);
  if (!s.ok()) {
    cli::Fail("shardkit-pack", s);
    return s.IsAborted() ? cli::kExitInterrupted : kExitError;
  }
  std::printf(
      "merged %llu parts into %s: %llu records in %llu shard(s), %s (%llu hard-linked, %llu "
      "copied), %.1f s\n",
      (unsigned long long)sum.parts, o.out.c_str(), (unsigned long long)sum.records,
      (unsigned long long)sum.shards, FormatBytes(sum.bytes).c_str(),
      (unsigned long long)sum.linked, (unsigned long long)sum.copied, sum.seconds);
  return 0;
}

int RunVerify(const std::string& dir, int threads) {
  VerifyReport r;
  uint64_t problems = 0;
  Status s = VerifyDataset(
      dir, threads,
      [&](const VerifyProblem& p) {
        ++problems;
        const bool unread = p.kind == VerifyProblem::Kind::kUnchecked;
        std::fprintf(stderr, "%s %s\n", unread ? "UNCHECKED" : "BAD", p.message.c_str());
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
  if (r.shards_bad == 0 && r.records_bad == 0) {  // reads failed; nothing read was bad
    std::printf("UNCHECKED %s: %llu of %llu shards could not be read (above)%s\n", dir.c_str(),
                (unsigned long long)r.shards_unreadable, (unsigned long long)r.shards,
                r.shards_unreadable < r.shards ? "; the others are good" : "");
    return kExitError;
  }
  std::printf("FAILED %s: %llu of %llu shards bad, %llu of %llu records bad%s\n", dir.c_str(),
              (unsigned long long)r.shards_bad, (unsigned long long)r.shards,
              (unsigned long long)r.records_bad, (unsigned long long)r.records,
              r.shards_unreadable > 0
                  ? (", " + std::to_string(r.shards_unreadable) + " not read").c_str()
                  : "");
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
    auto crc = FileCrc32c(Env::Default(), f);
    auto size = FileSize(f);
    if (!crc.ok() || !size.ok()) {
      rc = Fail(crc.ok() ? size.status() : crc.status());
      continue;
    }
    std::printf("%s\t%llu\t%s\n", Crc32cHex(*crc).c_str(), (unsigned long long)*size, f.c_str());
  }
  return rc;
}

// A transfer (push, stage) with a bytes progress bar, stopped by Ctrl-C and
// SIGTERM as a pack is: `run(progress)` starts it and returns its Status.
template <typename Run>
Status Transfer(const char* what, Run run) {
  CatchInterrupts();
  Progress bar(what, 0, "bytes");
  const Status s = run([&](uint64_t done, uint64_t total) {
    bar.SetTotal(total);
    bar.Update(done, done);
  });
  bar.Finish(s.ok());
  return s;
}

// The exit code of a failed transfer: 130 when a signal stopped it, else
// the error with `hint`.
int TransferFailed(const Status& s, const std::string& hint) {
  if (s.IsAborted() && g_interrupted.load()) {
    cli::Fail("shardkit-pack", s);
    return cli::kExitInterrupted;
  }
  return Fail(s, hint);
}

// push: the dataset to s3://, shards first, the manifest last. Ctrl-C and
// SIGTERM abort the uploads under way (nothing is left unfinished on the
// server) and exit 130, as a pack does.
int RunPush(const std::string& dir, const std::string& url, PushOptions o) {
  o.cancel = &g_interrupted;
  PushReport r;
  const Status s =
      Transfer("push", [&](auto progress) { return PushDataset(dir, url, o, progress, &r); });
  if (!s.ok()) {
    return TransferFailed(s, s.transient() ? "rerun to resume: shards already there whole are "
                                             "not sent again; no manifest was published"
                                           : "");
  }
  std::printf("pushed %s to %s: uploaded %llu of %llu shards (%s), %llu already there whole (%s)%s",
              dir.c_str(), url.c_str(), (unsigned long long)r.uploaded,
              (unsigned long long)r.shards, FormatBytes(double(r.bytes_uploaded)).c_str(),
              (unsigned long long)r.kept, FormatBytes(double(r.bytes_kept)).c_str(),
              r.manifest_written ? "; manifest written last" : "; manifest already the same");
  if (r.stale_removed > 0) {
    std::printf("; %llu stale shards removed", (unsigned long long)r.stale_removed);
  }
  if (r.uploads_aborted > 0) {
    std::printf("; %llu unfinished uploads of an earlier push aborted",
                (unsigned long long)r.uploads_aborted);
  }
  std::printf("\n");
  return cli::kExitOk;
}

// get: one file of a dataset (a path or a URL) to a local file, checked
// against the manifest.
int RunGet(const std::string& from, const std::string& to, const std::string& manifest) {
  const Status s = FetchFile(from, to, manifest);
  return s.ok() ? cli::kExitOk : Fail(s);
}

// stage: a dataset (a directory or a URL) into a local directory, each
// shard checked against the one manifest copy, the manifest last. Ctrl-C and
// SIGTERM stop it (no manifest installed) with exit 130.
int RunStage(const std::string& from, const std::string& to, int jobs) {
  StageOptions o;
  o.jobs = jobs;
  o.cancel = &g_interrupted;
  StageReport r;
  const Status s =
      Transfer("stage", [&](auto progress) { return StageDataset(from, to, o, progress, &r); });
  if (!s.ok()) {
    return TransferFailed(
        s, s.transient() ? "rerun to resume: shards already staged intact are kept" : "");
  }
  if (r.source_itself) {
    std::printf("%s is the source dataset itself: nothing to stage (source left untouched)\n",
                to.c_str());
    return cli::kExitOk;
  }
  std::printf(
      "staged %s to %s: %llu shards copied (%s in %s, %s/s), %llu already intact; "
      "manifest installed last (verified)\n",
      from.c_str(), to.c_str(), (unsigned long long)r.copied,
      FormatBytes(double(r.bytes_copied)).c_str(), FormatDuration(r.seconds).c_str(),
      FormatBytes(double(r.bytes_copied) / std::max(r.seconds, 1e-9)).c_str(),
      (unsigned long long)r.kept);
  return cli::kExitOk;
}

int RunInspect(const std::string& dir, bool json) {
  auto ds = Dataset::Open(dir);
  // No dataset there at all (or not one to read: a file, a setting):
  // nothing verify would add (a missing shard it would list).
  if (!ds.ok() && !ReadManifest(dir).ok()) return Fail(ds.status());
  if (!ds.ok())
    return Fail(ds.status(), "run 'shardkit-pack verify " + dir + "' for a full report");
  const Manifest& m = (*ds)->manifest();
  auto summary = Summarize(**ds);
  if (!summary.ok()) {
    return Fail(summary.status(), "run 'shardkit-pack verify " + dir + "' for a full report");
  }
  const std::vector<uint64_t>& hist = summary->class_counts;
  const uint64_t unlabeled = summary->unlabeled, outside = summary->labels_outside_classes;
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
    // By name; a name that repeats (ImageNet's words have "crane" twice) is
    // keyed with its label after the first, so no count is lost.
    // class_counts: the same counts in label order.
    nlohmann::json h = nlohmann::json::object();
    for (size_t c = 0; c < hist.size(); ++c) {
      const std::string key =
          h.contains(m.classes[c]) ? m.classes[c] + " [" + std::to_string(c) + "]" : m.classes[c];
      h[key] = hist[c];
    }
    j["class_histogram"] = h;
    j["class_counts"] = hist;
    if (unlabeled) j["unlabeled"] = unlabeled;
    if (outside) j["labels_outside_classes"] = outside;
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
  if (outside) {
    std::printf("  labels outside the %zu classes: %llu (run 'shardkit-pack verify %s')\n",
                hist.size(), (unsigned long long)outside, dir.c_str());
  }
  return 0;
}

int RunExtract(const std::string& dir, uint64_t index, const std::string& file) {
  if (file != "-") {
    Status s = CheckOutputFile(file);
    if (s.ok()) s = CheckOutputOutsideInputs(file, {dir});
    if (!s.ok()) return Fail(s);
  }
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
    if ((ClosedStandardStreams() & 2u) != 0) {
      return Fail(
          Status::IOError("-: standard output was closed when this command started; "
                          "not written"));
    }
    std::fwrite(payload.data(), 1, payload.size(), stdout);
  } else {
    s = WriteOutputFile(file, payload);
    if (!s.ok()) return Fail(s);
    std::fprintf(stderr, "record %llu (%s, label %d) -> %s (%zu bytes)\n",
                 (unsigned long long)index, std::string(r.key(local)).c_str(), r.label(local),
                 file.c_str(), payload.size());
  }
  return 0;
}

}  // namespace
}  // namespace shardkit

namespace shardkit {

namespace {

const CLI::Validator kShardSize = cli::IntIn(4096, 1ll << 40),
                     kThreads = cli::IntIn(0, cli::kMaxThreads);

const CLI::Validator kPart(
    [](std::string& s) -> std::string {
      auto p = ParsePart(s);
      return p.ok() ? ""
                    : p.status().message() +
                          " (a SLURM array: $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT)";
    },
    "I/N");

// The pack commands: their flags, and the source each opens.
struct PackCommands {
  PackOptions po;
  std::string class_names, classes_from, images, labels, part;
  TreeOptions tree;
  std::vector<std::string> wds;
  Hdf5Options h5;
  MatOptions mat_o;
  std::string mat_layout = "auto", label_map;
  CLI::App *imagenet = nullptr, *webdataset = nullptr, *idx = nullptr, *hdf5 = nullptr,
           *mat = nullptr, *svhn = nullptr;

  // What every pack command shares: OUT, shards, order, strictness.
  void Common(CLI::App* sub, bool images, bool seeded, bool out = true) {
    if (out) sub->add_option("OUT", po.out, "output dataset directory")->required();
    sub->add_option("--shard-size", po.shard_size,
                    "target bytes per shard (idx, hdf5: counted before compression, payload "
                    "and index, so every shard holds the same number of records)")
        ->capture_default_str()
        ->check(kShardSize);
    if (images) {
      sub->add_option("--resize-short", po.resize_short,
                      "re-encode so the short side is at most N (0: keep bytes)")
          ->capture_default_str()
          ->check(cli::IntIn(0, 65535));
      sub->add_option("--quality", po.quality, "JPEG quality of re-encoded images")
          ->capture_default_str()
          ->check(cli::IntIn(1, 100));
    }
    sub->add_option("--threads", po.threads, "threads (0: all cores)")
        ->capture_default_str()
        ->check(kThreads);
    if (seeded) {
      sub->add_option("--seed", po.seed, "seed of the record order")
          ->capture_default_str()
          ->check(cli::Unsigned());
    }
    sub->add_flag("--strict", po.strict,
                  "fail on the first unusable member (bad image, unsafe path, link, special "
                  "file, oversized, bad name, no label, duplicate, empty class); nothing is "
                  "left in OUT");
    sub->add_flag("--force", po.force, "replace an existing dataset in OUT (kept until done)");
    sub->add_option("--part", part,
                    images ? "refused for this source: which images it holds, and their "
                             "bytes, are known only once it is read, so it is packed whole "
                             "(parts are for idx, hdf5, mat and svhn)"
                           : "write only part I of N (0-based) into OUT: its shards, named as "
                             "the whole dataset's, and part.json; join the N parts with "
                             "'shardkit-pack merge'")
        ->check(kPart);
  }
  void ClassNames(CLI::App* sub) {
    sub->add_option("--class-names", class_names,
                    "comma-separated class names (default: 0..max label)");
  }

  void Add(CLI::App& app) {
    imagenet = app.add_subcommand(
        "imagenet",
        "pack an image tree (class folders, or a flat val folder with --val-labels or --devkit) "
        "from a folder or an archive of one: ILSVRC2012_img_train.tar (a tar of class tars), "
        "ILSVRC2012_img_val.tar, or a .tar/.tar.gz/.zip of a tree, read without extracting; an "
        "archive packs exactly as its extraction does, or fails");
    imagenet->add_option("SRC", tree.src, "source folder or archive")->required();
    Common(imagenet, true, true);
    imagenet->add_option("--val-labels", tree.val_labels,
                         "LOC_val_solution.csv: ImageId,PredictionString (synset first)");
    imagenet->add_option(
        "--devkit", tree.devkit,
        "ILSVRC2012_devkit_t12.tar.gz: val labels from its ground truth and meta.mat");
    imagenet->add_option("--root,--archive-root", tree.root,
                         "the folder of SRC that holds the class folders (default: SRC, or the "
                         "one folder a wrapper folder holds)");
    imagenet->add_option("--classes-from", classes_from,
                         "reuse the class list of this dataset (e.g. train for val)");
    imagenet->add_flag("--follow-links", tree.follow_links,
                       "follow a folder's symbolic links (each directory once) instead of "
                       "skipping them as an archive's are");

    webdataset = app.add_subcommand(
        "webdataset",
        "pack WebDataset tar shards: members grouped by key, an image (.jpg/.jpeg/.png) and a "
        "class number (.cls) each; SHARDS may use braces: 'shards-{000000..000123}.tar'");
    webdataset->add_option("SHARDS", wds, "shard files or brace patterns, then OUT")->required();
    Common(webdataset, true, true, /*out=*/false);  // the last of SHARDS
    ClassNames(webdataset);

    idx = app.add_subcommand("idx", "pack MNIST-style IDX files (plain or .gz)");
    idx->add_option("--images", images, "images IDX file (N x H x W [x C], uint8)")->required();
    idx->add_option("--labels", labels, "labels IDX file (N, uint8)")->required();
    Common(idx, false, false);
    ClassNames(idx);

    hdf5 =
        app.add_subcommand("hdf5", "pack uint8 image arrays and integer labels from an HDF5 file");
    hdf5->add_option("FILE", h5.file, "HDF5 file")->required();
    Common(hdf5, false, false);
    hdf5->add_option("--images", h5.images, "dataset of images, N x H x W or N x H x W x C, uint8")
        ->required();
    hdf5->add_option("--labels", h5.labels, "dataset of integer labels, N")->required();
    ClassNames(hdf5);
    AddMat(app);
  }

  void AddMat(CLI::App& app) {
    mat = app.add_subcommand(
        "mat",
        "pack a uint8 image array and integer labels from a MATLAB .mat file through libmatio: "
        "level 5 (plain or compressed variables, as MATLAB -v6/-v7 and scipy.io.savemat save "
        "them) or 7.3 (HDF5); record i is image i, its pixel (h, w, c) MATLAB's X(h,w,c,i) "
        "(scipy's X[h,w,c,i]), read in slabs");
    mat->add_option("FILE", mat_o.file, ".mat file")->required();
    Common(mat, false, false);
    mat->add_option("--images", mat_o.images,
                    "variable of images, uint8: H x W x C x N or H x W x N (SVHN's X), or "
                    "N x H x W x C or N x H x W")
        ->required();
    mat->add_option("--labels", mat_o.labels,
                    "variable of labels: a vector of N integers (any numeric class; "
                    "floating-point values must be whole)")
        ->required();
    mat->add_option("--layout", mat_layout,
                    "which dimension counts the images: auto (the last or the first, whichever "
                    "the labels' length matches), HWCN (the last) or NHWC (the first)")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "HWCN", "NHWC"}));
    mat->add_option("--label-map", label_map,
                    "replace label values before anything else: FROM:TO,... (SVHN: 10:0); the "
                    "classes are then --class-names, label i naming class i, else 0..max label");
    ClassNames(mat);
    svhn = app.add_subcommand(
        "svhn",
        "pack an SVHN file (train_32x32.mat, test_32x32.mat, extra_32x32.mat) as "
        "torchvision.datasets.SVHN reads it: X (32 x 32 x 3 x N), y with label 10 as 0, classes "
        "0..9; the same as 'mat FILE OUT --images X --labels y --layout HWCN --label-map 10:0 "
        "--class-names 0,1,2,3,4,5,6,7,8,9', except that a label outside SVHN's 1..10 (0 "
        "included) is refused, naming it and its index");
    svhn->add_option("FILE", mat_o.file, "an SVHN .mat file")->required();
    Common(svhn, false, false);
  }

  // The chosen command's source, opened (po.out, po.created_by, the part
  // and po.settings set: PackSettings, what parts must agree on and a
  // killed pack is resumed by).
  Result<std::unique_ptr<SampleSource>> Open(const std::string& argv_json) {
    if (!part.empty()) {
      auto p = ParsePart(part);  // valid: kPart checked it
      if (p.ok()) po.part_index = p->index, po.part_count = p->count;
    }
    SK_ASSIGN_OR_RETURN(std::unique_ptr<SampleSource> source, OpenSource(argv_json));
    SK_ASSIGN_OR_RETURN(po.settings, PackSettings(*source, po));
    return source;
  }

  // The chosen command's source, opened (po.out and po.created_by set).
  Result<std::unique_ptr<SampleSource>> OpenSource(const std::string& argv_json) {
    const std::vector<std::string> names =
        class_names.empty() ? std::vector<std::string>() : SplitList(class_names);
    if (*imagenet) {
      if (!classes_from.empty()) {
        SK_ASSIGN_OR_RETURN(Manifest m, ReadManifest(classes_from));
        tree.classes = m.classes;
      }
      po.created_by = CreatedBy("shardkit-pack imagenet", argv_json,
                                {{"src", tree.src},
                                 {"val_labels", tree.val_labels},
                                 {"devkit", tree.devkit},
                                 {"root", tree.root},
                                 {"shard_size", po.shard_size},
                                 {"resize_short", po.resize_short},
                                 {"quality", po.quality},
                                 {"seed", po.seed}});
      return OpenTree(tree);
    }
    if (*webdataset) {
      if (wds.size() < 2) return Status::InvalidArgument("give SHARDS... OUT");
      po.out = wds.back();
      wds.pop_back();
      po.created_by =
          CreatedBy("shardkit-pack webdataset", argv_json, {{"shards", wds}, {"seed", po.seed}});
      return OpenWebDataset(wds, names);
    }
    if (*idx) {
      po.created_by =
          CreatedBy("shardkit-pack idx", argv_json,
                    {{"images", images}, {"labels", labels}, {"shard_size", po.shard_size}});
      return OpenIdx(images, labels, names);
    }
    if (*mat || *svhn) return OpenMatCommand(names, argv_json);
    h5.class_names = names;
    po.created_by = CreatedBy("shardkit-pack hdf5", argv_json,
                              {{"file", h5.file}, {"images", h5.images}, {"labels", h5.labels}});
    return OpenHdf5(h5);
  }

  static const char* LayoutName(MatLayout l) {
    return l == MatLayout::kHWCN ? "HWCN" : l == MatLayout::kNHWC ? "NHWC" : "auto";
  }

  Result<std::unique_ptr<SampleSource>> OpenMatCommand(const std::vector<std::string>& names,
                                                       const std::string& argv_json) {
    MatOptions o = mat_o;
    if (*svhn) {
      o = SvhnOptions(mat_o.file);
    } else {
      SK_ASSIGN_OR_RETURN(o.layout, ParseMatLayout(mat_layout));
      if (!label_map.empty()) {
        SK_ASSIGN_OR_RETURN(o.label_map, ParseLabelMap(label_map));
      }
      o.class_names = names;
    }
    nlohmann::json map = nlohmann::json::array();
    for (const auto& [from, to] : o.label_map) map.push_back({from, to});
    const nlohmann::json options = {{"file", o.file},     {"images", o.images},
                                    {"labels", o.labels}, {"layout", LayoutName(o.layout)},
                                    {"label_map", map},   {"classes", o.class_names}};
    po.created_by = CreatedBy("shardkit-pack " + o.reading, argv_json, options);
    return OpenMat(o);
  }

  bool chosen() const { return *imagenet || *webdataset || *idx || *hdf5 || *mat || *svhn; }

  int Run(const std::string& argv_json) {
    auto source = Open(argv_json);
    if (!source.ok()) {
      return Fail(source.status(), *idx ? "pass MNIST-format files: --images "
                                          "*-images-idx3-ubyte[.gz] --labels "
                                          "*-labels-idx1-ubyte[.gz]"
                                        : "");
    }
    return RunPack(source->get(), po,
                   "rerun without --strict to skip unusable members and report them");
  }
};

// verify, inspect, checksum, extract: what a dataset holds; merge: a dataset
// from its parts.
struct DatasetCommands {
  std::string dir, file;
  int threads = 0;
  bool json = false, list_shards = false;
  std::vector<std::string> files;
  uint64_t index = 0;
  MergeOptions mo;
  std::string url, get_manifest;
  int get_jobs = 8;
  PushOptions push_options;
  CLI::App *verify = nullptr, *inspect = nullptr, *checksum = nullptr, *extract = nullptr,
           *merge = nullptr, *push = nullptr, *get = nullptr, *stage = nullptr;

  void Add(CLI::App& app) {
    merge = app.add_subcommand(
        "merge",
        "join the parts of a dataset prepared with --part I/N into one dataset at OUT, the same "
        "bytes a one-process run writes: every part once, made with the same settings, every "
        "shard checked (size, CRC32C); shards hard-linked where OUT's filesystem allows, else "
        "copied; parts are only read; manifest.json written last");
    merge->add_option("OUT", mo.out, "output dataset directory")->required();
    merge->add_option("PART", mo.parts, "part directories (each with part.json), any order")
        ->required();
    merge->add_flag("--force", mo.force, "replace an existing dataset in OUT (kept until done)");

    verify = app.add_subcommand(
        "verify", "check every shard and record checksum (exit 0 only if all is well)");
    verify
        ->add_option("DIR", dir, "dataset directory, or s3://BUCKET/PREFIX or http(s)://HOST/PATH")
        ->required();
    verify->add_option("--threads", threads, "threads (0: all cores)")->check(kThreads);

    inspect = app.add_subcommand("inspect",
                                 "summarise a dataset: records, classes, shards, sizes, histogram");
    inspect
        ->add_option("DIR", dir, "dataset directory, or s3://BUCKET/PREFIX or http(s)://HOST/PATH")
        ->required();
    inspect->add_flag("--json", json, "print JSON");
    inspect->add_flag("--shards", list_shards,
                      "print one line per shard: file, bytes, crc32c (tab-separated)");

    checksum = app.add_subcommand(
        "checksum", "print the CRC32C and size of files (as the manifest records them)");
    checksum->add_option("FILE", files, "files")->required();

    extract = app.add_subcommand("extract", "write one record's payload to FILE ('-' for stdout)");
    extract
        ->add_option("DIR", dir, "dataset directory, or s3://BUCKET/PREFIX or http(s)://HOST/PATH")
        ->required();
    extract->add_option("INDEX", index, "record number (0-based, over the whole dataset)")
        ->required()
        ->check(cli::Unsigned());
    extract->add_option("FILE", file, "output file")->required();

    push = app.add_subcommand(
        "push",
        "publish a dataset to S3: every shard (a multipart upload above 16 MiB, each part's MD5 "
        "sent and checked), then the manifest, so readers never see a manifest before its "
        "shards; a rerun sends only shards not there whole (size and ETag)");
    push->add_option("DIR", dir, "dataset directory")->required();
    push->add_option("URL", url, "s3://BUCKET/PREFIX")->required();
    push->add_flag("--force", push_options.force,
                   "replace a different dataset there (its manifest is removed first)");
    push->add_option("--jobs", push_options.jobs, "shards uploaded at once")
        ->capture_default_str()
        ->check(CLI::Range(1, 64));

    stage = app.add_subcommand(
        "stage",
        "copy a dataset (a directory, or an s3:// or http(s):// URL) into a local directory: "
        "shards checked against the manifest, the manifest last (what slurm/stage.sh runs)");
    stage->add_option("SRC", url, "dataset directory or URL")->required();
    stage->add_option("DEST", dir, "local directory (made if missing)")->required();
    stage->add_option("--jobs", get_jobs, "shards copied at once")->check(CLI::Range(1, 64));
    get = app.add_subcommand("get",
                             "copy one file of a dataset (a path, or an s3:// or http(s):// URL) "
                             "to a local file, checked against the dataset's manifest");
    get->add_option("FROM", url, "file or URL")->required();
    get->add_option("TO", file, "local file")->required();
    get->add_option("--manifest", get_manifest,
                    "check the copy against this manifest.json (a copy fetched before) "
                    "instead of the dataset's own")
        ->check([](const std::string& v) { return v.empty() ? std::string("an empty path") : ""; });
  }

  int Run(const std::string& argv_json) {
    if (*merge) return RunMerge(mo, argv_json);
    if (*verify) return RunVerify(dir, threads > 0 ? threads : omp_get_max_threads());
    if (*inspect) return list_shards ? RunListShards(dir) : RunInspect(dir, json);
    if (*checksum) return RunChecksum(files);
    if (*extract) return RunExtract(dir, index, file);
    if (*push) return RunPush(dir, url, push_options);
    if (*get) return RunGet(url, file, get_manifest);
    if (*stage) return RunStage(url, dir, get_jobs);
    return kExitError;
  }
};

}  // namespace

// The whole tool; with parse_only it stops after the command line is parsed
// and checked (the command-line fuzz target calls it so).
int PackMain(int argc, char** argv, bool parse_only) {
  CLI::App app{
      "shardkit-pack: pack image datasets into checksummed zstd shards; merge parts; verify, "
      "inspect, extract; publish to S3 (push), copy out (get) and stage to local disk (stage)"};
  app.require_subcommand(1);
  const std::string argv_json = ArgvJson(argc, argv);
  PackCommands pack;
  pack.Add(app);
  DatasetCommands dataset;
  dataset.Add(app);
  auto known = [&](const char* name) {
    for (const auto* sub : app.get_subcommands({})) {
      if (sub->get_name() == name) return true;
    }
    return false;
  };
  if (argc > 1 && argv[1][0] != '-' && !known(argv[1])) {
    std::fprintf(
        stderr,
        "shardkit-pack: error: unknown command '%s'\nhint: commands are imagenet, webdataset, idx, "
        "hdf5, mat, svhn, merge, verify, inspect, extract, checksum, push, get, stage; see "
        "shardkit-pack "
        "--help\n",
        argv[1]);
    return kExitError;
  }
  if (int rc = cli::Parse(app, argc, argv, "shardkit-pack"); rc >= 0) return rc;
  if (parse_only) return 0;
  try {
    return pack.chosen() ? pack.Run(argv_json) : dataset.Run(argv_json);
  } catch (const std::exception& e) {
    return cli::Fail("shardkit-pack", e.what());
  }
}

}  // namespace shardkit

#ifndef SHARDKIT_NO_MAIN
int main(int argc, char** argv) {
  return shardkit::cli::FlushedExit("shardkit-pack",
                                    shardkit::PackMain(argc, argv, /*parse_only=*/false));
}
#endif
