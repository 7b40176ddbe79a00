// ShardReader: random access to the records of one shard file. Open() reads
// O(blocks) bytes: it validates the header, the trailer and the index's
// block table, and holds the index through a shared read-only mapping
// (RandomAccessFile::MapRegion), so a rank's private memory for a shard does
// not grow with its records and a node's ranks share the index pages. The
// record entries are checked (the index checksum, every entry's bounds) the
// first time the shard is used, once; a damaged index fails that use and
// every later one with an error naming the shard. Every read checks a
// checksum. Reads are thread-safe when each thread uses its own ReadScratch.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "shard/shard_format.h"
#include "storage/env.h"

typedef struct ZSTD_DCtx_s ZSTD_DCtx;

namespace shardkit {

// Per-thread buffers and zstd context for reads. Not shareable between threads.
struct ReadScratch {
  ReadScratch() = default;
  ~ReadScratch();
  ReadScratch(const ReadScratch&) = delete;
  ReadScratch& operator=(const ReadScratch&) = delete;
  ZSTD_DCtx* dctx = nullptr;
  std::vector<char> stored;
  std::vector<char> raw;
  // ReadRecord's memo: the last compressed block it decompressed (the
  // reader's id, 0 for none, and the block), whose other records it slices
  // without reading.
  std::vector<char> block;
  uint64_t block_reader = 0;
  uint32_t block_index = 0;
};

// Decompresses a zstd block's stored bytes into *out, resized to raw_size
// (never allocating past it), with scratch's context: Corruption ("zstd:
// ...", or a size other than raw_size) if they do not make exactly raw_size
// bytes. The readers' own step (ReadBlock, ReadBlockInto), after the stored
// bytes' CRC was checked; the caller adds where the block lies.
Status DecompressBlock(std::string_view stored, uint32_t raw_size, ReadScratch* scratch,
                       std::vector<char>* out);

class ShardReader {
 public:
  // Opens `path` through `env` (null: Env::Default()).
  static Result<std::unique_ptr<ShardReader>> Open(const std::string& path, Env* env = nullptr,
                                                   const Cancel* cancel = nullptr);
  // The same, of a file already open.
  static Result<std::unique_ptr<ShardReader>> Open(std::unique_ptr<RandomAccessFile> file);

  uint32_t num_records() const { return num_records_; }
  uint32_t num_blocks() const { return static_cast<uint32_t>(blocks_.size()); }
  // Record i's entry into *e, decoded from the mapped index. The first use
  // of the index chunk holding it checks that chunk (CheckRecord); false,
  // with *e empty (block 0, length 0), if it is damaged or i is out of range.
  bool entry(uint32_t i, format::RecordEntry* e) const {
    if (__builtin_expect(i < num_records_ && ChunkChecked(i >> chunk_shift_), 1)) {
      *e = format::DecodeRecord(entries_ + uint64_t{i} * format::kRecordEntrySize);
      return true;
    }
    *e = format::RecordEntry{};
    return false;
  }
  // The same, returned; empty for a damaged chunk (reads then return its error).
  format::RecordEntry record(uint32_t i) const {
    format::RecordEntry e;
    entry(i, &e);
    return e;
  }
  // Record i's label alone (0 where entry() fails).
  int32_t label(uint32_t i) const {
    if (i >= num_records_ || !ChunkChecked(i >> chunk_shift_)) return 0;
    return static_cast<int32_t>(
        format::GetU32(entries_ + uint64_t{i} * format::kRecordEntrySize + 12));
  }
  const format::BlockEntry& block(uint32_t b) const { return blocks_[b]; }
  std::string_view key(uint32_t i) const {
    const format::RecordEntry r = record(i);
    return keys_.substr(std::min<size_t>(r.key_offset, keys_.size()), r.key_length);
  }
  // Brings record i's index entry towards the CPU cache (a hint).
  void PrefetchEntry(uint32_t i) const {
    __builtin_prefetch(entries_ + uint64_t{i} * format::kRecordEntrySize);
  }
  // The index chunk holding record i: its checksum and its entries' bounds,
  // checked on first use (then a load of a flag); the error names the shard
  // and the chunk's records. A version 1 shard has one chunk, the whole index.
  Status CheckRecord(uint32_t i) const;
  // Every chunk, and the checksum of the whole index (for verify, inspect, merge).
  Status CheckIndex() const;
  format::RecordKind kind() const { return kind_; }
  uint64_t file_size() const { return file_->size(); }
  const std::string& path() const { return file_->path(); }

