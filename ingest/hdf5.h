// HDF5 in and out: uint8 image arrays (N x H x W [x C]) and integer labels (N)
// as a SampleSource read in slabs (the file never has to fit in memory), and
// the HDF5 writer shardkit-augment uses for --format hdf5.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "ingest/source.h"

namespace shardkit {

struct Hdf5Options {
  std::string file;
  std::string images = "/images", labels = "/labels";
  std::vector<std::string> class_names;  // else "0".."max label"
};

// The file opened and checked (types, ranks, lengths, labels): a source of
// raw_u8 records in the file's order.
Result<std::unique_ptr<SampleSource>> OpenHdf5(const Hdf5Options& options);

// Refuses a dataset (an HDF5 hid_t) whose data is not in its own file: a
// virtual dataset or one with external raw storage reads as its fill value
// (zeros) where a source file is missing or short, so neither is read.
Status CheckStoredInFile(int64_t dataset, const std::string& where);

// Streams images (uint8, N x H x W) and labels (int32, N) into a new HDF5
// file: chunked, deflate-compressed /images and /labels. Written to path.tmp
// and renamed on Close(), so a partial file never has the final name.
class Hdf5ImageWriter {
 public:
  static Result<std::unique_ptr<Hdf5ImageWriter>> Create(const std::string& path, uint64_t count,
                                                         int height, int width);
  ~Hdf5ImageWriter();
  // Writes `n` consecutive items starting at `first`.
  Status Write(uint64_t first, uint64_t n, const uint8_t* images, const int32_t* labels);
  Status Close();

 private:
  Hdf5ImageWriter() = default;
  std::string path_;
  int64_t file_ = -1, images_ = -1, labels_ = -1;
  int height_ = 0, width_ = 0;
};

}  // namespace shardkit
