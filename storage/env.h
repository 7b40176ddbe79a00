// Env: the storage seam. Everything that reads a dataset (the manifest, the
// shard readers, the loader's read path) reaches storage through an Env and
// the RandomAccessFiles it opens, never through POSIX calls of its own, as
// leveldb's Env and DALI's FileStream do. Env::Default() is POSIX (local
// disks, NFS, GPFS, Lustre); Env::ForPath picks the backend a path names:
// object storage for s3:// and http(s):// URLs (storage/remote/object_store.h), POSIX
// otherwise. Another backend (a test double that injects latency or faults:
// tests/common/storage_double.h) implements these two classes and is passed to
// Dataset::Open or in LoaderOptions::env; it must outlive every Dataset and
// Loader opened through it.
//
// The read path (buffered pread, a read-only mapping, O_DIRECT) is the
// implementation's choice: readers say how they will read (AccessHints) and
// the file picks.
//
// Writing a dataset goes through the same seam: a WritableFile per file, a
// ScratchFile for what a writer keeps before it writes it, and the directory
// operations publishing needs (rename, remove, list, sync, a writer's lock):
// a writer given an Env (PackOptions::env, DatasetWriterOptions::env) does
// all of its writing through it, so a test double can fail any of it
// (tests/common/storage_double.h: WriteFaultEnv, a disk that fills up). POSIX has them all
// (storage/posix_env.cc); object storage writes whole objects, each visible only once closed, and
// has no renames or locks (its datasets are published by writing the manifest last: see
// shardkit-pack push). storage/file_io.h keeps the POSIX helpers' names.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace shardkit {

// A request to stop, set by another thread (a signal's handler, a reader
// shutting down): what is given one ends with an Aborted error soon after.
using Cancel = std::atomic<bool>;

// How a reader will read a file, told once before its reads.
struct AccessHints {
  enum class Pattern { kNormal, kRandom, kSequential };
  // kRandom: records one by one in any order (read-ahead beyond a record
  // only wastes storage bandwidth); kSequential: through a block at a time.
  Pattern pattern = Pattern::kNormal;
  // Zero-copy views (View) are welcome: the file stays unchanged while it is
  // open (shards are immutable once published).
  bool views = false;
  // Caching what is read is futile (the data is larger than the memory that
  // could cache it, or the user asked): a backend may bypass its cache
  // (POSIX: O_DIRECT).
  bool uncached = false;
};

// Part of a file held in memory, read-only, for as long as the object lives:
// a shared mapping of the page cache (POSIX: the pages are the kernel's, so
// every process of a node that maps the same shard shares them and none
// holds a private copy), or a private copy where the backend cannot map.
class FileRegion {
 public:
  FileRegion() = default;
  FileRegion(const FileRegion&) = delete;
  FileRegion& operator=(const FileRegion&) = delete;
  virtual ~FileRegion() = default;
  std::string_view bytes() const { return bytes_; }
  // Asks for bytes()[offset, offset + n) ahead of a walk over them: a mapping
  // has its pages read in one request rather than a fault per page; a copy
  // holds them already (nothing to do, and nothing fetched twice).
  virtual void WillNeed(size_t offset, size_t n) const {}

 protected:
  std::string_view bytes_;
};

// A file open for positioned reads. Read, View, WillNeed and Release are
// thread-safe; SetAccess is not (call it before reads from other threads).
class RandomAccessFile {
 public:
  RandomAccessFile() = default;
  RandomAccessFile(const RandomAccessFile&) = delete;
  RandomAccessFile& operator=(const RandomAccessFile&) = delete;
  virtual ~RandomAccessFile() = default;
  virtual const std::string& path() const = 0;
  virtual uint64_t size() const = 0;
  // What the storage calls this version of the file's bytes, where it names
  // them (object storage: the ETag, taken at open); empty otherwise.
  virtual std::string version() const { return ""; }
  // What names exactly these bytes wherever they are read from, for a cache
  // that processes and jobs share (storage/remote/node_cache.h): where they
  // are (object storage: the endpoint, bucket and key, never a password)
  // and which version (the ETag, else Last-Modified). Empty where the
  // backend cannot tell a replaced file from the one it replaced: such a
  // file is not cached.
  virtual std::string identity() const { return ""; }
  // The CRC32C of the whole file as its writer stored it beside the bytes
  // (object storage: the metadata shardkit's uploads carry), if any: a
  // reader that knows which bytes it wants (a manifest's shard) can tell
  // another file of the same name and size at open.
  virtual std::optional<uint32_t> stored_crc32c() const { return std::nullopt; }
  // Reads exactly n bytes at offset into dst. A range past the end, or a
  // short read, is a Corruption error naming the path and offset; a failed
  // read an IOError.
  virtual Status Read(uint64_t offset, size_t n, void* dst) const = 0;

