// The fuzz targets' bodies.
#include "tests/fuzz/fuzz_targets.h"
#include "ingest/archive_reader.h"
#include "ingest/devkit.h"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "image/codec.h"
#include "ingest/hdf5.h"
#include "ingest/idx_file.h"
#include "ingest/mat_file.h"
#include "ingest/packer.h"
#include "ingest/tree_source.h"
#include "ingest/webdataset_source.h"
#include "loader/transforms.h"
#include "shard/shard.h"

namespace shardkit::fuzz {
namespace {

// A per-process scratch path (fuzzers may run several processes).
std::string ScratchPath(const char* name) {
  const char* base = std::getenv("TMPDIR");
  return std::string(base ? base : "/tmp") + "/shardkit-fuzz-" + std::to_string(getpid()) + "-" +
         name;
}

void WriteBytes(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return;
  if (size > 0) std::fwrite(data, 1, size, f);
  std::fclose(f);
}

// Packs `source` (if it opened) into `out`, quietly, and removes `out`.
void PackAndRemove(Result<std::unique_ptr<SampleSource>> source, const std::string& out) {
  if (source.ok()) {
    PackOptions o;
    o.out = out;
    o.force = true;
    o.shard_size = 4096;
    o.threads = 1;
    PackSummary sum;
    (void)Pack(source->get(), o, PackEvents(), &sum);
  }
  std::error_code ec;
  std::filesystem::remove_all(out, ec);
}

}  // namespace

int ShardReader(const uint8_t* data, size_t size) {
  const std::string path = ScratchPath("shard");
  WriteBytes(path, data, size);
  auto r = shardkit::ShardReader::Open(path);
  if (r.ok()) {
    ReadScratch scratch;
    for (uint32_t b = 0; b < (*r)->num_blocks(); ++b) {
      std::string_view raw;
      if (!(*r)->ReadBlock(b, &scratch, &raw).ok()) continue;
      std::string copy(raw);
      const auto& be = (*r)->block(b);
      for (uint32_t i = be.first_record; i < be.first_record + be.num_records; ++i) {
        std::string_view p;
        (void)(*r)->RecordFromBlock(i, copy, &p);
        (void)(*r)->key(i);
      }
    }
    for (uint32_t i = 0; i < (*r)->num_records(); ++i) {
      std::string_view p;
      (void)(*r)->ReadRecord(i, &scratch, &p);
    }
  }
  unlink(path.c_str());
  return 0;
}

int MetaMat(const uint8_t* data, size_t size) {
  (void)ParseMetaMat(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  return 0;
}

// The bytes as a .mat file packed as `pack mat FILE --images X --labels y`
// would. Level 5 only: a 7.3 file is HDF5, whose parser is fuzzed through
// its API (Hdf5Import), not with raw bytes.
int Mat(const uint8_t* data, size_t size) {
  if (size >= 128 && data[124] == 0x00 && data[125] == 0x02) return 0;
  const std::string path = ScratchPath("file.mat");
  WriteBytes(path, data, size);
  MatOptions o;
  o.file = path;
  o.images = "X";
  o.labels = "y";
  PackAndRemove(OpenMat(o), ScratchPath("mat-out"));
  unlink(path.c_str());
  return 0;
}

// The bytes as an archive of an image tree, and as a WebDataset shard: the
// whole way in (archive reader, tree layout, WebDataset grouping, Packer).
int Archive(const uint8_t* data, size_t size) {
  const std::string path = ScratchPath("archive") + ".tar";
  WriteBytes(path, data, size);
  TreeOptions tree;
  tree.src = path;
  PackAndRemove(OpenTree(tree), ScratchPath("archive-out"));
  PackAndRemove(OpenWebDataset({path}, {}), ScratchPath("wds-out"));
  unlink(path.c_str());
  return 0;
}

// The bytes as a val CSV (ReadValLabels) and as a WebDataset shard pattern.
int ValLabels(const uint8_t* data, size_t size) {
  const std::string path = ScratchPath("val.csv");
  WriteBytes(path, data, size);
  (void)ReadValLabels(path);
  unlink(path.c_str());
  const std::string text(reinterpret_cast<const char*>(data), std::min<size_t>(size, 256));
  auto paths = ExpandShardPattern(text, 4096);  // the tool's bound is 1,000,000: too slow here
  if (paths.ok() && paths->size() > 4096) std::abort();  // the bound it promises
  return 0;
}

int Manifest(const uint8_t* data, size_t size) {
  auto m = ParseManifest(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (m.ok()) (void)ManifestToJson(*m);
  return 0;
}

int Idx(const uint8_t* data, size_t size) {
  (void)ParseIdx(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  const std::string path = ScratchPath("idx");
  WriteBytes(path, data, size);
  (void)ReadIdxFile(path, 64ull << 20);
  unlink(path.c_str());
  return 0;
}

int JpegTransform(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  // The first bytes choose the transform; the rest is the image.
  const uint8_t mode = data[0], side = static_cast<uint8_t>(8 + data[1] % 120);
  const uint64_t key = data[2] | (uint64_t{data[3]} << 8);
  data += 4;
  size -= 4;
  static thread_local JpegDecoder dec;
  JpegInfo info;
  if (SniffImageFormat(data, size) == ImageFormat::kPng) {
    Image img;
    (void)DecodePng(data, size, &img);
    return 0;
  }
  if (!dec.ReadHeader(data, size, &info).ok()) return 0;
  TransformParams tp;
  tp.size = side;
  CropDecision crop;
  if (mode % 3 == 0) {
    KeyedRng rng(key);
    crop = RandomResizedCrop(std::max(1, info.width), std::max(1, info.height), tp, &rng);
  } else if (mode % 3 == 1) {
    crop = CenterCrop(std::max(1, info.width), std::max(1, info.height), tp);
  } else {
    crop.rect = RectF{0, 0, double(info.width), double(info.height)};
  }
  DecodeRequest req;
  req.crop = crop.rect;
  req.min_width = req.min_height = side;
  req.fast = req.simd_scales_only = (mode & 4) != 0;
  req.strict = (mode & 8) != 0;
  DecodedRegion region;
  if (!dec.Decode(data, size, req, &region).ok()) return 0;
  std::vector<uint8_t> out(static_cast<size_t>(side) * side * 3);
  ResampleScratch rs;
  Resample(region.image, region.crop, side, side, crop.flip, out.data(), &rs,
           (mode & 16) ? Layout::kNCHW : Layout::kNHWC);
  return 0;
}

int Hdf5Import(const uint8_t* data, size_t size) {
  if (size < 12) return 0;
  // Bytes -> an HDF5 file whose datasets have fuzzer-chosen ranks, shapes,
  // types and contents (all within what HDF5 itself accepts), then import.
  size_t pos = 0;
  auto next = [&]() -> uint8_t { return pos < size ? data[pos++] : 0; };
  static const hid_t kTypes[] = {H5T_NATIVE_UINT8, H5T_NATIVE_INT8,  H5T_NATIVE_UINT16,
                                 H5T_NATIVE_INT32, H5T_NATIVE_INT64, H5T_NATIVE_FLOAT,
                                 H5T_NATIVE_DOUBLE};
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const std::string path = ScratchPath("h5"), out = ScratchPath("h5out");
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) return 0;
  const char* names[] = {"/images", "/labels"};
  for (int d = 0; d < 2; ++d) {
    if (next() % 8 == 0) continue;  // sometimes missing
    const int rank = 1 + next() % 4;
    hsize_t dims[4];
    hsize_t total = 1;
    for (int k = 0; k < rank; ++k) {
      dims[k] = next() % 9;
      total *= dims[k];
    }
    const hid_t type = kTypes[next() % 7];
    hid_t space = H5Screate_simple(rank, dims, nullptr);
    hid_t ds = H5Dcreate2(f, names[d], type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (ds >= 0 && total > 0) {
      std::vector<uint8_t> buf(total * H5Tget_size(type));
      for (auto& b : buf) b = next();
      H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
    }
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(space);
  }
  H5Fclose(f);
  Hdf5Options o;
  o.file = path;
  PackAndRemove(OpenHdf5(o), out);
  unlink(path.c_str());
  std::error_code ec;
  std::filesystem::remove_all(out, ec);
  return 0;
}

}  // namespace shardkit::fuzz
