// IdxFile: MNIST-style IDX files (plain or gzip), as MNIST and Fashion-MNIST
// ship them. Only unsigned-byte data (type 0x08) is accepted.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "ingest/source.h"

namespace shardkit {

struct IdxArray {
  std::vector<uint32_t> dims;  // dims[0] is the item count
  std::vector<uint8_t> data;   // row-major, dims product bytes
  uint64_t item_size() const;  // product of dims[1..]
};

// Parses IDX bytes (already decompressed). `where` names the source in errors.
Result<IdxArray> ParseIdx(std::string_view bytes, const std::string& where);
// Reads an IDX file, gunzipping it if it starts with the gzip magic. Refuses
// a file whose header declares more than `max_bytes` of data.
Result<IdxArray> ReadIdxFile(const std::string& path, uint64_t max_bytes = 64ull << 30);

// Images (N x H x W, or N x H x W x C) and their labels (N), checked against each other.
struct IdxDataset {
  IdxArray images, labels;
  int height = 0, width = 0, channels = 1;
  uint64_t count() const { return images.dims.empty() ? 0 : images.dims[0]; }
};
Result<IdxDataset> ReadIdxDataset(const std::string& images_path, const std::string& labels_path);

// The two files as a source of raw_u8 records in file order, keyed by
// their index ("00000042"); classes `class_names`, else "0".."max label".
Result<std::unique_ptr<SampleSource>> OpenIdx(const std::string& images_path,
                                              const std::string& labels_path,
                                              const std::vector<std::string>& class_names);

}  // namespace shardkit
