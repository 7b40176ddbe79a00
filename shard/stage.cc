// Staging a dataset to local disk (StageDataset) and fetching one file of
// one (FetchFile), both checked against a manifest.
#include "shard/stage.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "shard/manifest.h"
#include "storage/file_io.h"
#include "storage/output_file.h"

namespace shardkit {
namespace {

constexpr size_t kChunk = 16 << 20;

bool SameDirectory(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && S_ISDIR(sa.st_mode) &&
         sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// Whether the local file `path` is a regular file of `info`'s size and CRC32C.
bool Intact(const std::string& path, const ShardInfo& info) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) != info.bytes) {
    return false;
  }
  auto crc = FileCrc32c(Env::Default(), path);
  return crc.ok() && *crc == info.crc32c;
}

Status Mismatch(const std::string& from, uint64_t size, uint32_t crc, const ShardInfo& want) {
  return Status::Corruption(from + ": " + std::to_string(size) + " bytes, CRC32C " +
                            Crc32cHex(crc) + " after the copy; the manifest says " +
                            std::to_string(want.bytes) + " bytes, " + Crc32cHex(want.crc32c) +
                            " (nothing kept)");
}

// One shard of `src` into `dest` under a temporary name, checked, renamed.
Status StageShard(const std::string& src, const std::string& dest, const ShardInfo& info,
                  const Cancel* cancel, uint64_t n) {
  const std::string from = JoinPath(src, info.file), to = JoinPath(dest, info.file);
  const std::string tmp = JoinPath(
      dest, "." + info.file + ".staging." + std::to_string(::getpid()) + "." + std::to_string(n));
  auto crc = CopyToLocalFile(from, tmp, cancel);
  if (!crc.ok()) return crc.status();
  auto size = FileSize(tmp);
  if (!size.ok() || *size != info.bytes || *crc != info.crc32c) {
    Env::Default()->RemoveFile(tmp).IgnoreError();
    return Mismatch(from, size.ok() ? *size : 0, *crc, info);
  }
  if (Status s = Env::Default()->RenameFile(tmp, to); !s.ok()) {
    Env::Default()->RemoveFile(tmp).IgnoreError();
    return s;
  }
  return Status::OK();
}

// What a killed stager left: temporaries, never renamed into place.
void RemoveLeftovers(const std::string& dest) {
  auto names = Env::Default()->ListDir(dest);
  if (!names.ok()) return;
  for (const std::string& name : *names) {
    if (name[0] == '.' && name.find(".staging.") != std::string::npos) {
      Env::Default()->RemoveFile(JoinPath(dest, name)).IgnoreError();
    }
  }
}

// Refuses a stage that would not fit: the shards not intact in `dest`.
Status CheckSpace(const std::string& dest, const Manifest& m, std::vector<bool>* intact) {
  uint64_t need = 0;
  intact->assign(m.shards.size(), false);
  for (size_t i = 0; i < m.shards.size(); ++i) {
    (*intact)[i] = Intact(JoinPath(dest, m.shards[i].file), m.shards[i]);
    if (!(*intact)[i]) need += m.shards[i].bytes;
  }
  struct statvfs fs;
  if (::statvfs(dest.c_str(), &fs) != 0) return Status::OK();  // unknown: the copy will tell
  const uint64_t avail = uint64_t{fs.f_bavail} * fs.f_frsize;
  if (need > avail) {
    return Status::IOError(dest + ": not enough space: " + std::to_string(need) +
                           " bytes needed, " + std::to_string(avail) + " available");
  }
  return Status::OK();
}

// The source's checks: a local source is a dataset, and dest is neither it
// nor inside it.
Status CheckPlaces(const std::string& src, const std::string& dest, bool* itself) {
  *itself = false;
  if (IsObjectStoreUrl(src)) return Status::OK();
  SK_RETURN_IF_ERROR(ReadManifest(src, Env::Default()).status());
  if (SameDirectory(src, dest)) {
    *itself = true;
    return Status::OK();
  }
  return CheckOutputOutsideInputs(dest, {src});
}

}  // namespace

