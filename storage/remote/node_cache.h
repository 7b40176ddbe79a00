// The node cache: what a node's readers fetch from object storage, kept on
// local disk so that a second epoch (and the node's other ranks, and later
// jobs that use the same directory) read it from there.
//
// It caches chunks (kCacheChunkBytes of a shard file), not whole shards: a
// rank's first epoch reads its part of every shard as it goes, so whole-shard
// downloads would either hold up the first batches or fetch each byte twice;
// chunks are fetched when first read and then stay, so the first epoch fetches
// each byte of the dataset about once (more only where a chunk is shared by
// records of two ranks), and the ranks of a node share what any of them
// fetched. A read-ahead (WillNeed) asks storage once for each run of chunks
// not on disk (each chunk once) and the disk for the pages of those that are,
// so that a first epoch keeps as many requests in flight as one without the
// cache, and a cold second epoch in a new process reads ahead as from a
// local file. Block-local reading with views sees checked chunks in place,
// in the data file's mapping. A dataset whose every shard is on disk whole
// is read as a local one (Dataset::held_locally).
//
// On disk, per cached object (named by a hash of its identity(): where
// storage keeps it and which version, plus its size; a replaced object is
// another entry, and one whose storage cannot tell it from a replaced one,
// identity() empty, is read uncached): NAME.data, a sparse file of the
// object's size, and NAME.map, a header and a table of chunk entries
// (present, and the chunk's CRC32C). A chunk is written, then its entry: an
// entry is never set for bytes not written, and every process checks a
// chunk's CRC before its first use of it, so a file left half-written by a
// killed job is fetched again, never taken as whole.
//
// Files: the cache trusts only its user's own. The directory must belong to
// the caller (or root) and not be writable by others unless sticky
// (NewCachingEnv refuses it, by name); files are made 0600, opened without
// following symlinks, and one that is not a regular file of the process's
// effective uid with one link is never read, written nor evicted (that
// object is read uncached): nobody else can plant bytes whose CRCs match.
//
// Locking: one fetch per chunk per node: a chunk's filler holds a lock on its
// entry (OFD lock: released by the kernel if the process dies) and the
// others wait for it, polling, for at most NodeCacheOptions::lock_wait; a
// lock held longer (its holder stopped by SIGSTOP, a suspended job, a
// debugger) is given up on: those bytes are read from storage, uncached, and
// that chunk's lock is only tried, not waited for, until it is free. The
// same bound holds for the locks taken at open (then the file reads
// uncached). RandomAccessFile::Abort ends every wait of that file at once,
// with an Aborted error.
//
// The limit: chunks are added while the directory's files stay within it;
// beyond it the least recently used objects that no process has open are
// removed (files the cache did not make, or that are not ours, are never
// touched); when nothing can go, or a write to the disk failed (full, over
// quota, an I/O error), the cache is full: reads of chunks not on disk go
// straight to storage for the bytes asked (never slower than no cache), a
// read-ahead asks storage for the range asked, and views of them are
// refused (to be read), until 16 MiB more were asked for; then it is tried
// again (a disk that got room again is used again). A process counts the
// chunks it is fetching against the limit and fetches at most 32 MiB of
// them at once, so the directory exceeds its limit by at most what the
// other processes sharing it are fetching at that moment.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "storage/env.h"

namespace shardkit {

inline constexpr uint64_t kCacheChunkBytes = 1 << 20;

struct NodeCacheOptions {
  std::string dir;     // created if missing; shared by every process that names it
  uint64_t limit = 0;  // bytes of cached data at most (0: no limit)
  // How long a reader waits for another process's lock on a cache file (a
  // chunk it is fetching; an object's header) before it reads those bytes
  // from storage itself. A healthy fetch of a chunk takes tens of
  // milliseconds, a retried one a second or two; a lock held for 10 s is a
  // stopped process, or storage so slow that a second request costs little
  // next to the wait, and a stall a loader's other reads ride out.
  std::chrono::milliseconds lock_wait{10000};
};

// An Env that reads `remote`'s files through a node cache in options.dir.
// `remote` must outlive it; what it opens must outlive nothing of it (files
// keep what they need). Reads only; writes go to `remote`. An error, naming
// the directory, where it cannot be a cache (above: Files): not a
// directory, not writable, another user's, or writable by others and not
// sticky.
Result<std::unique_ptr<Env>> NewCachingEnv(Env* remote, const NodeCacheOptions& options);

// The cache directory's data bytes (disk blocks of its files), for tests and
// benchmarks.
Result<uint64_t> NodeCacheBytes(const std::string& dir);

}  // namespace shardkit
