// PushDataset: shards in parallel, then the manifest.
#include "shard/publish.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "base/crc32c.h"
#include "shard/manifest.h"
#include "storage/file_io.h"
#include "storage/remote/object_store.h"

namespace shardkit {
namespace {

constexpr size_t kChunk = kObjectPartBytes;

Status DamagedLocal(const std::string& path) {
  return Status::Corruption(path +
                            ": its checksum is not the manifest's: a damaged local "
                            "shard is not published (shardkit-pack verify tells more)");
}

// The local shard, opened, of the size the manifest gives.
Result<std::unique_ptr<RandomAccessFile>> OpenLocal(const std::string& path,
                                                    const ShardInfo& info) {
  SK_ASSIGN_OR_RETURN(auto in, Env::Default()->OpenForReads(path));
  if (in->size() != info.bytes) {
    return Status::Corruption(path + ": " + std::to_string(in->size()) +
                              " bytes, the manifest says " + std::to_string(info.bytes));
  }
  return in;
}

// The local shard's S3 ETag and CRC32C, read once; its CRC must be the
// manifest's (a damaged local shard is never published).
Status LocalDigest(const std::string& path, const ShardInfo& info, std::string* etag) {
  SK_ASSIGN_OR_RETURN(auto in, OpenLocal(path, info));
  ObjectETag tag;
  uint32_t crc = 0;
  std::string buf(kChunk, '\0');
  for (uint64_t off = 0; off < in->size(); off += kChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, in->size() - off));
    SK_RETURN_IF_ERROR(in->Read(off, n, buf.data()));
    tag.Update(std::string_view(buf.data(), n));
    crc = crc32c::Extend(crc, buf.data(), n);
  }
  if (crc != info.crc32c) return DamagedLocal(path);
  *etag = tag.Finish();
  return Status::OK();
}

// Whether the remote object `there` holds the local shard's bytes: its
// size and stored CRC32C, or (pushed without one) an ETag that is the MD5
// of the local bytes (read to compute it).
Result<bool> SameBytes(const RandomAccessFile& there, const std::string& local,
                       const ShardInfo& info) {
  if (there.size() != info.bytes) return false;
  if (auto crc = there.stored_crc32c()) return *crc == info.crc32c;
  std::string etag;
  SK_RETURN_IF_ERROR(LocalDigest(local, info, &etag));
  return there.version() == etag;
}

// One shard: kept if the remote object is the same bytes, else uploaded
// (the object completed only if its bytes' CRC32C is the manifest's, so a
// damaged local shard is never left complete).
Status PushShard(Env* env, const std::string& local, const std::string& remote,
                 const ShardInfo& info, const std::atomic<bool>* cancel,
                 const std::function<void(uint64_t)>& sent, bool* kept) {
  *kept = false;
  auto there = env->OpenForReads(remote);
  if (!there.ok() && !there.status().IsNotFound()) return there.status();
  if (there.ok()) {
    SK_ASSIGN_OR_RETURN(*kept, SameBytes(**there, local, info));
    if (*kept) return Status::OK();
  }
  SK_ASSIGN_OR_RETURN(auto in, OpenLocal(local, info));
  SK_ASSIGN_OR_RETURN(auto out, env->NewWritableFile(remote));
  out->ExpectCrc32c(info.crc32c);
  out->CancelOn(cancel);
  std::string buf(kChunk, '\0');
  for (uint64_t off = 0; off < in->size(); off += kChunk) {
    if (cancel != nullptr && cancel->load()) {
      return Status::Aborted(remote + ": push interrupted; its upload was aborted");
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, in->size() - off));
    SK_RETURN_IF_ERROR(in->Read(off, n, buf.data()));
    SK_RETURN_IF_ERROR(out->Append(buf.data(), n));
    sent(n);
  }
  // Before Close: an upload not completed is aborted when `out` goes.
  if (out->crc32c() != info.crc32c) return DamagedLocal(local);
  return out->Close();
}

