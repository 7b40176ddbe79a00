// ShardReader: up-front validation of the header, trailer and index, then
// checksummed, bounded reads of blocks and records.
#include "shard/shard_reader.h"

#include <zstd.h>

#include "base/crc32c.h"

namespace shardkit {

using format::BlockEntry;
using format::RecordEntry;

namespace {

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

}  // namespace

ReadScratch::~ReadScratch() {
  if (dctx != nullptr) ZSTD_freeDCtx(dctx);
}

Result<std::unique_ptr<ShardReader>> ShardReader::Open(const std::string& path, Env* env,
                                                       const Cancel* cancel) {
  SK_ASSIGN_OR_RETURN(auto file,
                      (env != nullptr ? env : Env::Default())->OpenForReads(path, cancel));
  return Open(std::move(file));
}

ShardReader::ShardReader(std::unique_ptr<RandomAccessFile> file)
    : id_([] {
        static std::atomic<uint64_t> next{1};
        return next.fetch_add(1, std::memory_order_relaxed);
      }()),
      file_(std::move(file)) {}

Result<std::unique_ptr<ShardReader>> ShardReader::Open(std::unique_ptr<RandomAccessFile> file) {
  const std::string path = file->path();
  const uint64_t size = file->size();
  auto corrupt = [&](const std::string& what) { return Status::Corruption(path + ": " + what); };
  if (size < format::kHeaderSize + format::kTrailerSize) {
    return corrupt("file is " + std::to_string(size) +
                   " bytes, too short to be a shard (truncated?)");
  }
  char header[format::kHeaderSize];
  SK_RETURN_IF_ERROR(file->Read(0, sizeof(header), header));
  if (std::memcmp(header, format::kHeaderMagic, 8) != 0)
    return corrupt("bad header magic: not a shardkit shard");
  const uint32_t version = format::GetU32(header + 8);
  if (version > format::kVersion) {
    return Status::Unsupported(path + ": shard format version " + std::to_string(version) +
                               " is newer than this build reads (" +
                               std::to_string(format::kVersion) + "); upgrade shardkit");
  }
  if (version == 0) return corrupt("bad format version 0");
  if (crc32c::Value(header, 28) != format::GetU32(header + 28))
    return corrupt("header checksum mismatch");
  if (format::GetU32(header + 12) != format::kHeaderSize) return corrupt("bad header size");

  char trailer[format::kTrailerSize];
  SK_RETURN_IF_ERROR(file->Read(size - format::kTrailerSize, sizeof(trailer), trailer));
  if (std::memcmp(trailer + 24, format::kTrailerMagic, 8) != 0) {
    return corrupt("bad trailer magic (file truncated or not finished)");
  }
  if (format::GetU32(trailer + 20) != version)
    return corrupt("trailer version differs from header");
  const uint64_t index_offset = format::GetU64(trailer);
  const uint64_t index_size = format::GetU64(trailer + 8);
  const uint64_t index_end = size - format::kTrailerSize;
  if (index_offset < format::kHeaderSize || index_offset > index_end ||
      index_size != index_end - index_offset) {
    return corrupt("index at offset " + std::to_string(index_offset) + " size " +
                   std::to_string(index_size) + " does not fit the file (" + std::to_string(size) +
                   " bytes)");
  }
  if (index_size > format::kMaxIndexSize || index_size < format::kIndexHeaderSize) {
    return corrupt("implausible index size " + std::to_string(index_size));
  }
  const uint32_t kind = format::GetU32(header + 16);
  if (kind > static_cast<uint32_t>(format::RecordKind::kRawU8)) {
    return corrupt("unknown record kind " + std::to_string(kind) + " in the header");
  }
  auto reader = std::unique_ptr<ShardReader>(new ShardReader(std::move(file)));
  reader->kind_ = static_cast<format::RecordKind>(kind);
  reader->index_crc_ = format::GetU32(trailer + 16);
  reader->version_ = version;
  SK_ASSIGN_OR_RETURN(reader->index_, reader->file_->MapRegion(index_offset, index_size));
  SK_RETURN_IF_ERROR(reader->ParseBlocks(index_offset));
  return reader;
}

Status ShardReader::ParseBlocks(uint64_t index_offset) {
  const std::string_view index = index_->bytes();
  auto corrupt = [&](const std::string& what) {
    return Status::Corruption(path() + ": index: " + what);
  };
  const char* p = index.data();
  const uint64_t nblocks = format::GetU32(p);
  const uint64_t nrecords = format::GetU32(p + 4);
  const uint64_t keys_size = format::GetU64(p + 8);
  const uint64_t entries = format::EntriesOffset(version_, nblocks, nrecords);
  const uint64_t need = entries + nrecords * format::kRecordEntrySize;
  if (keys_size > index.size() || need != index.size() - keys_size) {
    return corrupt("counts (" + std::to_string(nblocks) + " blocks, " + std::to_string(nrecords) +
                   " records, " + std::to_string(keys_size) +
                   " key bytes) disagree with its size " + std::to_string(index.size()));
  }
  if (version_ >= format::kFirstChunkedVersion) {
    // Header, block table and chunk CRCs carry their own checksum, checked now.
    const uint64_t head = entries - 4;
    if (crc32c::Value(index.data(), head) != format::GetU32(index.data() + head)) {
      return corrupt("header, block table or chunk table checksum mismatch");
    }
    chunk_crcs_ = index.data() + format::kIndexHeaderSize + nblocks * format::kBlockEntrySize;
    chunk_shift_ = format::kChunkShift;
    num_chunks_ = static_cast<uint32_t>(format::NumChunks(nrecords));
  }
  chunk_state_.reset(new std::atomic<uint8_t>[num_chunks_]);
  for (uint32_t c = 0; c < num_chunks_; ++c) chunk_state_[c].store(kIndexUnchecked);
  p += format::kIndexHeaderSize;
  blocks_.resize(nblocks);
  uint64_t next_offset = format::kHeaderSize;
  uint32_t next_record = 0;
  for (uint64_t b = 0; b < nblocks; ++b, p += format::kBlockEntrySize) {
    BlockEntry e = format::DecodeBlock(p);
    // Open parses every block entry (thousands per shard): no string unless one is bad.
    auto where = [b] { return "block " + std::to_string(b) + ": "; };
    if (e.offset != next_offset)
      return corrupt(where() + "offset " + std::to_string(e.offset) + " out of place");
    if (e.stored_size > index_offset - e.offset) return corrupt(where() + "extends past the index");
    if (e.raw_size > format::kMaxBlockRawSize)
      return corrupt(where() + "declared raw size over the limit");
    if (e.codec > static_cast<uint32_t>(format::Codec::kZstd))
      return corrupt(where() + "unknown codec");
    if (e.codec == static_cast<uint32_t>(format::Codec::kStored) && e.stored_size != e.raw_size) {
      return corrupt(where() + "stored block with raw size != stored size");
    }
    if (e.first_record != next_record || e.num_records == 0 ||
        e.num_records > nrecords - e.first_record) {
      return corrupt(where() + "record range out of place");
    }
    next_offset = e.offset + e.stored_size;
    next_record = e.first_record + e.num_records;
    blocks_[b] = e;
  }
  if (next_offset != index_offset) return corrupt("blocks do not end where the index starts");
  if (next_record != nrecords) return corrupt("blocks do not cover every record");
  num_records_ = static_cast<uint32_t>(nrecords);
  entries_ = index.data() + entries;
  keys_ = index.substr(index.size() - keys_size);
  return Status::OK();
}

// A sound chunk is checked without a lock (threads that meet it unchecked
// at once each check it: the same answer), so that no lock is held across
// the check: a process forked meanwhile (a DataLoader's worker) never finds
// one taken. A damaged chunk's error is kept under the lock.
bool ShardReader::CheckChunkOnce(uint32_t c) const {
  Status s = VerifyChunk(c);
  if (s.ok()) {
    uint8_t unchecked = kIndexUnchecked;
    chunk_state_[c].compare_exchange_strong(unchecked, kIndexGood, std::memory_order_release);
    return true;
  }
  std::lock_guard<std::mutex> lock(index_mu_);
  if (chunk_state_[c].load(std::memory_order_relaxed) == kIndexUnchecked) {
    chunk_errors_[c] = std::move(s);
    chunk_state_[c].store(kIndexBad, std::memory_order_release);
  }
  return false;
}

Status ShardReader::CheckRecord(uint32_t i) const {
  if (i >= num_records_) {
    return Status::InvalidArgument(path() + ": no record " + std::to_string(i) + " (shard has " +
                                   std::to_string(num_records_) + ")");
  }
  const uint32_t c = i >> chunk_shift_;
  if (ChunkChecked(c)) return Status::OK();
  std::lock_guard<std::mutex> lock(index_mu_);
  return chunk_errors_.at(c);
}

Status ShardReader::CheckIndex() const {
  for (uint64_t c = 0; c < num_chunks_; ++c) {
    if (!ChunkChecked(static_cast<uint32_t>(c))) {
      std::lock_guard<std::mutex> lock(index_mu_);
      return chunk_errors_.at(static_cast<uint32_t>(c));
    }
  }
  if (version_ < format::kFirstChunkedVersion) return Status::OK();  // its one chunk is the whole
  std::lock_guard<std::mutex> lock(index_mu_);
  if (!whole_checked_) {
    const std::string_view index = index_->bytes();
    index_->WillNeed(0, index.size());
    if (crc32c::Value(index.data(), index.size()) != index_crc_)
      whole_status_ = Status::Corruption(path() + ": index checksum mismatch");
    whole_checked_ = true;
  }
  return whole_status_;
}

Status ShardReader::VerifyChunk(uint32_t c) const {
  const std::string_view index = index_->bytes();
  if (version_ < format::kFirstChunkedVersion) {
    index_->WillNeed(0, index.size());  // one read of the index, not a fault per page
    if (crc32c::Value(index.data(), index.size()) != index_crc_) {
      return Status::Corruption(path() + ": index checksum mismatch");
    }
    return VerifyBounds(0, num_records_);
  }
  const uint64_t first = uint64_t{c} << chunk_shift_;
  const uint64_t end = std::min<uint64_t>(first + format::kChunkRecords, num_records_);
  const std::string records = "records " + std::to_string(first) + "-" + std::to_string(end - 1);
  const char* e = entries_ + first * format::kRecordEntrySize;
  index_->WillNeed(static_cast<size_t>(e - index.data()), (end - first) * format::kRecordEntrySize);
  uint32_t crc = 0;
  if (!format::ChunkCrc(e, end - first, keys_, &crc)) {
    return Status::Corruption(path() + ": index: " + records + ": key out of range");
  }
  if (crc != format::GetU32(chunk_crcs_ + 4 * c)) {
    return Status::Corruption(path() + ": index checksum mismatch (" + records + ")");
  }
  return VerifyBounds(first, end);
}

Status ShardReader::VerifyBounds(uint64_t first, uint64_t end) const {
  auto corrupt = [&](const std::string& what) {
    return Status::Corruption(path() + ": index: " + what);
  };
  const char* p = entries_ + first * format::kRecordEntrySize;
  for (uint64_t i = first; i < end; ++i, p += format::kRecordEntrySize) {
    const RecordEntry r = format::DecodeRecord(p);
    if (r.block >= blocks_.size())
      return corrupt("record " + std::to_string(i) + ": block out of range");
    const BlockEntry& b = blocks_[r.block];
    if (i < b.first_record || i >= uint64_t{b.first_record} + b.num_records) {
      return corrupt("record " + std::to_string(i) + ": not inside its block");
    }
    if (uint64_t{r.offset} + r.length > b.raw_size) {
      return corrupt("record " + std::to_string(i) + ": offset " + std::to_string(r.offset) +
                     " + length " + std::to_string(r.length) + " past its block's " +
                     std::to_string(b.raw_size) + " bytes");
    }
    if (r.key_length > format::kMaxKeySize ||
        uint64_t{r.key_offset} + r.key_length > keys_.size()) {
      return corrupt("record " + std::to_string(i) + ": key out of range");
    }
  }
  return Status::OK();
}

std::string ShardReader::Where(uint32_t i) const {
  std::string s = path() + ": record " + std::to_string(i);
  if (i < num_records_ &&
      chunk_state_[i >> chunk_shift_].load(std::memory_order_acquire) == kIndexGood) {
    const RecordEntry r = record(i);
    s += " (block " + std::to_string(r.block) + ", offset " + std::to_string(r.offset) + ")";
  }
  return s;
}

Status ShardReader::ReadBlock(uint32_t b, ReadScratch* scratch, std::string_view* raw) const {
  SK_RETURN_IF_ERROR(ReadBlockInto(b, scratch, &scratch->raw));
  *raw = std::string_view(scratch->raw.data(), scratch->raw.size());
  return Status::OK();
}

Status ShardReader::ReadBlockInto(uint32_t b, ReadScratch* scratch, std::vector<char>* out,
                                  std::string_view* stored) const {
  Status s = ReadBlockOnce(b, scratch, out, stored);
  // A cached copy that fails its checksum may have been damaged on its way
  // into the cache: dropped, the block is fetched from storage once more.
  if (s.IsCorruption() && b < blocks_.size() &&
      file_->Forget(blocks_[b].offset, blocks_[b].stored_size)) {
    s = ReadBlockOnce(b, scratch, out, stored);
  }
  return s;
}

Status ShardReader::ReadBlockOnce(uint32_t b, ReadScratch* scratch, std::vector<char>* out,
                                  std::string_view* stored) const {
  if (stored != nullptr) *stored = std::string_view();
  // A version 2 block table was checked at open; a version 1 one is checked
  // with the whole index.
  if (version_ < format::kFirstChunkedVersion && num_records_ > 0)
    SK_RETURN_IF_ERROR(CheckRecord(0));
  if (b >= blocks_.size())
    return Status::InvalidArgument(path() + ": no block " + std::to_string(b));
  const BlockEntry& e = blocks_[b];
  // "block 3 at offset 4096": read errors already name the path. Made only
  // for an error: a block read is on every loader's path.
  const auto block = [&] {
    return "block " + std::to_string(b) + " at offset " + std::to_string(e.offset);
  };
  const auto where = [&] { return path() + ": " + block(); };
  if (e.codec == static_cast<uint32_t>(format::Codec::kStored)) {
    out->resize(e.raw_size);
    const Status read = file_->Read(e.offset, e.stored_size, out->data());
    if (!read.ok()) return read.WithContext(block());
    file_->Release(e.offset, e.stored_size);
    if (stored != nullptr) *stored = std::string_view(out->data(), e.stored_size);
    if (crc32c::Value(out->data(), e.stored_size) != e.crc32c) {
      return Status::Corruption(where() + ": checksum mismatch");
    }
    return Status::OK();
  }
  std::string_view in;
  bool viewed = false;
  if (file_->mapped()) {  // Unsupported: not this range (a node cache at its limit)
    Status view = file_->View(e.offset, e.stored_size, &in);
    if (!view.ok() && !view.IsUnsupported()) return view.WithContext(block());
    viewed = view.ok();
  }
  if (!viewed) {
    scratch->stored.resize(e.stored_size);
    const Status read = file_->Read(e.offset, e.stored_size, scratch->stored.data());
    if (!read.ok()) return read.WithContext(block());
    in = std::string_view(scratch->stored.data(), e.stored_size);
  }
  if (stored != nullptr) *stored = in;
  const uint32_t got = crc32c::Value(in.data(), in.size());
  if (got != e.crc32c) {
    return Status::Corruption(where() + ": checksum mismatch (expected " + Hex(e.crc32c) +
                              ", got " + Hex(got) + ")");
  }
  if (Status d = DecompressBlock(in, e.raw_size, scratch, out); !d.ok()) {
    return Status::Corruption(where() + ": " + d.message());
  }
  file_->Release(e.offset, e.stored_size);  // the decompressed copy is what is used from now on
  return Status::OK();
}

Status DecompressBlock(std::string_view stored, uint32_t raw_size, ReadScratch* scratch,
                       std::vector<char>* out) {
  if (scratch->dctx == nullptr) scratch->dctx = ZSTD_createDCtx();
  out->resize(raw_size);
  // The output buffer is exactly the declared size: a frame that expands past
  // it fails with dstSize_tooSmall instead of allocating.
  size_t n =
      ZSTD_decompressDCtx(scratch->dctx, out->data(), raw_size, stored.data(), stored.size());
  if (ZSTD_isError(n)) return Status::Corruption(std::string("zstd: ") + ZSTD_getErrorName(n));
  if (n != raw_size) {
    return Status::Corruption("decompressed to " + std::to_string(n) + " bytes, expected " +
                              std::to_string(raw_size));
  }
  return Status::OK();
}

Status ShardReader::RecordFromBlock(uint32_t i, std::string_view block_raw,
                                    std::string_view* payload) const {
  SK_RETURN_IF_ERROR(CheckRecord(i));
  const RecordEntry r = record(i);
  if (uint64_t{r.offset} + r.length > block_raw.size()) {
    return Status::Corruption(Where(i) + ": past the end of its block");
  }
  std::string_view p = block_raw.substr(r.offset, r.length);
  const uint32_t got = crc32c::Value(p.data(), p.size());
  if (got != r.crc32c) {
    return Status::Corruption(Where(i) + ": checksum mismatch (expected " + Hex(r.crc32c) +
                              ", got " + Hex(got) + ")");
  }
  *payload = p;
  return Status::OK();
}

Status ShardReader::CheckStored(uint32_t i, std::string_view bytes) const {
  const RecordEntry r = record(i);
  const uint32_t got = crc32c::Value(bytes.data(), bytes.size());
  if (bytes.size() != r.length || got != r.crc32c) {
    return Status::Corruption(Where(i) + ": checksum mismatch (expected " + Hex(r.crc32c) +
                              ", got " + Hex(got) + ")");
  }
  return Status::OK();
}

Status ShardReader::RereadStored(uint32_t i, Status failed, char* dst) const {
  uint64_t offset = 0;
  uint32_t length = 0;
  if (!failed.IsCorruption() || !StoredExtent(i, &offset, &length) ||
      !file_->Forget(offset, length)) {
    return failed;
  }
  const Status read = file_->Read(offset, length, dst);
  if (!read.ok()) return read.WithContext(Where(i));
  return CheckStored(i, std::string_view(dst, length));
}

Status ShardReader::ReadRecord(uint32_t i, ReadScratch* scratch, std::string_view* payload) const {
  SK_RETURN_IF_ERROR(CheckRecord(i));
  const RecordEntry r = record(i);
  const BlockEntry& b = blocks_[r.block];
  if (b.codec == static_cast<uint32_t>(format::Codec::kStored)) {
    scratch->raw.resize(r.length);
    const Status read = file_->Read(b.offset + r.offset, r.length, scratch->raw.data());
    if (!read.ok()) return read.WithContext(Where(i));  // named only when it failed
    file_->Release(b.offset + r.offset, r.length);
    Status check = CheckStored(i, std::string_view(scratch->raw.data(), r.length));
    if (!check.ok()) check = RereadStored(i, check, scratch->raw.data());
    SK_RETURN_IF_ERROR(check);
    *payload = std::string_view(scratch->raw.data(), r.length);
    return Status::OK();
  }
  if (scratch->block_reader != id_ || scratch->block_index != r.block) {
    scratch->block_reader = 0;
    SK_RETURN_IF_ERROR(ReadBlockInto(r.block, scratch, &scratch->block));
    scratch->block_reader = id_;
    scratch->block_index = r.block;
  }
  return RecordFromBlock(i, std::string_view(scratch->block.data(), scratch->block.size()),
                         payload);
}

}  // namespace shardkit
