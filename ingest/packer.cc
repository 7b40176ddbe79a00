// The Packer: streamed bytes prepared in parallel batches and spilled, the
// listing checked, ordered and written.
#include "ingest/packer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>

#include "base/crc32c.h"
#include "base/openmp.h"
#include "base/random.h"
#include "base/version.h"
#include "image/prepare.h"
#include "ingest/input_id.h"
#include "shard/dataset_writer.h"
#include "shard/manifest.h"
#include "shard/parts.h"
#include "storage/file_io.h"

namespace shardkit {

const char* UnusableName(Unusable why) {
  switch (why) {
    case Unusable::kBadImage:
      return "bad images";
    case Unusable::kUnsafePath:
      return "unsafe paths";
    case Unusable::kLink:
      return "links or special files";
    case Unusable::kTooBig:
      return "over the size limit";
    case Unusable::kBadInnerTar:
      return "unreadable class tars";
    case Unusable::kBadName:
      return "unusable names";
    case Unusable::kNoLabel:
      return "without a label";
    case Unusable::kDuplicate:
      return "duplicates";
    case Unusable::kOutsideList:
      return "class folders not in the class list";
    case Unusable::kEmptyClass:
      return "empty class folders";
    case Unusable::kOutsideLayout:
      return "outside the layout";
    case Unusable::kCount:
      break;
  }
  return "?";
}

uint64_t PackSummary::skipped() const {
  uint64_t n = 0;
  for (uint64_t u : unusable) n += u;
  return n;
}

Status SampleSource::Read(const Sample& sample, uint64_t, std::string*) const {
  return Status::InvalidArgument(sample.name + ": " + name() + " streams its samples");
}

Status SampleSource::SetRange(uint64_t, uint64_t) {
  return Status::Unsupported(name() + ": this source cannot list a range of its records");
}

Result<std::string> SampleSource::Settings() const { return std::string("{}"); }

Result<std::string> PackSettings(const SampleSource& source, const PackOptions& o) {
  SK_ASSIGN_OR_RETURN(const std::string text, source.Settings());
  nlohmann::json settings = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!settings.is_object()) {
    return Status::InvalidArgument(source.name() + ": its settings are not a JSON object");
  }
  if (settings.empty()) return std::string("{}");  // nothing names the source: never resumed
  settings["shard_size"] = o.shard_size;
  if (source.spec().kind == format::RecordKind::kJpeg) {
    settings["resize_short"] = o.resize_short;
    settings["quality"] = o.quality;
    settings["seed"] = o.seed;
  }
  return SettingsText(settings);
}

namespace {

// Prepared records in the order they streamed by, read back in the seeded
// order: a ScratchFile of the options' Env beside the shards, which no pack,
// however it ends, leaves behind.
class Spill {
 public:
  Status Open(Env* env, const std::string& dir) {
    SK_ASSIGN_OR_RETURN(file_, env->NewScratchFile(dir));
    return Status::OK();
  }
  Status Append(const std::string& bytes, int64_t* offset) {
    uint64_t at = 0;
    Status s = file_->Append(bytes.data(), bytes.size(), &at);
    if (!s.ok()) return Status::IOError("spill: " + s.message() + " (is OUT's filesystem full?)");
    *offset = static_cast<int64_t>(at);
    return Status::OK();
  }
  Status Read(int64_t offset, uint64_t size, std::string* out) const {
    out->resize(size);
    return file_->Read(static_cast<uint64_t>(offset), size, out->data()).WithContext("spill");
  }