// The remote manifest: absent, the same as `text`, or another dataset's
// (removed first under force, so no reader sees it name what is replaced).
Status PrepareRemote(Env* env, const std::string& url, const std::string& text, bool force,
                     bool* same) {
  const std::string path = JoinPath(url, kManifestName);
  auto there = env->ReadFile(path, 256ull << 20);
  *same = there.ok() && *there == text;
  if (!there.ok()) return there.status().IsNotFound() ? Status::OK() : there.status();
  if (*same) return Status::OK();
  if (!force) {
    return Status::InvalidArgument(url +
                                   ": holds another dataset (its manifest differs); --force "
                                   "replaces it (its manifest goes first, so readers never see a "
                                   "mix)");
  }
  return env->RemoveFile(path);
}

// Shards of a replaced dataset that the new manifest does not name.
Status RemoveStale(Env* env, const std::string& url, const Manifest& m, uint64_t* removed) {
  SK_ASSIGN_OR_RETURN(auto names, env->ListDir(url));
  for (const std::string& name : names) {
    const bool shard_name = name.rfind("shard-", 0) == 0 && name.size() > 4 &&
                            name.compare(name.size() - 4, 4, ".sks") == 0;
    const bool named = std::any_of(m.shards.begin(), m.shards.end(),
                                   [&](const ShardInfo& s) { return s.file == name; });
    if (!shard_name || named) continue;
    SK_RETURN_IF_ERROR(env->RemoveFile(JoinPath(url, name)));
    ++*removed;
  }
  return Status::OK();
}

}  // namespace

Status PushDataset(const std::string& dir, const std::string& url, const PushOptions& options,
                   const PushProgress& progress, PushReport* report) {
  *report = PushReport();
  if (!IsObjectStoreUrl(url) || url.rfind("s3://", 0) != 0) {
    return Status::InvalidArgument(url + ": push writes to s3://BUCKET/PREFIX");
  }
  SK_ASSIGN_OR_RETURN(Manifest m, ReadManifest(dir, Env::Default()));
  SK_ASSIGN_OR_RETURN(std::string text,
                      Env::Default()->ReadFile(JoinPath(dir, kManifestName), 256ull << 20));
  SK_ASSIGN_OR_RETURN(Env * env, Env::ForPath(url));
  bool same = false;
  SK_RETURN_IF_ERROR(PrepareRemote(env, url, text, options.force, &same));
  std::string prefix = url;
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  SK_RETURN_IF_ERROR(AbortUnfinishedUploads(env, prefix + "/", &report->uploads_aborted));
  report->shards = m.shards.size();
  uint64_t total = 0;
  for (const ShardInfo& s : m.shards) total += s.bytes;
  std::mutex mu;
  std::atomic<uint64_t> done{0};
  std::atomic<size_t> next{0};
  std::vector<Status> errors(m.shards.size());
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < m.shards.size();) {
      if (options.cancel != nullptr && options.cancel->load()) return;
      const ShardInfo& s = m.shards[i];
      bool kept = false;
      errors[i] = PushShard(
          env, JoinPath(dir, s.file), JoinPath(url, s.file), s, options.cancel,
          [&](uint64_t n) {
            const uint64_t d = done.fetch_add(n) + n;
            std::lock_guard<std::mutex> lock(mu);
            if (progress) progress(d, total);
          },
          &kept);
      std::lock_guard<std::mutex> lock(mu);
      if (!errors[i].ok()) continue;
      (kept ? report->kept : report->uploaded)++;
      (kept ? report->bytes_kept : report->bytes_uploaded) += s.bytes;
      if (kept) {
        done += s.bytes;
        if (progress) progress(done.load(), total);
      }
    }
  };
  std::vector<std::thread> pool;
  const int jobs = std::clamp(options.jobs, 1, 64);
  for (int t = 1; t < std::min<int>(jobs, static_cast<int>(m.shards.size())); ++t) {
    pool.emplace_back(work);
  }
  work();
  for (auto& t : pool) t.join();
  if (options.cancel != nullptr && options.cancel->load()) {
    return Status::Aborted(url +
                           ": push interrupted: its uploads were aborted and nothing "
                           "more was published");
  }
  for (const Status& e : errors) SK_RETURN_IF_ERROR(e);
  if (!same) {
    SK_RETURN_IF_ERROR(WriteFileAtomic(env, JoinPath(url, kManifestName), text));
    report->manifest_written = true;
  }
  return RemoveStale(env, url, m, &report->stale_removed);
}

}  // namespace shardkit
