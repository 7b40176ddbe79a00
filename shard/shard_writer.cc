// ShardWriter: blocks, then the footer index, then the trailer.
#include "shard/shard_writer.h"

#include <zstd.h>

#include <algorithm>

#include "base/crc32c.h"

namespace shardkit {

using format::BlockEntry;
using format::RecordEntry;

ShardWriter::ShardWriter(std::unique_ptr<WritableFile> file, const ShardWriterOptions& options)
    : options_(options), file_(std::move(file)) {}

ShardWriter::~ShardWriter() {
  if (cctx_ != nullptr) ZSTD_freeCCtx(cctx_);
  if (!finished_) file_->Close().IgnoreError();
}

Result<std::unique_ptr<ShardWriter>> ShardWriter::Create(const std::string& path,
                                                         const ShardWriterOptions& options,
                                                         Env* env) {
  if (options.block_size == 0 || options.block_size > format::kMaxBlockRawSize) {
    return Status::InvalidArgument("block size must be in (0, 256 MiB]");
  }
  SK_ASSIGN_OR_RETURN(auto file, (env != nullptr ? env : Env::Default())->NewWritableFile(path));
  char header[format::kHeaderSize] = {};
  std::memcpy(header, format::kHeaderMagic, 8);
  format::PutU32(header + 8, format::kVersion);
  format::PutU32(header + 12, format::kHeaderSize);
  format::PutU32(header + 16, static_cast<uint32_t>(options.kind));
  format::PutU32(header + 28, crc32c::Value(header, 28));
  SK_RETURN_IF_ERROR(file->Append(header, sizeof(header)));
  return std::unique_ptr<ShardWriter>(new ShardWriter(std::move(file), options));
}

Status ShardWriter::Add(std::string_view payload, int32_t label, std::string_view key) {
  if (finished_) return Status::InvalidArgument(path() + ": Add after Finish");
  if (payload.size() > format::kMaxRecordSize) {
    return Status::InvalidArgument(path() + ": record '" + std::string(key) + "' is " +
                                   std::to_string(payload.size()) +
                                   " bytes, over the 256 MiB limit");
  }
  if (key.size() > format::kMaxKeySize) {
    return Status::InvalidArgument(
        path() + ": key longer than 4096 bytes: " + std::string(key.substr(0, 64)) + "...");
  }
  if (records_.size() >= UINT32_MAX - 1 || keys_.size() + key.size() > UINT32_MAX) {
    return Status::InvalidArgument(path() + ": too many records for one shard");
  }
  if (!pending_.empty() && pending_.size() + payload.size() > options_.block_size) {
    SK_RETURN_IF_ERROR(FlushBlock());
  }
  RecordEntry r;
  r.block = static_cast<uint32_t>(blocks_.size());
  r.offset = static_cast<uint32_t>(pending_.size());
  r.length = static_cast<uint32_t>(payload.size());
  r.label = label;
  r.crc32c = crc32c::Value(payload.data(), payload.size());
  r.key_offset = static_cast<uint32_t>(keys_.size());
  r.key_length = static_cast<uint32_t>(key.size());
  records_.push_back(r);
  keys_.append(key);
  pending_.append(payload);
  raw_bytes_ += payload.size();
  return Status::OK();
}

Status ShardWriter::FlushBlock() {
  const uint32_t count = static_cast<uint32_t>(records_.size()) - pending_first_;
  if (count == 0) return Status::OK();
  BlockEntry b{};
  b.offset = file_->size();
  b.raw_size = static_cast<uint32_t>(pending_.size());
  b.first_record = pending_first_;
  b.num_records = count;
  const char* stored = pending_.data();
  size_t stored_size = pending_.size();
  b.codec = static_cast<uint32_t>(format::Codec::kStored);
  if (options_.compression != CompressionMode::kStore && !pending_.empty()) {
    if (cctx_ == nullptr) cctx_ = ZSTD_createCCtx();
    compressed_.resize(ZSTD_compressBound(pending_.size()));
    size_t n = ZSTD_compressCCtx(cctx_, compressed_.data(), compressed_.size(), pending_.data(),
                                 pending_.size(), options_.zstd_level);
    if (ZSTD_isError(n)) {
      return Status::IOError(path() + ": zstd compression failed: " + ZSTD_getErrorName(n));
    }
    bool keep = options_.compression == CompressionMode::kZstd || n < pending_.size() * 97 / 100;
    if (keep) {
      b.codec = static_cast<uint32_t>(format::Codec::kZstd);
      stored = compressed_.data();
      stored_size = n;
    }
  }
  b.stored_size = static_cast<uint32_t>(stored_size);
  b.crc32c = crc32c::Value(stored, stored_size);
  SK_RETURN_IF_ERROR(file_->Append(stored, stored_size));
  blocks_.push_back(b);
  pending_.clear();
  pending_first_ = static_cast<uint32_t>(records_.size());
  return Status::OK();
}

uint64_t ShardWriter::estimated_size() const {
  return file_->size() + pending_.size() +
         format::EntriesOffset(format::kVersion, blocks_.size() + 1, records_.size() + 1) +
         records_.size() * format::kRecordEntrySize + keys_.size() + format::kTrailerSize;
}

Status ShardWriter::Finish(ShardInfo* info) {
  if (finished_) return Status::InvalidArgument(path() + ": Finish called twice");
  SK_RETURN_IF_ERROR(FlushBlock());
  const uint64_t entries = format::EntriesOffset(format::kVersion, blocks_.size(), records_.size());
  std::string index(entries + records_.size() * format::kRecordEntrySize, '\0');
  char* p = index.data();
  format::PutU32(p, static_cast<uint32_t>(blocks_.size()));
  format::PutU32(p + 4, static_cast<uint32_t>(records_.size()));
  format::PutU64(p + 8, keys_.size());
  p += format::kIndexHeaderSize;
  for (const BlockEntry& b : blocks_) {
    format::EncodeBlock(b, p);
    p += format::kBlockEntrySize;
  }
  char* e = index.data() + entries;
  for (const RecordEntry& r : records_) {
    format::EncodeRecord(r, e);
    e += format::kRecordEntrySize;
  }
  // The chunk table: each chunk's CRC, then the CRC of everything before it.
  for (uint64_t c = 0, n = format::NumChunks(records_.size()); c < n; ++c, p += 4) {
    const uint64_t first = c << format::kChunkShift;
    const uint64_t count = std::min<uint64_t>(format::kChunkRecords, records_.size() - first);
    uint32_t crc = 0;
    format::ChunkCrc(index.data() + entries + first * format::kRecordEntrySize, count, keys_, &crc);
    format::PutU32(p, crc);
  }
  format::PutU32(p, crc32c::Value(index.data(), static_cast<size_t>(p - index.data())));
  index.append(keys_);

  char trailer[format::kTrailerSize];
  format::PutU64(trailer, file_->size());
  format::PutU64(trailer + 8, index.size());
  format::PutU32(trailer + 16, crc32c::Value(index.data(), index.size()));
  format::PutU32(trailer + 20, format::kVersion);
  std::memcpy(trailer + 24, format::kTrailerMagic, 8);

  SK_RETURN_IF_ERROR(file_->Append(index));
  SK_RETURN_IF_ERROR(file_->Append(trailer, sizeof(trailer)));
  SK_RETURN_IF_ERROR(file_->Sync());
  SK_RETURN_IF_ERROR(file_->Close());
  finished_ = true;
  if (info != nullptr) {
    info->records = records_.size();
    info->bytes = file_->size();
    info->raw_bytes = raw_bytes_;
    info->crc32c = file_->crc32c();
  }
  return Status::OK();
}

}  // namespace shardkit