 private:
  std::unique_ptr<ScratchFile> file_;
};

// A streamed member, prepared and spilled (or why it could not be).
struct Held {
  int64_t offset = -1;
  uint64_t size = 0;
  uint32_t crc = 0;  // CRC32C of the stored bytes (a resumed pack's plan)
  PreparedImage::Change change = PreparedImage::Change::kNone;
  std::string error;
};

// One listed sample made ready to write: from the spill, or read from the
// source and prepared. `status` is the sample's (skipped), `fatal` the pack's.
struct Slot {
  Status status, fatal;
  PreparedImage image;
  uint64_t in_bytes = 0;
};

// PrepareRecord, never throwing: it runs inside OpenMP loops, where an
// exception (out of memory) would terminate the process before any clean-up.
Status PrepareNoThrow(std::string bytes, const RecordRule& rule, PreparedImage* out) {
  try {
    return PrepareRecord(std::move(bytes), rule, out);
  } catch (const std::exception& e) {
    return Status::IOError(std::string("out of memory or worse: ") + e.what());
  }
}

class Packer : public SampleSink {
 public:
  Packer(SampleSource* source, const PackOptions& o, const PackEvents& events, PackSummary* sum)
      : source_(source),
        o_(o),
        events_(events),
        sum_(sum),
        spec_(source->spec()),
        env_(o.env != nullptr ? o.env : Env::Default()) {
    threads_ = o.threads > 0 ? o.threads : omp_get_max_threads();
    raw_size_ = 1;
    for (int64_t d : spec_.shape) raw_size_ *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
    rule_.jpeg = spec_.kind == format::RecordKind::kJpeg;
    rule_.raw_size = raw_size_;
    rule_.resize_short = o.resize_short;
    rule_.quality = o.quality;
  }

  Status Run();

  // SampleSink
  Status Add(Sample sample, std::string bytes) override {
    SK_RETURN_IF_ERROR(Interrupted());
    if (spec_.source_order) {  // straight to the writer: nothing is kept
      sum_->bytes_in += bytes.size();
      PreparedImage p;
      Status s = PrepareNoThrow(std::move(bytes), rule_, &p);
      if (!s.ok()) return Skip(sample.name, s.message(), Unusable::kBadImage);
      return Write(sample, &p);
    }
    SK_ASSIGN_OR_RETURN(sample.held, Hold(sample.name, std::move(bytes)));
    added_.push_back(std::move(sample));
    return Status::OK();
  }
  Result<int64_t> Hold(const std::string&, std::string bytes) override {
    SK_RETURN_IF_ERROR(Interrupted());
    const int64_t handle = static_cast<int64_t>(held_.size());
    held_.emplace_back();
    sum_->bytes_in += bytes.size();
    batch_bytes_ += bytes.size();
    batch_.push_back({handle, std::move(bytes)});
    if (batch_.size() >= static_cast<size_t>(threads_) * 32 || batch_bytes_ >= (256u << 20)) {
      SK_RETURN_IF_ERROR(Flush());
    }
    return handle;
  }
  Status Skip(const std::string& name, const std::string& why, Unusable kind) override {
    sum_->unusable[static_cast<int>(kind)]++;
    const std::string line = name + ": " + why;
    if (o_.strict) return Status::InvalidArgument("--strict: " + line);
    Report(line + " (skipped)");
    return Status::OK();
  }
  void Note(const std::string& message) override { Report(message); }
  void Read(uint64_t done, uint64_t total) override {
    read_done_ = done;
    read_total_ = total;
    if (events_.progress) events_.progress(read_phase_, done, total, done, false);
  }
  Status Interrupted() const override {
    if (o_.interrupt != nullptr && o_.interrupt->load(std::memory_order_relaxed)) {
      return Status::Aborted("interrupted; nothing of this pack is left in " + o_.out);
    }
    return Status::OK();
  }

 private:
  struct Job {
    int64_t handle;
    std::string bytes;
  };
  void Report(const std::string& line) {
    if (events_.report) events_.report(line);
  }
  Status Flush();
  Status SetUpRange(DatasetWriterOptions* wo);
  Status SetUpResume(DatasetWriterOptions* wo);
  Result<nlohmann::json> Settings(const DatasetWriterOptions& wo, bool* identified) const;
  std::string PlanDigest(const std::vector<Sample>& samples) const;
  Status ResumeFromPlan(const std::vector<Sample>& samples, size_t* first);
  Result<bool> AcceptShard(const std::vector<Sample>& samples, const ShardReader& shard);
  void Prepare(const Sample& s, Slot* slot) const;
  Status SkipUnprepared(const Sample& s, const Status& why);
  Manifest MakeManifest(const Listing& listing) const;
  Status CheckKeys(std::vector<Sample>* samples);
  Status WriteAll(std::vector<Sample>* samples, size_t first);
  Status Write(const Sample& s, PreparedImage* p) {
    sum_->conversions.Count(p->change);
    SK_RETURN_IF_ERROR(writer_->Add(p->jpeg, s.label, s.key));
    sum_->packed++;
    return Status::OK();
  }