  // How the file will be read; the backend picks its read path from it (and
  // may ignore it). Once, before payload reads and reads from other threads
  // (an index read before it is fine); a second call may add to the first
  // (POSIX: a mapping or O_DIRECT once on stays on).
  virtual Status SetAccess(const AccessHints& hints) { return Status::OK(); }
  // Whether View works: the bytes can be seen in place, without a copy.
  virtual bool mapped() const { return false; }
  // If mapped(): points *out at n bytes at offset (range checked like Read),
  // valid while the file is open; or Unsupported where this range cannot be
  // seen in place now (a node cache holding part of the file): read it.
  virtual Status View(uint64_t offset, size_t n, std::string_view* out) const;
  // [offset, offset + n) held in memory (FileRegion), range checked like
  // Read. The default reads a private copy; a backend that can map shares
  // the pages. Mapped bytes must not change while held (shards are
  // immutable once published). Thread-safe.
  virtual Result<std::unique_ptr<FileRegion>> MapRegion(uint64_t offset, size_t n) const;
  // Whether reads bypass every cache (then reading ahead is futile).
  virtual bool uncached() const { return false; }
  // Whether the whole file is on local disk, though its Env is remote (a node
  // cache holding every byte of it): reads cost a local file's, not requests.
  virtual bool held_locally() const { return false; }
  // Starts fetching [offset, offset + n) in the background: a hint, never an error.
  virtual void WillNeed(uint64_t offset, size_t n) const {}
  // The reader no longer looks at [offset, offset + n) of a view: the
  // backend may release the memory that held it (never the data).
  virtual void Release(uint64_t offset, size_t n) const {}
  // Reads in flight and later ones end at once with an Aborted error: a
  // reader shutting down never waits on slow storage. Thread-safe.
  virtual void Abort() const {}
  // [offset, offset + n) failed a checksum of the data's own: a backend that
  // keeps a copy of what it fetched (a node cache) drops that copy, so the
  // next read fetches those bytes from their source again (they may have
  // been damaged on their way in), and says whether it dropped any. Thread-safe.
  virtual bool Forget(uint64_t offset, size_t n) const { return false; }
};

// A file being written: appended to, then closed. Not thread-safe. Keeps a
// CRC32C of every byte appended. What was appended is the file's once Close
// returns OK; a file destroyed without Close (an error on the way) may be
// left partly written (POSIX) or not at all (object storage: an upload that
// is not completed leaves no object).
class WritableFile {
 public:
  WritableFile() = default;
  WritableFile(const WritableFile&) = delete;
  WritableFile& operator=(const WritableFile&) = delete;
  virtual ~WritableFile() = default;
  // Opens `path` for writing through the POSIX filesystem (Env::Default()),
  // created or truncated.
  static Result<std::unique_ptr<WritableFile>> Create(const std::string& path);

  Status Append(const void* data, size_t n);
  Status Append(std::string_view s) { return Append(s.data(), s.size()); }
  // What was appended so far is durable (POSIX: written and fsynced; object
  // storage: nothing until Close).
  virtual Status Sync() = 0;
  // Writes what is left and ends the file; idempotent.
  virtual Status Close() = 0;
  virtual const std::string& path() const = 0;
  uint64_t size() const { return size_; }
  uint32_t crc32c() const { return crc_; }
  // The CRC32C the whole file will have (a copy of a file whose checksum
  // is known), told before the first Append: object storage stores it
  // beside the bytes from the start (RandomAccessFile::stored_crc32c) and
  // its Close refuses to complete an object whose bytes do not match.
  // POSIX files ignore it (the caller compares crc32c()).
  void ExpectCrc32c(uint32_t crc) { expected_crc_ = crc; }
  std::optional<uint32_t> expected_crc32c() const { return expected_crc_; }
  // Once `cancel` is set, the file's writes under way that wait on storage
  // (object storage: parts being uploaded) end soon, and Append and Close
  // return Aborted; the file is then never completed. It must outlive the
  // file.
  void CancelOn(const Cancel* cancel) { cancel_ = cancel; }
  bool cancelled() const { return cancel_ != nullptr && cancel_->load(); }

 protected:
  virtual Status AppendBytes(const char* data, size_t n) = 0;

 private:
  uint64_t size_ = 0;
  uint32_t crc_ = 0;
  std::optional<uint32_t> expected_crc_;
  const Cancel* cancel_ = nullptr;
};

// A file without a name, for bytes a writer keeps and reads back before it
// writes them out (the packer's spill): appended to, read at offsets, and
// gone once destroyed or once the process ends, however it ends (POSIX:
// O_TMPFILE, else a name unlinked at once). Append is not thread-safe; Read
// is, alongside other Reads.
class ScratchFile {
 public:
  ScratchFile() = default;
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  virtual ~ScratchFile() = default;
  // Appends n bytes; *offset receives where they start.
  virtual Status Append(const void* data, size_t n, uint64_t* offset) = 0;
  // Reads exactly n bytes at offset (appended before) into dst.
  virtual Status Read(uint64_t offset, size_t n, void* dst) const = 0;
};

// An exclusive writer's lock on a dataset directory, held until destroyed.
class DirLock {
 public:
  DirLock() = default;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  virtual ~DirLock() = default;
  // Env::Default()->LockDir(dir).
  static Result<std::unique_ptr<DirLock>> Acquire(const std::string& dir);
};
inline constexpr char kLockFileName[] = ".shardkit.lock";

