// Packer: a SampleSource into a dataset directory. Makes each sample its
// record by the rule the Python Writer follows too (PrepareRecord: images
// validated and converted), keeps streamed bytes in a spill (a ScratchFile
// without a name), puts records in the seeded order, checks keys, applies
// --strict, counts, and writes shards through a DatasetWriter.
//
// Whatever way a pack ends short of success (an error, --strict, an
// interrupt), OUT is left as it was found: no shard, no temporary file, no
// spill (the spill has no name at all), and a directory the pack created is
// removed. A pack that is killed instead (SIGKILL, the machine going down)
// leaves its finished shards under temporary names, and the same pack run
// again keeps them and writes only the rest, with the bytes of a run never
// interrupted. Records fixed-size and known up front (IDX, HDF5, .mat,
// bigMNIST: the sources that --part can split) are resumed by the settings
// before the source is read (DatasetWriterOptions::resume_fingerprint);
// images (folders, archives, WebDataset), whose records are known only once
// Scan has read and prepared them, by the settings and the planned records
// in their seeded order (keys, labels, stored sizes and checksums, a file's
// stamp), once Scan is done (DatasetWriter::Resume), each kept shard checked
// against that plan. Progress and problems reach the caller through
// PackEvents; the library prints nothing.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "image/prepare.h"
#include "ingest/source.h"
#include "storage/env.h"

namespace shardkit {

inline constexpr uint64_t kMaxSourceMember = 64ull << 20;  // per image file or member

struct PackOptions {
  std::string out;
  uint64_t shard_size = 256ull << 20;
  int resize_short = 0;               // JPEG: 0 keeps the bytes
  int quality = kDefaultJpegQuality;  // JPEG: for re-encoded images
  // Raw records (zstd-compressed, DatasetRules): the level, and the raw
  // bytes of a block, what a random read decompresses.
  int zstd_level = 3;
  uint32_t block_size = 1u << 20;
  int threads = 0;                // 0: all cores
  uint64_t seed = 0;              // the record order (unless the source keeps its own)
  bool strict = false;            // the first unusable member fails the pack
  bool force = false;             // replace a dataset in OUT
  std::string created_by = "{}";  // JSON for the manifest
  // --part I/N: write only part `part_index` of `part_count` (0: the whole
  // dataset), its shards named as the whole's, and part.json, for
  // `shardkit-pack merge`. Only sources that know their records up front
  // (IDX, HDF5) can be split exactly; the others are refused.
  uint32_t part_index = 0, part_count = 0;
  // JSON object: what decides the bytes (PackSettings: the source's inputs
  // and options, and these options'; not --threads). A part's part.json
  // carries a digest of them and of the packer's own (record format, count,
  // shard plan, version); created_by carries them in full, as "settings".
  // With them and the part (images: and the planned records) they are the
  // fingerprint by which a killed pack is resumed; left "{}", a pack is not
  // resumed.
  std::string settings = "{}";
  // Where OUT is written (shards, spill, manifest, lock): null is the POSIX
  // filesystem (Env::Default()); a test passes a double that fails writes.
  Env* env = nullptr;
  // Checked often; once true the pack stops, cleans up, and returns Aborted.
  const std::atomic<bool>* interrupt = nullptr;
};

struct PackSummary {
  uint64_t packed = 0, classes = 0, shards = 0;
  ConversionCounts conversions;  // records stored other than as the source gave them
  uint64_t unusable[static_cast<int>(Unusable::kCount)] = {};
  uint64_t bytes_in = 0, bytes_out = 0;
  uint64_t resumed_shards = 0;  // kept from a killed run of the same settings (packed counts them)
  double seconds = 0;
  uint64_t skipped() const;  // every unusable member, of every reason
};

struct PackEvents {
  // One line per unusable member and per note, as they are found.
  std::function<void(const std::string&)> report;
  // A phase ("read SRC", "write shards") with items done of total (0:
  // unknown) and bytes done; `final` once when the phase ends. A "read"
  // phase's items are the source's bytes.
  std::function<void(const std::string& phase, uint64_t done, uint64_t total, uint64_t bytes,
                     bool final)>
      progress;
};

Status Pack(SampleSource* source, const PackOptions& options, const PackEvents& events,
            PackSummary* summary);

// The settings of a pack of `source` with `options`, for
// PackOptions::settings (shardkit-pack and shardkit-augment both set them
// so): the source's (SampleSource::Settings) with the shard size and, for
// images, the re-encoding and the seeded order (resize_short, quality,
// seed); not the part (the parts of one dataset share their settings) nor
// the threads. "{}" for a source that names nothing. Reads the inputs the
// source names by content (an IDX file, for its CRC32C).
Result<std::string> PackSettings(const SampleSource& source, const PackOptions& options);

}  // namespace shardkit