  SampleSource* source_;
  const PackOptions& o_;
  const PackEvents& events_;
  PackSummary* sum_;
  const RecordSpec spec_;
  Env* const env_;
  int threads_;
  uint64_t raw_size_;
  RecordRule rule_;  // how a sample becomes its record
  std::string read_phase_;
  uint64_t read_done_ = 0, read_total_ = 0;  // the source's last Read()
  std::unique_ptr<DatasetWriter> writer_;
  Spill spill_;
  std::vector<Held> held_;
  std::vector<Sample> added_;
  std::vector<Job> batch_;
  size_t batch_bytes_ = 0;
  PartInfo part_;  // count 0: the whole dataset
  // Fixed-size records known up front: the records [part_.first_record,
  // part_end_) this run writes, listed by the source through SetRange.
  bool ranged_ = false;
  uint64_t part_end_ = 0;
  std::string settings_;  // a part's, or a resumable pack's, as JSON
  // Records known only after Scan (images): resumption is decided then, over
  // the plan (PlanDigest); resume_cursor_ is the next planned sample the
  // shards kept so far have not covered.
  bool resume_later_ = false;
  size_t resume_cursor_ = 0;
};

Status Packer::Flush() {
  const size_t n = batch_.size();
  std::vector<Status> status(n);
  std::vector<PreparedImage> prepared(n);
  std::vector<uint32_t> crc(n);
#pragma omp parallel for num_threads(threads_) schedule(dynamic, 4)
  for (size_t i = 0; i < n; ++i) {
    status[i] = PrepareNoThrow(std::move(batch_[i].bytes), rule_, &prepared[i]);
    if (status[i].ok()) crc[i] = crc32c::Value(prepared[i].jpeg.data(), prepared[i].jpeg.size());
  }
  for (size_t i = 0; i < n; ++i) {
    Held& h = held_[static_cast<size_t>(batch_[i].handle)];
    if (!status[i].ok()) {
      h.error = status[i].message();
      continue;
    }
    SK_RETURN_IF_ERROR(spill_.Append(prepared[i].jpeg, &h.offset));
    h.size = prepared[i].jpeg.size();
    h.crc = crc[i];
    h.change = prepared[i].change;
  }
  batch_.clear();
  batch_bytes_ = 0;
  return Status::OK();
}

// Every key usable (1..kMaxKeySize bytes, stored as the bytes the source
// names it with; others skipped by name) and
// unique (sources keep one of each member; two samples with one key are a
// source's error).
Status Packer::CheckKeys(std::vector<Sample>* samples) {
  std::vector<Sample> kept;
  kept.reserve(samples->size());
  for (auto& s : *samples) {
    if (s.key.empty() || s.key.size() > format::kMaxKeySize) {
      SK_RETURN_IF_ERROR(Skip(s.name,
                              "a name of " + std::to_string(s.key.size()) +
                                  " bytes (keys are 1 to " + std::to_string(format::kMaxKeySize) +
                                  " bytes)",
                              Unusable::kBadName));
      continue;
    }
    kept.push_back(std::move(s));
  }
  *samples = std::move(kept);
  std::vector<std::pair<uint64_t, size_t>> hashes(samples->size());
  for (size_t i = 0; i < samples->size(); ++i) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : (*samples)[i].key) h = (h ^ c) * 1099511628211ull;
    hashes[i] = {h, i};
  }
  std::sort(hashes.begin(), hashes.end());
  for (size_t i = 1; i < hashes.size(); ++i) {
    if (hashes[i].first != hashes[i - 1].first) continue;
    const Sample& a = (*samples)[hashes[i - 1].second];
    const Sample& b = (*samples)[hashes[i].second];
    if (a.key == b.key) {
      // Two places, or one place twice (a WebDataset key in two runs of one
      // shard): then which of its samples, in the source's order.
      const auto [first, second] = std::minmax(hashes[i - 1].second, hashes[i].second);
      return Status::InvalidArgument(b.name + ": key '" + Printable(b.key) + "' given twice (" +
                                     (a.name != b.name
                                          ? "also " + a.name
                                          : "samples " + std::to_string(first + 1) + " and " +
                                                std::to_string(second + 1) + " of the source") +
                                     ")");
    }
  }
  return Status::OK();
}

