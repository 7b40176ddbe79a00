// Dataset::Open and VerifyDataset.
#include "shard/dataset.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "base/crc32c.h"
#include "storage/file_io.h"

namespace shardkit {

namespace {

// Runs fn(0) ... fn(n - 1) on up to `threads` threads; the first error (by index) is returned.
Status ForEachShard(size_t n, int threads, const std::function<Status(size_t)>& fn) {
  std::vector<Status> errors(n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) errors[i] = fn(i);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int>(threads, static_cast<int>(n)); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (Status& e : errors) SK_RETURN_IF_ERROR(e);
  return Status::OK();
}

// A shard's header names the kind of record it was written with; a manifest
// that says otherwise (edited, or a shard copied in from another dataset)
// would have the loader decode raw bytes as JPEG or the reverse.
Status CheckShardKind(const std::string& path, const ShardReader& reader,
                      const RecordFormat& record) {
  if (ShardKindFits(reader.kind(), record.kind)) return Status::OK();
  return Status::Corruption(path + ": " + ShardKindDisagreement(reader.kind(), record.kind));
}

}  // namespace

Result<std::unique_ptr<Dataset>> Dataset::Open(const std::string& dir, Env* env,
                                               const Cancel* cancel) {
  if (env == nullptr) {
    SK_ASSIGN_OR_RETURN(env, Env::ForPath(dir));
  }
  auto ds = std::unique_ptr<Dataset>(new Dataset());
  ds->dir_ = dir;
  ds->remote_ = env->remote();
  SK_ASSIGN_OR_RETURN(ds->manifest_, ReadManifest(dir, env, cancel));
  const std::vector<ShardInfo>& shards = ds->manifest_.shards;
  ds->shards_.resize(shards.size());
  // Remote storage answers in milliseconds per request: its shards are
  // opened side by side (a header, a trailer and an index each).
  SK_RETURN_IF_ERROR(ForEachShard(shards.size(), env->remote() ? 32 : 1, [&](size_t i) {
    const ShardInfo& info = shards[i];
    const std::string path = JoinPath(dir, info.file);
    auto reader = ShardReader::Open(path, env, cancel);
    if (!reader.ok() && reader.status().IsNotFound()) {
      return Status::NotFound(path + ": shard named in the manifest is missing");
    }
    SK_RETURN_IF_ERROR(reader.status());
    if ((*reader)->file_size() != info.bytes) {
      return Status::Corruption(path + ": file is " + std::to_string((*reader)->file_size()) +
                                " bytes, the manifest says " + std::to_string(info.bytes));
    }
    if ((*reader)->num_records() != info.records) {
      return Status::Corruption(path + ": holds " + std::to_string((*reader)->num_records()) +
                                " records, the manifest says " + std::to_string(info.records));
    }
    // Object storage keeps the CRC32C a shard was pushed with: another file
    // of the same size and count (a push --force of a dataset of the same
    // shape, under way) is told at open, never read as this one.
    if (auto stored = (*reader)->file().stored_crc32c(); stored && *stored != info.crc32c) {
      return Status::Corruption(path + ": is not the shard the manifest names (its CRC32C is " +
                                Crc32cHex(*stored) + ", the manifest's " + Crc32cHex(info.crc32c) +
                                "): the dataset is being replaced (a push --force?); open it "
                                "again once that is done");
    }
    SK_RETURN_IF_ERROR(CheckShardKind(path, **reader, ds->manifest_.record));
    ds->shards_[i] = std::move(reader).value();
    return Status::OK();
  }));
  ds->held_locally_ =
      ds->remote_ && std::all_of(ds->shards_.begin(), ds->shards_.end(),
                                 [](const auto& r) { return r->file().held_locally(); });
  ds->first_record_.push_back(0);
  for (const auto& r : ds->shards_) {
    ds->first_record_.push_back(ds->first_record_.back() + r->num_records());
  }
  return ds;
}

void Dataset::AbortReads() const {
  for (const auto& s : shards_) s->AbortReads();
}

std::pair<uint32_t, uint32_t> Dataset::Locate(uint64_t global) const {
  auto it = std::upper_bound(first_record_.begin(), first_record_.end(), global);
  const size_t s = static_cast<size_t>(it - first_record_.begin()) - 1;
  return {static_cast<uint32_t>(s), static_cast<uint32_t>(global - first_record_[s])};
}

Result<DatasetSummary> Summarize(const Dataset& ds) {
  DatasetSummary out;
  out.class_counts.assign(ds.manifest().classes.size(), 0);
  for (size_t s = 0; s < ds.num_shards(); ++s) {
    const ShardReader& r = ds.shard(s);
    SK_RETURN_IF_ERROR(r.CheckIndex());
    for (uint32_t i = 0; i < r.num_records(); ++i) {
      const int32_t l = r.label(i);
      if (l >= 0 && static_cast<size_t>(l) < out.class_counts.size()) {
        out.class_counts[l]++;
      } else if (l == -1 || out.class_counts.empty()) {
        out.unlabeled++;
      } else {
        out.labels_outside_classes++;  // verify reports each
      }
    }
  }
  return out;
}

namespace {

// Checks one shard; returns the number of bad records (all of them when the
// shard cannot be opened) and whether the shard itself is bad.
void VerifyShard(Env* env, const std::string& dir, const Manifest& m, const ShardInfo& info,
                 const VerifyReporter& reporter, VerifyReport* r) {
  const std::string path = JoinPath(dir, info.file);
  auto report = [&](std::string msg) {
    reporter(VerifyProblem{VerifyProblem::Kind::kBad, std::move(msg)});
  };
  auto fail_shard = [&](const std::string& msg) {
    report(msg);
    r->shards_bad++;
    r->records_bad += info.records;
  };
  // A read that failed (storage, network) says nothing of the data: the
  // shard is unchecked, not bad.
  auto unreadable = [&](const Status& s) {
    reporter(VerifyProblem{VerifyProblem::Kind::kUnchecked, s.message() + kNotChecked});
    r->shards_unreadable++;
  };
  auto failed = [&](const Status& s) {
    if (s.IsIOError() || s.IsAborted()) return unreadable(s);
    fail_shard(s.message());
  };
  auto file = env->OpenForReads(path);
  if (!file.ok() && file.status().IsNotFound()) {
    return fail_shard(path + ": missing (named in the manifest)");
  }
  if (!file.ok()) return failed(file.status());
  const uint64_t size = (*file)->size();
  r->bytes += size;
  if (size != info.bytes) {
    return fail_shard(path + ": size " + std::to_string(size) + " bytes, manifest says " +
                      std::to_string(info.bytes));
  }
  auto reader = ShardReader::Open(std::move(file).value());
  if (!reader.ok()) return failed(reader.status());
  const ShardReader& sr = **reader;
  if (Status index = sr.CheckIndex(); !index.ok()) return fail_shard(index.message());
  if (sr.num_records() != info.records) {
    return fail_shard(path + ": holds " + std::to_string(sr.num_records()) +
                      " records, manifest says " + std::to_string(info.records));
  }
  if (Status kind = CheckShardKind(path, sr, m.record); !kind.ok()) {
    return fail_shard(kind.message());
  }
  // The whole-file CRC is accumulated from the reads the checks make anyway:
  // the header, every block as stored (blocks are contiguous), the index and
  // trailer, so the file is read once.
  const uint64_t tail_offset = sr.index_offset();
  std::string head(format::kHeaderSize, '\0'), tail(size - tail_offset, '\0');
  Status hs = sr.file().Read(0, head.size(), head.data());
  if (hs.ok()) hs = sr.file().Read(tail_offset, tail.size(), tail.data());
  if (!hs.ok()) return failed(hs);
  uint32_t file_crc = crc32c::Value(head.data(), head.size());
  bool file_crc_known = true;
  const uint64_t raw_size = m.record.raw_record_size();
  ReadScratch scratch;
  uint64_t bad = 0;
  // Blocks are read in order, a few ahead in the background (remote
  // storage: ranged GETs in flight while this one is checked).
  constexpr uint32_t kAhead = 8;
  for (uint32_t b = 0; b < std::min(kAhead, sr.num_blocks()); ++b) sr.PrefetchBlock(b);
  for (uint32_t b = 0; b < sr.num_blocks(); ++b) {
    if (b + kAhead < sr.num_blocks()) sr.PrefetchBlock(b + kAhead);
    const format::BlockEntry& be = sr.block(b);
    std::string_view stored;
    Status s = sr.ReadBlockInto(b, &scratch, &scratch.raw, &stored);
    if (s.IsIOError() || s.IsAborted()) return unreadable(s);
    if (stored.data() == nullptr) {
      file_crc_known = false;
    } else {
      file_crc = crc32c::Extend(file_crc, stored.data(), stored.size());
    }
    const std::string_view raw(scratch.raw.data(), s.ok() ? scratch.raw.size() : 0);
    if (!s.ok()) {
      // A stored block can still be checked record by record; report each.
      if (be.codec == static_cast<uint32_t>(format::Codec::kStored)) {
        for (uint32_t i = be.first_record; i < be.first_record + be.num_records; ++i) {
          std::string_view p;
          Status rs = sr.ReadRecord(i, &scratch, &p);
          if (!rs.ok()) {
            report(rs.message());
            ++bad;
          }
        }
        if (bad == 0) report(s.message());  // damage outside any record
      } else {
        report(s.message() + " (" + std::to_string(be.num_records) + " records lost)");
        bad += be.num_records;
      }
      continue;
    }
    for (uint32_t i = be.first_record; i < be.first_record + be.num_records; ++i) {
      std::string_view p;
      Status rs = sr.RecordFromBlock(i, raw, &p);
      if (!rs.ok()) {
        report(rs.message());
        ++bad;
        continue;
      }
      if (raw_size != 0 && p.size() != raw_size) {
        report(sr.Where(i) + ": " + std::to_string(p.size()) + " bytes, the record shape needs " +
               std::to_string(raw_size));
        ++bad;
        continue;
      }
      const int32_t label = sr.label(i);
      if (!m.classes.empty() && (label < -1 || label >= static_cast<int32_t>(m.classes.size()))) {
        report(sr.Where(i) + ": label " + std::to_string(label) + " outside the " +
               std::to_string(m.classes.size()) + " classes");
        ++bad;
      }
    }
  }
  file_crc = crc32c::Extend(file_crc, tail.data(), tail.size());
  const bool file_crc_ok = file_crc_known && file_crc == info.crc32c;
  if (file_crc_known && !file_crc_ok) {
    report(path + ": file checksum " + Crc32cHex(file_crc) + " differs from the manifest's " +
           Crc32cHex(info.crc32c));
  }
  r->records_bad += bad;
  if (bad > 0 || !file_crc_ok) r->shards_bad++;
}

}  // namespace

Status VerifyDataset(const std::string& dir, int threads, const VerifyReporter& report,
                     VerifyReport* out) {
  SK_ASSIGN_OR_RETURN(Env * env, Env::ForPath(dir));
  SK_ASSIGN_OR_RETURN(Manifest m, ReadManifest(dir, env));
  *out = VerifyReport();
  out->shards = m.shards.size();
  out->records = m.records();
  std::mutex mu;
  auto locked_report = [&](const VerifyProblem& p) {
    std::lock_guard<std::mutex> lock(mu);
    if (report) report(p);
  };
  std::atomic<size_t> next{0};
  auto work = [&]() {
    for (size_t i; (i = next.fetch_add(1)) < m.shards.size();) {
      VerifyReport r;
      VerifyShard(env, dir, m, m.shards[i], locked_report, &r);
      std::lock_guard<std::mutex> lock(mu);
      out->shards_bad += r.shards_bad;
      out->shards_unreadable += r.shards_unreadable;
      out->records_bad += r.records_bad;
      out->bytes += r.bytes;
    }
  };
  if (env->remote()) threads = std::max(threads, 16);  // shards side by side hide latency
  threads = std::max(1, std::min<int>(threads, static_cast<int>(m.shards.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return Status::OK();
}

}  // namespace shardkit
