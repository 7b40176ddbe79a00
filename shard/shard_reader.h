// ShardReader: random access to the records of one shard file. Open() validates
// the header, trailer and the whole index before returning; every read checks a
// checksum. Immutable after Open(): reads are thread-safe when each thread uses
// its own ReadScratch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "shard/shard_format.h"

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
};

class ShardReader {
 public:
  // Opens `path` through `env` (null: Env::Default()).
  static Result<std::unique_ptr<ShardReader>> Open(const std::string& path, Env* env = nullptr);

  uint32_t num_records() const { return static_cast<uint32_t>(records_.size()); }
  uint32_t num_blocks() const { return static_cast<uint32_t>(blocks_.size()); }
  const format::RecordEntry& record(uint32_t i) const { return records_[i]; }
  const format::BlockEntry& block(uint32_t b) const { return blocks_[b]; }
  std::string_view key(uint32_t i) const {
    return std::string_view(keys_).substr(records_[i].key_offset, records_[i].key_length);
  }
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
  // bytes are read; for a compressed one the whole block is decompressed.
  Status ReadRecord(uint32_t i, ReadScratch* scratch, std::string_view* payload) const;
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
  // The same for record i's bytes alone, when its block is stored uncompressed.
  void PrefetchRecord(uint32_t i) const {
    const format::BlockEntry& b = blocks_[records_[i].block];
    if (b.codec == static_cast<uint32_t>(format::Codec::kStored)) {
      file_->WillNeed(b.offset + records_[i].offset, records_[i].length);
    }
  }

  // "shard-00001.sks: record 7 (block 0, offset 5488)", for error messages.
  std::string Where(uint32_t record) const;

 private:
  explicit ShardReader(std::unique_ptr<RandomAccessFile> file) : file_(std::move(file)) {}
  Status ParseIndex(const std::string& index, uint64_t index_offset);

  std::unique_ptr<RandomAccessFile> file_;
  format::RecordKind kind_ = format::RecordKind::kBytes;
  std::vector<format::BlockEntry> blocks_;
  std::vector<format::RecordEntry> records_;
  std::string keys_;
};

}  // namespace shardkit