// A listed sample's stored bytes, into slot: from the spill, or read from
// the source and prepared. Thread-safe.
void Packer::Prepare(const Sample& s, Slot* slot) const {
  slot->in_bytes = 0;
  slot->status = slot->fatal = Status::OK();
  if (s.held >= 0) {
    const Held& h = held_[static_cast<size_t>(s.held)];
    if (!h.error.empty()) {
      slot->status = Status::Corruption(h.error);
      return;
    }
    slot->image.change = h.change;
    slot->fatal = spill_.Read(h.offset, h.size, &slot->image.jpeg);
    return;
  }
  std::string bytes;
  try {
    slot->status = source_->Read(s, kMaxSourceMember, &bytes);
  } catch (const std::exception& e) {
    slot->fatal = Status::IOError(s.name + ": " + e.what());
    return;
  }
  if (!slot->status.ok()) return;
  slot->in_bytes = bytes.size();
  slot->status = PrepareNoThrow(std::move(bytes), rule_, &slot->image);
}

// A sample that could not be prepared: skipped, named. A reader's error is
// located at the file (the member named); a decoder's is not.
Status Packer::SkipUnprepared(const Sample& s, const Status& why) {
  const ErrorLocation* at = why.location();
  const bool named = at != nullptr && at->ToString() == s.name;
  return Skip(s.name, named ? why.what() : why.message(), Unusable::kBadImage);
}

// The samples from `first` on (those before it are in shards a killed run
// finished), prepared in parallel chunks and written in order.
Status Packer::WriteAll(std::vector<Sample>* samples, size_t first) {
  const std::string phase = "write shards";
  const size_t chunk = static_cast<size_t>(threads_) * 64;
  std::vector<Slot> slots(chunk);
  if (events_.progress && first < samples->size()) {  // the phase's clock starts
    events_.progress(phase, first, samples->size(), writer_->bytes_written(), false);
  }
  for (size_t begin = first; begin < samples->size(); begin += chunk) {
    SK_RETURN_IF_ERROR(Interrupted());
    const size_t n = std::min(chunk, samples->size() - begin);
#pragma omp parallel for num_threads(threads_) schedule(dynamic, 4)
    for (size_t i = 0; i < n; ++i) Prepare((*samples)[begin + i], &slots[i]);
    for (size_t i = 0; i < n; ++i) {
      Slot& slot = slots[i];
      const Sample& s = (*samples)[begin + i];
      sum_->bytes_in += slot.in_bytes;
      SK_RETURN_IF_ERROR(slot.fatal);  // the spill, not the member: no dataset
      if (!slot.status.ok()) {
        SK_RETURN_IF_ERROR(SkipUnprepared(s, slot.status));
        continue;
      }
      SK_RETURN_IF_ERROR(Write(s, &slot.image));
      slot.image.jpeg.clear();
      slot.image.jpeg.shrink_to_fit();
    }
    if (events_.progress) {
      events_.progress(phase, begin + n, samples->size(), writer_->bytes_written(), false);
    }
  }
  // Sources that write their records themselves (IDX, HDF5) list no samples:
  // no phase to report.
  if (events_.progress && !samples->empty()) {
    events_.progress(phase, samples->size(), samples->size(), writer_->bytes_written(), true);
  }
  return Status::OK();
}

// Which records and shards of the whole a part writes (SplitIntoParts).
Result<PartInfo> PlanPart(const std::string& source, uint64_t records, uint64_t per_shard,
                          uint32_t index, uint32_t count, uint64_t* end_record) {
  auto range = SplitIntoParts(PartSpec{index, count}, records, per_shard);
  if (!range.ok()) return Status::InvalidArgument(source + ": " + range.status().message());
  PartInfo p;
  p.index = index;
  p.count = count;
  p.first_shard = range->first_shard;
  p.first_record = range->first_record;
  p.total_records = records;
  *end_record = range->end_record;
  return p;
}