// What a backend fetched from storage since it was made: requests sent,
// bytes of their replies' bodies, tries that were retried. Zeros where a
// backend does not count (POSIX: /proc/self/io tells).
struct StorageCounters {
  uint64_t requests = 0, bytes = 0, retries = 0;
  // A node cache's chunk lookups: found on its disk, or fetched from storage.
  uint64_t cache_hits = 0, cache_misses = 0;
};

class Env {
 public:
  virtual ~Env() = default;
  // The POSIX filesystem; lives for the process.
  static Env* Default();
  // The Env that reads `path`: the process's object-storage Env for an
  // s3://, http:// or https:// URL (configured from the environment the
  // first time: storage/remote/object_store.h), else Default(). An error says why a
  // URL cannot be read (no libcurl in this build, an unusable setting).
  static Result<Env*> ForPath(const std::string& path);

  // Opens `path` for reads. A missing file is NotFound; something that is
  // not a regular file (a FIFO, a directory) is refused by path, without
  // blocking. Once `cancel` is set (by another thread: a signal, a closing
  // reader), an open that waits on storage (object storage: its HEAD and
  // its retries) ends with Aborted.
  virtual Result<std::unique_ptr<RandomAccessFile>> OpenForReads(
      const std::string& path, const Cancel* cancel = nullptr) = 0;
  // Whether `path` exists (a dataset's manifest, a shard named by it).
  virtual bool FileExists(const std::string& path) = 0;
  // A whole small file (a manifest), refused above max_size bytes (by
  // default OpenForReads and Read; object storage: one GET). A missing file
  // is NotFound; `cancel` as for OpenForReads.
  virtual Result<std::string> ReadFile(const std::string& path, uint64_t max_size,
                                       const Cancel* cancel = nullptr);
  // Whether each read is a request over a network (milliseconds or more):
  // readers then keep more reads in flight and open files in parallel.
  virtual bool remote() const { return false; }
  virtual StorageCounters counters() const { return StorageCounters(); }

  // Writing. A backend that cannot do one of these says so (Unsupported,
  // naming the path and what it cannot do).
  //
  // `path` created, or truncated if it exists (something else than a file
  // there is refused by path).
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path);
  // Atomically replaces `to` by `from` (POSIX rename).
  virtual Status RenameFile(const std::string& from, const std::string& to);
  // Removes a file; one that does not exist is no error.
  virtual Status RemoveFile(const std::string& path);
  // Makes `dir` and its parents exist (object storage: nothing to do).
  virtual Status CreateDirs(const std::string& dir);
  // Makes the directory's entries (renames, new files) durable.
  virtual Status SyncDir(const std::string& dir);
  // Removes `dir` if it is empty; one that holds anything is left as it is
  // (an error says so).
  virtual Status RemoveDir(const std::string& dir);
  // A ScratchFile on the storage of `dir` (an existing directory).
  virtual Result<std::unique_ptr<ScratchFile>> NewScratchFile(const std::string& dir);
  // The names (not paths) of the entries of `dir`, sorted.
  virtual Result<std::vector<std::string>> ListDir(const std::string& dir);
  // An exclusive writer's lock on `dir`: a second writer is refused at
  // once, naming the directory; with `wait`, it waits its turn instead (until
  // `cancel` is set: Aborted). The lock's file goes with the lock.
  virtual Result<std::unique_ptr<DirLock>> LockDir(const std::string& dir, bool wait = false,
                                                   const Cancel* cancel = nullptr);
  // Makes `to` (which must not exist) hold the bytes of `from`, a regular
  // file on this storage (anything else is refused by path); `from` is only
  // read. True: `to` is `from`'s own file, hard-linked (POSIX, where the
  // filesystem allows it); false: a copy, synced and closed. A failed copy
  // leaves no `to`. The default copies through OpenForReads and
  // NewWritableFile, so every backend that reads and writes files can.
  virtual Result<bool> LinkOrCopyFile(const std::string& from, const std::string& to);
};

// Whether `path` is a URL that object storage reads (s3://, http://,
// https://): Env::ForPath gives such a path an object-storage Env.
bool IsObjectStoreUrl(const std::string& path);

// Copies `in` whole into `out` in chunks of `chunk` bytes, asking `in` for
// the next two chunks ahead (a remote file streams instead of waiting a
// request per chunk), then syncs and closes `out`. On an error `out` is left
// as it is: the caller removes it.
Status CopyInto(const RandomAccessFile& in, WritableFile* out, size_t chunk = 4 << 20);

// The CRC32C of a whole file, read through `env`.
Result<uint32_t> FileCrc32c(Env* env, const std::string& path);

// Writes `data` to `path` so that it is either whole or absent: POSIX writes
// path.tmp, syncs it, renames it over `path` and syncs the directory; object
// storage puts the object whole (it appears only once complete).
Status WriteFileAtomic(Env* env, const std::string& path, std::string_view data);

}  // namespace shardkit