Result<uint32_t> CopyToLocalFile(const std::string& from, const std::string& to,
                                 const Cancel* cancel) {
  SK_ASSIGN_OR_RETURN(Env * env, Env::ForPath(from));
  SK_ASSIGN_OR_RETURN(auto in, env->OpenForReads(from, cancel));
  SK_ASSIGN_OR_RETURN(auto out, WritableFile::Create(to));
  auto fail = [&](Status s) {
    out.reset();
    Env::Default()->RemoveFile(to).IgnoreError();
    return s;
  };
  std::vector<char> buf(static_cast<size_t>(std::min<uint64_t>(kChunk, in->size())));
  in->WillNeed(0, 2 * kChunk);  // two chunks ahead: a remote file streams
  for (uint64_t off = 0; off < in->size(); off += kChunk) {
    if (cancel != nullptr && cancel->load()) return fail(Status::Aborted(from + ": cancelled"));
    in->WillNeed(off + 2 * kChunk, kChunk);
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, in->size() - off));
    if (Status s = in->Read(off, n, buf.data()); !s.ok()) return fail(s);
    if (Status s = out->Append(buf.data(), n); !s.ok()) return fail(s);
  }
  if (Status s = out->Sync(); !s.ok()) return fail(s);
  if (Status s = out->Close(); !s.ok()) return fail(s);
  return out->crc32c();
}

Status StageDataset(const std::string& src, const std::string& dest, const StageOptions& options,
                    const StageProgress& progress, StageReport* report) {
  *report = StageReport();
  const uint64_t start = MonotonicNs();
  if (options.jobs < 1 || options.jobs > 64) {
    return Status::InvalidArgument("--jobs " + std::to_string(options.jobs) + " is not in 1..64");
  }
  SK_RETURN_IF_ERROR(CheckPlaces(src, dest, &report->source_itself));
  if (report->source_itself) return Status::OK();
  SK_RETURN_IF_ERROR(CheckOutputDir(dest));
  SK_RETURN_IF_ERROR(Env::Default()->CreateDirs(dest));
  // One stager of `dest` at a time (and no writer of a dataset there).
  SK_ASSIGN_OR_RETURN(auto lock, Env::Default()->LockDir(dest, /*wait=*/true, options.cancel));
  RemoveLeftovers(dest);
  // The manifest, fetched once: shards are listed from it, checked against
  // it, and it is what is installed.
  SK_ASSIGN_OR_RETURN(Env * env, Env::ForPath(src));
  SK_ASSIGN_OR_RETURN(std::string text,
                      env->ReadFile(JoinPath(src, kManifestName), 256ull << 20, options.cancel));
  SK_ASSIGN_OR_RETURN(Manifest m, ParseManifest(text, JoinPath(src, kManifestName)));
  if (m.part.count > 0) {
    return Status::InvalidArgument(src + ": a part of a dataset, not a whole one: merge it first");
  }
  std::vector<bool> intact;
  SK_RETURN_IF_ERROR(CheckSpace(dest, m, &intact));
  // A staged manifest is only valid once every shard is.
  SK_RETURN_IF_ERROR(Env::Default()->RemoveFile(JoinPath(dest, kManifestName)));
  report->shards = m.shards.size();
  uint64_t total = 0;
  for (size_t i = 0; i < m.shards.size(); ++i) total += intact[i] ? 0 : m.shards[i].bytes;
  std::mutex mu;
  std::atomic<size_t> next{0};
  std::vector<Status> errors(m.shards.size());
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < m.shards.size();) {
      if (options.cancel != nullptr && options.cancel->load()) return;
      if (intact[i]) continue;
      errors[i] = StageShard(src, dest, m.shards[i], options.cancel, i);
      std::lock_guard<std::mutex> hold(mu);
      if (!errors[i].ok()) continue;
      report->copied++;
      report->bytes_copied += m.shards[i].bytes;
      if (progress) progress(report->bytes_copied, total);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int>(options.jobs, static_cast<int>(m.shards.size())); ++t) {
    pool.emplace_back(work);
  }
  work();
  for (auto& t : pool) t.join();
  report->kept = static_cast<uint64_t>(std::count(intact.begin(), intact.end(), true));
  report->seconds = double(MonotonicNs() - start) * 1e-9;
  RemoveLeftovers(dest);
  if (options.cancel != nullptr && options.cancel->load()) {
    return Status::Aborted(dest +
                           ": staging interrupted; no manifest installed (a rerun keeps "
                           "what is intact)");
  }
  for (const Status& e : errors) SK_RETURN_IF_ERROR(e);
  return WriteFileAtomic(Env::Default(), JoinPath(dest, kManifestName), text);
}

