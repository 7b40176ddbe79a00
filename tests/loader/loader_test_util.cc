// The loader stage tests' shared dataset helpers (loader_test_util.h).
#include "tests/loader/loader_test_util.h"

#include <gtest/gtest.h>

#include <string_view>

namespace shardkit::testing {

void WriteRaw(const std::string& dir, int n, int side, CompressionMode mode, uint32_t block,
              int corrupt) {
  DatasetWriterOptions o;
  o.shard.compression = mode;
  o.shard.kind = format::RecordKind::kRawU8;
  o.shard.block_size = block;
  auto w = DatasetWriter::Create(dir, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const size_t bytes = size_t(side) * side;
  for (int i = 0; i < n; ++i) {
    std::string p(i == corrupt ? bytes / 2 : bytes, '\0');
    for (size_t j = 0; j < p.size(); ++j) p[j] = static_cast<char>((i * 131 + j * 7) & 0xFF);
    ASSERT_TRUE((*w)->Add(p, i % 4, std::to_string(i)).ok());
  }
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {side, side, 1};
  m.classes = {"a", "b", "c", "d"};
  ASSERT_TRUE((*w)->Finish(m).ok());
}

std::string Expected(const Dataset& ds, uint64_t record) {
  const auto [shard, local] = ds.Locate(record);
  ReadScratch s;
  std::string_view p;
  EXPECT_TRUE(ds.shard(shard).ReadRecord(local, &s, &p).ok());
  return std::string(p);
}

}  // namespace shardkit::testing
