// Status: an error's location is data (ErrorLocation), set where the error
// is made and kept through WithContext, so no caller reads it from the text.
#include <gtest/gtest.h>

#include "base/status.h"
#include "storage/env.h"
#include "storage/file_io.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

TEST(StatusTest, AnErrorMadeAtAPlaceSaysItFirstAndKeepsItAsFields) {
  Status s = Status::At(Status::Code::kCorruption, {"train.tar:n01.tar", "x.JPEG"}, "read error");
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_EQ(s.message(), "train.tar:n01.tar:x.JPEG: read error");
  ASSERT_NE(s.location(), nullptr);
  EXPECT_EQ(s.location()->file, "train.tar:n01.tar");
  EXPECT_EQ(s.location()->member, "x.JPEG");
  EXPECT_EQ(s.what(), "read error");
  Status file = Status::At(Status::Code::kIOError, {"/d/f", ""}, "cannot open: No such file");
  EXPECT_EQ(file.message(), "/d/f: cannot open: No such file");
  EXPECT_EQ(file.location()->ToString(), "/d/f");
}

TEST(StatusTest, ContextIsPrependedAndTheLocationKept) {
  Status s = Status::At(Status::Code::kNotFound, {"/d/f", ""}, "gone").WithContext("shard 3");
  EXPECT_TRUE(s.IsNotFound());
  EXPECT_EQ(s.message(), "shard 3: /d/f: gone");
  ASSERT_NE(s.location(), nullptr);
  EXPECT_EQ(s.location()->file, "/d/f");
  EXPECT_EQ(s.what(), "gone");
}

TEST(StatusTest, AnErrorWithoutAPlaceHasNone) {
  Status s = Status::InvalidArgument("workers must be in 1..256, not 0");
  EXPECT_EQ(s.location(), nullptr);
  EXPECT_EQ(s.what(), s.message());
  EXPECT_EQ(Status::OK().location(), nullptr);
}

TEST(StatusTest, TheFilesystemLocatesItsErrorsAtThePath) {
  testing::TempDir dir;
  const std::string missing = dir / "missing";
  auto r = Env::Default()->OpenForReads(missing);
  ASSERT_FALSE(r.ok());
  ASSERT_NE(r.status().location(), nullptr);
  EXPECT_EQ(r.status().location()->file, missing);
  EXPECT_EQ(r.status().message(), missing + ": " + r.status().what());
  auto d = Env::Default()->OpenForReads(dir.path());  // a directory
  ASSERT_FALSE(d.ok());
  ASSERT_NE(d.status().location(), nullptr);
  EXPECT_EQ(d.status().location()->file, dir.path());
  EXPECT_EQ(d.status().what(), "is a directory, not a regular file");
  testing::WriteFile(dir / "big", std::string(100, 'x'));
  auto big = Env::Default()->ReadFile(dir / "big", 10);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().location()->file, dir / "big");
}

}  // namespace
}  // namespace shardkit