  // Reads block b, checks the CRC of its stored bytes and decompresses it (never
  // past its declared raw size). *raw points into scratch and stays valid until
  // the next read with the same scratch.
  Status ReadBlock(uint32_t b, ReadScratch* scratch, std::string_view* raw) const;
  // The same, decompressing into *out (resized to the raw size) instead of the
  // scratch. If `stored` is given, it is set to the block's bytes as on disk
  // as soon as they are read (even if a check then fails), and left empty if
  // the read itself failed.
  Status ReadBlockInto(uint32_t b, ReadScratch* scratch, std::vector<char>* out,
                       std::string_view* stored = nullptr) const;
  // Offset of the index: where the last block ends.
  uint64_t index_offset() const {
    return blocks_.empty() ? format::kHeaderSize
                           : blocks_.back().offset + blocks_.back().stored_size;
  }
  // Reads record i and checks its CRC. For a stored block only the record's
  // bytes are read. A compressed block is decompressed into the scratch and
  // remembered there, so that reading its records one after another with one
  // scratch decompresses it once (random reads across blocks: RecordReader,
  // whose cache the callers share). *payload is valid until the next read
  // with the same scratch.
  Status ReadRecord(uint32_t i, ReadScratch* scratch, std::string_view* payload) const;
  // Where record i's bytes lie in the file, when its block is stored
  // uncompressed (false otherwise, or for a damaged index chunk): a reader
  // may read several neighbours at once (ReadRaw) and check each
  // (CheckStored).
  bool StoredExtent(uint32_t i, uint64_t* offset, uint32_t* length) const {
    format::RecordEntry e;
    if (!entry(i, &e) || blocks_[e.block].codec != static_cast<uint32_t>(format::Codec::kStored)) {
      return false;
    }
    *offset = blocks_[e.block].offset + e.offset;
    *length = e.length;
    return true;
  }
  Status ReadRaw(uint64_t offset, size_t n, void* dst) const { return file_->Read(offset, n, dst); }
  // Stored record i's bytes, as read from its StoredExtent, against its CRC.
  Status CheckStored(uint32_t i, std::string_view bytes) const;
  // After CheckStored failed with `failed` on record i's bytes: where the
  // file's backend kept a copy it can drop (RandomAccessFile::Forget, a node
  // cache), the record read once more from storage into dst (its length) and
  // checked; otherwise `failed`.
  Status RereadStored(uint32_t i, Status failed, char* dst) const;
  // Slices record i out of its block's raw bytes (from ReadBlock) and checks its CRC.
  Status RecordFromBlock(uint32_t i, std::string_view block_raw, std::string_view* payload) const;

  // How the file will be read (RandomAccessFile::SetAccess): the storage
  // picks its read path (with views, blocks decompress in place); not while
  // other threads read.
  Status SetAccess(const AccessHints& hints) { return file_->SetAccess(hints); }
  // Whether reads bypass every cache (nothing to read ahead into).
  bool uncached() const { return file_->uncached(); }
  // A background read of block b's stored bytes (reading ahead).
  void PrefetchBlock(uint32_t b) const {
    file_->WillNeed(blocks_[b].offset, blocks_[b].stored_size);
  }
  // The same for blocks [first, last], which lie one after another in the
  // file: one read (a request, on remote storage) for all of them.
  void PrefetchBlocks(uint32_t first, uint32_t last) const {
    file_->WillNeed(blocks_[first].offset,
                    blocks_[last].offset + blocks_[last].stored_size - blocks_[first].offset);
  }
  // The same for record i's bytes alone, when its block is stored uncompressed.
  void PrefetchRecord(uint32_t i) const {
    const format::RecordEntry r = record(i);
    const format::BlockEntry& b = blocks_[r.block];
    if (b.codec == static_cast<uint32_t>(format::Codec::kStored)) {
      file_->WillNeed(b.offset + r.offset, r.length);
    }
  }

  // Reads in flight and later ones fail at once (RandomAccessFile::Abort).
  void AbortReads() const { file_->Abort(); }
  // The file, for reads of its raw bytes (verify's whole-file checksum).
  const RandomAccessFile& file() const { return *file_; }

  // "shard-00001.sks: record 7 (block 0, offset 5488)", for error messages.
  std::string Where(uint32_t record) const;

 private:
  // ReadBlockInto's one try (it tries again after a cached copy is dropped).
  Status ReadBlockOnce(uint32_t b, ReadScratch* scratch, std::vector<char>* out,
                       std::string_view* stored) const;
  explicit ShardReader(std::unique_ptr<RandomAccessFile> file);
  // The index's counts and block table (O(blocks)), at Open.
  Status ParseBlocks(uint64_t index_offset);
  // True once chunk c of the record entries has been checked and found
  // sound; the first call checks it (VerifyChunk; CheckChunkOnce holds no
  // lock while it does).
  bool ChunkChecked(uint32_t c) const {
    const uint8_t s = chunk_state_[c].load(std::memory_order_acquire);
    return s == kIndexGood || (s == kIndexUnchecked && CheckChunkOnce(c));
  }
  bool CheckChunkOnce(uint32_t c) const;
  Status VerifyChunk(uint32_t c) const;
  // Every record entry in [first, end) lies inside its block and the keys.
  Status VerifyBounds(uint64_t first, uint64_t end) const;

  enum { kIndexUnchecked = 0, kIndexGood = 1, kIndexBad = 2 };
  const uint64_t id_;  // unique in the process, from 1 (ReadScratch's memo names it)
  std::unique_ptr<RandomAccessFile> file_;
  format::RecordKind kind_ = format::RecordKind::kBytes;
  std::vector<format::BlockEntry> blocks_;
  std::unique_ptr<FileRegion> index_;  // the whole index, mapped (shared) or copied
  uint32_t index_crc_ = 0;             // from the trailer
  uint32_t version_ = 0;
  uint32_t num_records_ = 0;
  uint32_t chunk_shift_ = 31;  // record i is in chunk i >> chunk_shift_ (version 1: one)
  uint32_t num_chunks_ = 1;
  const char* entries_ = nullptr;     // the record entries, in index_
  const char* chunk_crcs_ = nullptr;  // version 2: the chunk table, in index_
  std::string_view keys_;             // the keys blob, in index_
  // Per chunk (a byte per 1024 records): kIndexUnchecked, kIndexGood or
  // kIndexBad; a bad chunk's error, set under index_mu_ before its state
  // leaves kIndexUnchecked.
  std::unique_ptr<std::atomic<uint8_t>[]> chunk_state_;
  mutable std::map<uint32_t, Status> chunk_errors_;
  mutable std::mutex index_mu_;
  mutable bool whole_checked_ = false;  // the whole index's checksum (CheckIndex), under index_mu_
  mutable Status whole_status_;
};

}  // namespace shardkit