// The tool's settings (PackOptions::settings) with the packer's that every
// pack's bytes depend on; *identified: the tool gave some.
Result<nlohmann::json> Packer::Settings(const DatasetWriterOptions& wo, bool* identified) const {
  nlohmann::json settings = nlohmann::json::parse(o_.settings, nullptr, /*allow_exceptions=*/false);
  if (!settings.is_object()) return Status::InvalidArgument("settings: not a JSON object");
  *identified = !settings.empty();
  settings["shardkit"] = kVersion;
  settings["kind"] = RecordKindName(spec_.kind);
  settings["shape"] = spec_.shape;
  settings["compression"] = NameOf(kCompressionModeNames, wo.shard.compression);
  settings["zstd_level"] = wo.shard.zstd_level;
  settings["block_size"] = wo.shard.block_size;
  return settings;
}

// Refuses --part for a source whose records cannot be split exactly. For a
// source of fixed-size records known up front, plans the records this run
// writes (a part's, named as the whole's shards, or all of them) and the
// settings that decide their shards' bytes: a part's digest, and the
// fingerprint by which a killed run of the same settings is resumed.
Status Packer::SetUpRange(DatasetWriterOptions* wo) {
  const bool fixed = spec_.kind != format::RecordKind::kJpeg && spec_.source_order &&
                     spec_.records > 0 && wo->records_per_shard > 0;
  if (o_.part_count > 0 && spec_.kind == format::RecordKind::kJpeg) {
    return Status::Unsupported(
        "--part: " + source_->name() +
        ": images cannot be split into exact parts: which are kept and how many bytes each is "
        "stored in (so where a part's records and shards start) are known only once every image "
        "before them is decoded; pack this source in one process");
  }
  if (o_.part_count > 0 && !fixed) {
    return Status::Unsupported("--part: " + source_->name() +
                               " does not know its records before reading them all; pack it in "
                               "one process");
  }
  if (!fixed) return SetUpResume(wo);
  ranged_ = true;
  part_end_ = spec_.records;
  if (o_.part_count > 0) {
    SK_ASSIGN_OR_RETURN(part_, PlanPart(source_->name(), spec_.records, wo->records_per_shard,
                                        o_.part_index, o_.part_count, &part_end_));
    wo->first_shard = part_.first_shard;
  }
  bool identified = false;
  SK_ASSIGN_OR_RETURN(nlohmann::json settings, Settings(*wo, &identified));
  settings["records"] = spec_.records;
  settings["records_per_shard"] = wo->records_per_shard;
  settings_ = settings.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (part_.count > 0) part_.settings = SettingsDigest(settings_);
  if (identified) {
    const nlohmann::json fingerprint = {
        {"settings", settings}, {"part", {{"index", o_.part_index}, {"count", o_.part_count}}}};
    wo->resume_fingerprint =
        fingerprint.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    // At least one record is left to write: the source lists a range.
    wo->resume_max_shards = (part_end_ - part_.first_record - 1) / wo->records_per_shard;
  }
  return Status::OK();
}

// Records known only once the source is read (images, cut into shards by
// bytes): the settings that decide their bytes, with the packer's own; the
// fingerprint adds the plan once Scan has made it (ResumeFromPlan). A source
// whose samples go straight to the writer as they stream is not resumed.
Status Packer::SetUpResume(DatasetWriterOptions* wo) {
  if (spec_.source_order) return Status::OK();
  bool identified = false;
  SK_ASSIGN_OR_RETURN(nlohmann::json settings, Settings(*wo, &identified));
  resume_later_ = true;
  wo->resume_later = true;
  if (!identified) return Status::OK();  // never resumed
  settings["shard_size"] = wo->shard_size;
  settings["resize_short"] = o_.resize_short;
  settings["quality"] = o_.quality;
  settings["seed"] = o_.seed;
  settings_ = settings.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return Status::OK();
}