Status FetchFile(const std::string& from, const std::string& to_path, const std::string& manifest) {
  // A regular file (a link's, followed): a copy found bad is removed, which a
  // device must never be; and not the file being copied or its dataset's.
  SK_ASSIGN_OR_RETURN(const std::string to, ResolveRegularOutput(to_path));
  const size_t slash = from.rfind('/');
  const std::string from_dir = slash == std::string::npos ? "." : from.substr(0, slash);
  const std::string name = slash == std::string::npos ? from : from.substr(slash + 1);
  std::vector<std::string> inputs = {from};
  if (!manifest.empty() && !IsDirectory(manifest)) inputs.push_back(manifest);
  if (!IsObjectStoreUrl(from) && Env::Default()->FileExists(JoinPath(from_dir, kManifestName))) {
    inputs.push_back(from_dir);  // the dataset `from` belongs to: none of its files
  }
  SK_RETURN_IF_ERROR(CheckOutputOutsideInputs(to_path, inputs));
  // Nor into another dataset: get copies one file, it does not publish into
  // a dataset (whose manifest would not know the bytes).
  const size_t to_at = to.rfind('/');
  const std::string to_dir = to_at == std::string::npos ? "." : to.substr(0, to_at);
  if (Env::Default()->FileExists(JoinPath(to_dir, kManifestName))) {
    return Status::InvalidArgument(to_path + ": inside dataset " + to_dir +
                                   " (it has a manifest.json); get a file elsewhere");
  }
  // Copied to TO.tmp, checked, then renamed: TO is never a partial or
  // unchecked copy, and a file TO shares by hard link is never written. A
  // stale TO.tmp goes first (copying into it would follow a link).
  const std::string tmp = to + ".tmp";
  SK_RETURN_IF_ERROR(Env::Default()->RemoveFile(tmp));
  SK_ASSIGN_OR_RETURN(const uint32_t crc, CopyToLocalFile(from, tmp));
  auto discard = [&](Status s) {
    Env::Default()->RemoveFile(tmp).IgnoreError();
    return s;
  };
  if (name != kManifestName) {
    Result<Manifest> m = Status::NotFound("");
    if (manifest.empty()) {
      m = ReadManifest(from_dir);
    } else {
      auto text = Env::Default()->ReadFile(manifest, 256ull << 20);
      m = text.ok() ? ParseManifest(*text, manifest) : Result<Manifest>(text.status());
      if (!m.ok()) return discard(m.status());
    }
    if (!m.ok() && !m.status().IsNotFound()) return discard(m.status());
    if (m.ok()) {  // a file of no dataset is copied as it is
      for (const ShardInfo& shard : m->shards) {
        if (shard.file != name) continue;
        auto size = FileSize(tmp);
        if (!size.ok() || *size != shard.bytes || crc != shard.crc32c) {
          return discard(Mismatch(from, size.ok() ? *size : 0, crc, shard));
        }
      }
    }
  }
  if (Status s = Env::Default()->RenameFile(tmp, to); !s.ok()) return discard(s);
  return Status::OK();
}

}  // namespace shardkit
