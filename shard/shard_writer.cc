// ShardWriter: blocks, then the footer index, then the trailer.
#include "shard/shard_writer.h"

#include <zstd.h>

#include <algorithm>
#include <thread>

#include "base/crc32c.h"

namespace shardkit {

using format::BlockEntry;
using format::RecordEntry;

ShardWriter::ShardWriter(std::unique_ptr<WritableFile> file, const ShardWriterOptions& options)
    : options_(options), file_(std::move(file)) {}

ShardWriter::~ShardWriter() {
  if (cctx_ != nullptr) ZSTD_freeCCtx(cctx_);
  for (ZSTD_CCtx* c : cctxs_) ZSTD_freeCCtx(c);
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
  r.block = static_cast<uint32_t>(blocks_.size() + queued_.size());
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

namespace {

// A block's stored form: zstd where the mode says so (and, under kAuto, where
// it saves 3%), else the raw bytes. *stored points into raw or compressed.
Status StoreBlock(const ShardWriterOptions& o, const std::string& path, ZSTD_CCtx* cctx,
                  const std::string& raw, std::vector<char>* compressed, BlockEntry* b,
                  std::string_view* stored) {
  *stored = raw;
  b->codec = static_cast<uint32_t>(format::Codec::kStored);
  if (o.compression != CompressionMode::kStore && !raw.empty()) {
    compressed->resize(ZSTD_compressBound(raw.size()));
    const size_t n = ZSTD_compressCCtx(cctx, compressed->data(), compressed->size(), raw.data(),
                                       raw.size(), o.zstd_level);
    if (ZSTD_isError(n)) {
      return Status::IOError(path + ": zstd compression failed: " + ZSTD_getErrorName(n));
    }
    if (o.compression == CompressionMode::kZstd || n < raw.size() * 97 / 100) {
      b->codec = static_cast<uint32_t>(format::Codec::kZstd);
      *stored = std::string_view(compressed->data(), n);
    }
  }
  b->stored_size = static_cast<uint32_t>(stored->size());
  b->crc32c = crc32c::Value(stored->data(), stored->size());
  return Status::OK();
}

}  // namespace

Status ShardWriter::FlushBlock() {
  const uint32_t count = static_cast<uint32_t>(records_.size()) - pending_first_;
  if (count == 0) return Status::OK();
  queued_.push_back(Queued{std::move(pending_), pending_first_, count});
  queued_bytes_ += queued_.back().raw.size();
  pending_ = std::string();
  pending_first_ = static_cast<uint32_t>(records_.size());
  if (queued_.size() >= static_cast<size_t>(std::max(1, options_.compression_threads))) {
    return WriteQueued();
  }
  return Status::OK();
}

Status ShardWriter::WriteQueued() {
  const size_t n = queued_.size();
  if (n == 0) return Status::OK();
  if (cctx_ == nullptr) cctx_ = ZSTD_createCCtx();
  while (cctxs_.size() + 1 < n) cctxs_.push_back(ZSTD_createCCtx());
  std::vector<BlockEntry> entries(n);
  std::vector<std::string_view> stored(n);
  if (compressed_.size() < n) compressed_.resize(n);
  std::vector<Status> status(n);
  auto store = [&](size_t i) {
    status[i] = StoreBlock(options_, path(), i == 0 ? cctx_ : cctxs_[i - 1], queued_[i].raw,
                           &compressed_[i], &entries[i], &stored[i]);
  };
  std::vector<std::thread> helpers;
  for (size_t i = 1; i < n; ++i) helpers.emplace_back(store, i);
  store(0);
  for (auto& t : helpers) t.join();
  for (size_t i = 0; i < n; ++i) {
    SK_RETURN_IF_ERROR(status[i]);
    BlockEntry& b = entries[i];
    b.offset = file_->size();
    b.raw_size = static_cast<uint32_t>(queued_[i].raw.size());
    b.first_record = queued_[i].first_record;
    b.num_records = queued_[i].num_records;
    SK_RETURN_IF_ERROR(file_->Append(stored[i].data(), stored[i].size()));
    blocks_.push_back(b);
  }
  queued_.clear();
  queued_bytes_ = 0;
  return Status::OK();
}

uint64_t ShardWriter::estimated_size() const {
  return file_->size() + queued_bytes_ + pending_.size() +
         format::EntriesOffset(format::kVersion, blocks_.size() + queued_.size() + 1,
                               records_.size() + 1) +
         records_.size() * format::kRecordEntrySize + keys_.size() + format::kTrailerSize;
}

Status ShardWriter::Finish(ShardInfo* info) {
  if (finished_) return Status::InvalidArgument(path() + ": Finish called twice");
  SK_RETURN_IF_ERROR(FlushBlock());
  SK_RETURN_IF_ERROR(WriteQueued());
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