// What decides every record's stored bytes and place, in write order: its
// key and label, and its stored bytes (size and CRC32C, kept from the spill),
// or for a file the source reads at write time, the file's stamp. Digested a
// megabyte at a time, so a large listing needs no copy of itself.
std::string Packer::PlanDigest(const std::vector<Sample>& samples) const {
  std::string chunk, digests;
  auto put = [&chunk](uint64_t v) { chunk.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  for (const Sample& s : samples) {
    put(s.key.size());
    chunk += s.key;
    put(static_cast<uint64_t>(static_cast<int64_t>(s.label)));
    if (s.held < 0) {
      chunk += 'R';
      put(s.stamp);
    } else if (const Held& h = held_[static_cast<size_t>(s.held)]; !h.error.empty()) {
      chunk += 'E';
      put(h.error.size());
      chunk += h.error;
    } else {
      chunk += 'H';
      put(h.size);
      put(h.crc);
    }
    if (chunk.size() >= (1u << 20)) digests += SettingsDigest(chunk), chunk.clear();
  }
  return SettingsDigest(digests + SettingsDigest(chunk));
}

// Decides, once the plan is known, what of a killed run of the same settings
// and plan is kept: its finished shards, each checked against the plan
// (AcceptShard). *first is the first planned sample left to write.
Status Packer::ResumeFromPlan(const std::vector<Sample>& samples, size_t* first) {
  *first = 0;
  if (!resume_later_) return Status::OK();
  std::string fingerprint;
  if (!settings_.empty()) {
    const nlohmann::json f = {{"settings", nlohmann::json::parse(settings_)},
                              {"samples", samples.size()},
                              {"plan", PlanDigest(samples)}};
    fingerprint = f.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  resume_cursor_ = 0;
  SK_RETURN_IF_ERROR(writer_->Resume(fingerprint, UINT64_MAX, [&](const ShardReader& shard) {
    return AcceptShard(samples, shard);
  }));
  sum_->resumed_shards = writer_->resumed_shards();
  sum_->packed = writer_->records();
  *first = resume_cursor_;
  return Status::OK();
}

// A kept shard is the next one this run would write: its records are the
// next planned samples in order (key, label, and for spilled ones the stored
// size and CRC32C), and every planned sample it passes over is one this run
// skips too (reported and counted here, as a run never killed does).
Result<bool> Packer::AcceptShard(const std::vector<Sample>& samples, const ShardReader& shard) {
  size_t at = resume_cursor_;
  std::vector<std::pair<const Sample*, Status>> skipped;
  Slot slot;
  for (uint32_t i = 0; i < shard.num_records(); ++i, ++at) {
    for (; at < samples.size() && samples[at].key != shard.key(i); ++at) {
      Prepare(samples[at], &slot);
      SK_RETURN_IF_ERROR(slot.fatal);
      if (slot.status.ok()) return false;  // this run writes it
      skipped.emplace_back(&samples[at], slot.status);
    }
    if (at == samples.size()) return false;
    const Sample& s = samples[at];
    const format::RecordEntry e = shard.record(i);
    if (e.label != s.label) return false;
    if (s.held < 0) continue;  // its file's stamp is in the plan
    const Held& h = held_[static_cast<size_t>(s.held)];
    if (!h.error.empty() || e.length != h.size || e.crc32c != h.crc) return false;
  }
  for (const auto& [s, why] : skipped) SK_RETURN_IF_ERROR(SkipUnprepared(*s, why));
  for (size_t k = resume_cursor_; k < at; ++k) {
    if (samples[k].held < 0) continue;
    sum_->conversions.Count(held_[static_cast<size_t>(samples[k].held)].change);
  }
  resume_cursor_ = at;
  return true;
}

// The manifest (a part's: with its place and settings, which created_by
// also carries in full).
Manifest Packer::MakeManifest(const Listing& listing) const {
  Manifest m;
  m.record.kind = spec_.kind;
  m.record.shape = spec_.shape;
  m.classes = listing.classes;
  m.created_by = o_.created_by;
  if (part_.count == 0) return m;
  m.part = part_;
  nlohmann::json created =
      nlohmann::json::parse(o_.created_by, nullptr, /*allow_exceptions=*/false);
  if (!created.is_object()) created = nlohmann::json::object();
  created["settings"] = nlohmann::json::parse(settings_);
  m.created_by = created.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return m;
}

Status Packer::Run() {
  const auto start = std::chrono::steady_clock::now();
  if (o_.resize_short < 0) return Status::InvalidArgument("--resize-short must be positive");
  if (o_.quality < 1 || o_.quality > 100) {
    return Status::InvalidArgument("--quality must be in 1..100");
  }
  DatasetWriterOptions wo = DatasetRules(spec_.kind, raw_size_, o_.shard_size);
  wo.overwrite = o_.force;
  wo.env = env_;
  wo.shard.zstd_level = o_.zstd_level;
  wo.shard.block_size = o_.block_size;
  SK_RETURN_IF_ERROR(SetUpRange(&wo));
  // Shards of a fixed record count end where they end however blocks
  // compress: their blocks compress on several threads, the same bytes (at
  // most 16: each holds a zstd context, tens of MB at high levels, and 16
  // compress faster than any source here produces).
  if (wo.records_per_shard > 0) wo.shard.compression_threads = std::min(threads_, 16);
  SK_RETURN_IF_ERROR(source_->CheckOutput(o_.out));
  // OUT first (its lock, and the refusal to replace a dataset without
  // --force) before the source is read; then the spill beside the shards.
  SK_ASSIGN_OR_RETURN(writer_, DatasetWriter::Create(o_.out, wo));
  SK_RETURN_IF_ERROR(spill_.Open(env_, o_.out));
  // What a killed run finished is kept: the source lists what comes after it.
  // (Images: decided once the plan is known, ResumeFromPlan.)
  sum_->resumed_shards = writer_->resumed_shards();
  sum_->packed = writer_->records();
  if (ranged_) {
    SK_RETURN_IF_ERROR(source_->SetRange(part_.first_record + writer_->records(), part_end_));
  }
  read_phase_ = "read " + source_->name().substr(source_->name().rfind('/') + 1);
  if (events_.progress) events_.progress(read_phase_, 0, 0, 0, false);  // its clock starts
  SK_ASSIGN_OR_RETURN(Listing listing, source_->Scan(this));
  SK_RETURN_IF_ERROR(Flush());
  SK_RETURN_IF_ERROR(Interrupted());
  if (events_.progress) {
    // Scanned to its end: all of a known total was read (a source reports
    // now and then, not at its last byte); one that reported no bytes (a
    // folder, listed: its files are read as the shards are written) none.
    const uint64_t done = read_total_ > 0 ? read_total_ : read_done_;
    events_.progress(read_phase_, done, read_total_, done, true);
  }

  std::vector<Sample> samples = std::move(added_);
  samples.reserve(samples.size() + listing.samples.size());
  for (auto& s : listing.samples) samples.push_back(std::move(s));
  SK_RETURN_IF_ERROR(CheckKeys(&samples));
  if (!spec_.source_order) KeyedShuffle(&samples, KeyedRng(o_.seed, 0x1A6E7E7));
  size_t first = 0;
  SK_RETURN_IF_ERROR(ResumeFromPlan(samples, &first));
  SK_RETURN_IF_ERROR(WriteAll(&samples, first));
  // A part of no record is refused by Finish, as any pack of nothing.
  if (part_.count > 0 && sum_->packed > 0 && sum_->packed != part_end_ - part_.first_record) {
    return Status::Corruption(source_->name() + ": part " + std::to_string(part_.index) +
                              " packed " + std::to_string(sum_->packed) + " records of " +
                              std::to_string(part_end_ - part_.first_record));
  }
  const Status finished = writer_->Finish(MakeManifest(listing));
  if (!finished.ok() && writer_->records() == 0) {  // Finish's refusal, naming the source
    return Status::InvalidArgument(source_->name() + ": no " +
                                   (spec_.kind == format::RecordKind::kJpeg ? "image" : "record") +
                                   " could be packed");
  }
  SK_RETURN_IF_ERROR(finished);
  sum_->classes = listing.classes.size();
  sum_->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  sum_->shards = writer_->shards();
  sum_->bytes_out = writer_->bytes_written();
  return Status::OK();
}

}  // namespace

Status Pack(SampleSource* source, const PackOptions& options, const PackEvents& events,
            PackSummary* summary) {
  *summary = PackSummary();
  Packer packer(source, options, events, summary);
  return packer.Run();
}

}  // namespace shardkit
