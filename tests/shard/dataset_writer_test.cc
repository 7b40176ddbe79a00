// DatasetWriter's own record checks, which shardkit-pack and the Python
// binding share: labels within the classes, sizes the shape needs, and a
// refused Finish that leaves no manifest.
#include <gtest/gtest.h>

#include <filesystem>

#include "shard/dataset_writer.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::TempDir;

TEST(DatasetWriterTest, ChecksLabelsAndSizesForEveryWriter) {
  TempDir dir;
  DatasetWriterOptions o;
  o.shard.kind = format::RecordKind::kRawU8;
  o.num_classes = 3;
  o.raw_record_size = 4;
  auto w = DatasetWriter::Create(dir / "a", o);
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE((*w)->Add("1234", 2, "ok").ok());
  Status s = (*w)->Add("1234", 3, "three");
  EXPECT_EQ(s.message(), dir / "a" + ": record 'three' (number 1): label 3 but only 3 classes");
  s = (*w)->Add("12345", 0, "long");
  EXPECT_NE(s.message().find("5 bytes, the shape needs 4"), std::string::npos);
  EXPECT_TRUE((*w)->Add("1234", -2, "neg").IsInvalidArgument());
  EXPECT_EQ((*w)->records(), 1u);
  // Labels are checked against the manifest's classes at Finish too, and a
  // refused Finish leaves no manifest: the directory is not a dataset.
  DatasetWriterOptions p;
  p.shard.kind = format::RecordKind::kBytes;
  auto v = DatasetWriter::Create(dir / "b", p);
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE((*v)->Add("x", 5, "five").ok());
  Manifest m;
  m.record.kind = format::RecordKind::kBytes;
  m.classes = {"a", "b"};
  s = (*v)->Finish(m);
  EXPECT_NE(s.message().find("labels go up to 5 but the manifest lists 2 classes"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(std::filesystem::exists(dir / "b/manifest.json"));
}

}  // namespace
}  // namespace shardkit
