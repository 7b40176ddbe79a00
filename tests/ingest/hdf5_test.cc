// HDF5 import (the source behind shardkit-pack hdf5), in process: a file that
// cannot be packed is an error naming it and leaves no manifest; 4-D images
// and other dataset names pack; a huge label value is an error, not an
// allocation.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <string>
#include <tuple>
#include <vector>

#include "ingest/hdf5.h"
#include "ingest/packer.h"
#include "shard/shard.h"
#include "storage/env.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::TempDir;

// shardkit-pack hdf5's options, and the pack it runs.
struct Hdf5PackOptions : Hdf5Options {
  std::string out;
  bool quiet = true, force = false;
  uint64_t shard_size = 256ull << 20;
};

Status PackHdf5(const Hdf5PackOptions& h) {
  SK_ASSIGN_OR_RETURN(auto source, OpenHdf5(h));
  PackOptions o;
  o.out = h.out;
  o.force = h.force;
  o.shard_size = h.shard_size;
  PackSummary sum;
  return Pack(source.get(), o, PackEvents(), &sum);
}

void WriteH5(const std::string& path,
             const std::vector<std::tuple<std::string, hid_t, std::vector<hsize_t>>>& sets) {
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  for (const auto& [name, type, dims] : sets) {
    hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    hid_t d = H5Dcreate2(f, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t n = 1;
    for (auto v : dims) n *= v;
    std::vector<uint8_t> zeros(n * H5Tget_size(type), 0);
    H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data());
    H5Dclose(d);
    H5Sclose(space);
  }
  H5Fclose(f);
}

TEST(Hdf5Import, ClearErrors) {
  TempDir dir;
  struct Case {
    std::string name;
    std::vector<std::tuple<std::string, hid_t, std::vector<hsize_t>>> sets;
    std::string expect;
  } cases[] = {
      {"rank2",
       {{"/images", H5T_NATIVE_UINT8, {4, 28}}, {"/labels", H5T_NATIVE_INT32, {4}}},
       "rank 3 (N,H,W)"},
      {"float",
       {{"/images", H5T_NATIVE_FLOAT, {4, 28, 28}}, {"/labels", H5T_NATIVE_INT32, {4}}},
       "must be uint8"},
      {"float_labels",
       {{"/images", H5T_NATIVE_UINT8, {4, 28, 28}}, {"/labels", H5T_NATIVE_FLOAT, {4}}},
       "labels must be integers"},
      {"mismatch",
       {{"/images", H5T_NATIVE_UINT8, {4, 28, 28}}, {"/labels", H5T_NATIVE_INT32, {5}}},
       "length mismatch"},
      {"missing", {{"/images", H5T_NATIVE_UINT8, {4, 28, 28}}}, "no dataset '/labels'"},
      {"labels_2d",
       {{"/images", H5T_NATIVE_UINT8, {4, 28, 28}}, {"/labels", H5T_NATIVE_INT32, {4, 1}}},
       "rank 1"},
  };
  for (const auto& c : cases) {
    const std::string path = dir / (c.name + ".h5");
    WriteH5(path, c.sets);
    Hdf5PackOptions o;
    o.file = path;
    o.out = dir / (c.name + "_out");
    o.quiet = true;
    Status s = PackHdf5(o);
    EXPECT_FALSE(s.ok()) << c.name;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << c.name << ": " << s.message();
    EXPECT_NE(s.message().find(path), std::string::npos) << "must name the file: " << s.message();
    EXPECT_FALSE(Env::Default()->FileExists(o.out + "/manifest.json"));
  }
  testing::WriteFile(dir / "text.h5", "not hdf5 at all");
  Hdf5PackOptions o;
  o.file = dir / "text.h5";
  o.out = dir / "x";
  EXPECT_NE(PackHdf5(o).message().find("not an HDF5 file"), std::string::npos);
}

TEST(Hdf5Import, FourDimensionalImagesAndLabels) {
  TempDir dir;
  hid_t f = H5Fcreate((dir / "ok.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t idims[4] = {3, 4, 5, 3}, ldims[1] = {3};
  std::vector<uint8_t> px(3 * 4 * 5 * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i);
  int64_t labels[3] = {2, 0, 1};
  hid_t is = H5Screate_simple(4, idims, nullptr), ls = H5Screate_simple(1, ldims, nullptr);
  hid_t di = H5Dcreate2(f, "/x", H5T_STD_U8LE, is, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t dl = H5Dcreate2(f, "/y", H5T_STD_I64LE, ls, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(di, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, px.data());
  H5Dwrite(dl, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels);
  H5Dclose(di);
  H5Dclose(dl);
  H5Sclose(is);
  H5Sclose(ls);
  H5Fclose(f);
  Hdf5PackOptions o;
  o.file = dir / "ok.h5";
  o.out = dir / "out";
  o.images = "/x";
  o.labels = "/y";
  o.quiet = true;
  ASSERT_TRUE(PackHdf5(o).ok());
  auto ds = Dataset::Open(dir / "out");
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ((*ds)->manifest().record.shape, (std::vector<int64_t>{4, 5, 3}));
  EXPECT_EQ((*ds)->shard(0).record(0).label, 2);
  ReadScratch s;
  std::string_view p;
  ASSERT_TRUE((*ds)->shard(0).ReadRecord(2, &s, &p).ok());
  EXPECT_EQ(static_cast<uint8_t>(p[0]), 120);
}

// Found by fuzz_hdf5_import: a label near 2^31 made the default class list
// (one name per label value) exhaust memory.
TEST(Hdf5Import, HugeLabelValueIsAClearErrorNotAnAllocation) {
  TempDir dir;
  hid_t f = H5Fcreate((dir / "big_label.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t idims[3] = {1, 2, 2}, ldims[1] = {1};
  uint8_t px[4] = {1, 2, 3, 4};
  int32_t label = 2147483000;
  hid_t is = H5Screate_simple(3, idims, nullptr), ls = H5Screate_simple(1, ldims, nullptr);
  hid_t di = H5Dcreate2(f, "/images", H5T_STD_U8LE, is, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t dl = H5Dcreate2(f, "/labels", H5T_STD_I32LE, ls, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(di, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, px);
  H5Dwrite(dl, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, &label);
  H5Dclose(di);
  H5Dclose(dl);
  H5Sclose(is);
  H5Sclose(ls);
  H5Fclose(f);
  Hdf5PackOptions o;
  o.file = dir / "big_label.h5";
  o.out = dir / "out";
  o.quiet = true;
  Status s = PackHdf5(o);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("--class-names"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace shardkit
