// ShardWriter: writes one shard file (see docs/shard_format.md). Records are
// appended in order, grouped into blocks that are zstd-compressed or stored.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/names.h"
#include "base/status.h"
#include "shard/shard_format.h"
#include "storage/file_io.h"

typedef struct ZSTD_CCtx_s ZSTD_CCtx;

namespace shardkit {

enum class CompressionMode {
  kStore,  // never compress (JPEG: already compressed)
  kZstd,   // compress every block with zstd
  kAuto,   // compress, but store a block whose compressed form saves less than 3%
};
// The names the Python binding uses (base/names.h): "none" is kStore.
inline constexpr EnumName<CompressionMode> kCompressionModeNames[] = {
    {CompressionMode::kAuto, "auto"},
    {CompressionMode::kZstd, "zstd"},
    {CompressionMode::kStore, "none"}};

struct ShardWriterOptions {
  CompressionMode compression = CompressionMode::kAuto;
  int zstd_level = 3;
  uint32_t block_size = 1 << 20;  // target raw bytes per block
  format::RecordKind kind = format::RecordKind::kBytes;
  // Blocks compressed this many at once, on as many threads, then written in
  // order: the same bytes as one at a time. While blocks wait, the writer's
  // estimated_size() counts them uncompressed, so a caller that ends shards
  // by size (not by record count) would end them earlier: keep 1 there.
  int compression_threads = 1;
};

// A finished shard as the manifest lists it.
struct ShardInfo {
  std::string file;  // a plain file name inside the dataset directory
  uint64_t records = 0;
  uint64_t bytes = 0;      // file size
  uint64_t raw_bytes = 0;  // sum of payload sizes
  uint32_t crc32c = 0;     // of the whole file
};

// Not thread-safe. The file is complete only after Finish() returns OK; a
// writer destroyed before that closes the file and leaves it for the caller
// (who wrote it under a temporary name) to delete.
class ShardWriter {
 public:
  // Writes `path` through `env` (null: Env::Default()).
  static Result<std::unique_ptr<ShardWriter>> Create(const std::string& path,
                                                     const ShardWriterOptions& options,
                                                     Env* env = nullptr);
  ~ShardWriter();

  Status Add(std::string_view payload, int32_t label, std::string_view key);
  // Writes the last block, the index and the trailer, fsyncs and closes.
  // Fills *info's counts, size and checksum (not `file`: the caller
  // publishes the shard under its final name).
  Status Finish(ShardInfo* info);

  uint64_t records() const { return records_.size(); }
  // Bytes the file would have if finished now, roughly (pending block uncompressed).
  uint64_t estimated_size() const;
  const std::string& path() const { return file_->path(); }

 private:
  ShardWriter(std::unique_ptr<WritableFile> file, const ShardWriterOptions& options);
  Status FlushBlock();
  // Compresses the queued blocks (in parallel) and appends them in order.
  Status WriteQueued();
  struct Queued {
    std::string raw;
    uint32_t first_record = 0, num_records = 0;
  };

  ShardWriterOptions options_;
  std::unique_ptr<WritableFile> file_;
  ZSTD_CCtx* cctx_ = nullptr;
  std::vector<Queued> queued_;     // closed blocks not written yet
  std::vector<ZSTD_CCtx*> cctxs_;  // one per compression thread beyond the first
  uint64_t queued_bytes_ = 0;
  std::string pending_;                        // raw bytes of the open block
  uint32_t pending_first_ = 0;                 // first record of the open block
  std::vector<std::vector<char>> compressed_;  // per queued block, kept for reuse
  std::vector<format::BlockEntry> blocks_;
  std::vector<format::RecordEntry> records_;
  std::string keys_;
  uint64_t raw_bytes_ = 0;
  bool finished_ = false;
};

}  // namespace shardkit
