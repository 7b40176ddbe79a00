// A pack whose disk fills up, in process: the Packer given a WriteFaultEnv
// (tests/common/storage_double.h) as PackOptions::env fails in the spill, in a
// shard or in the manifest with the full disk's error naming the file, leaves
// nothing that looks complete (no manifest, no temporary, no partial shard;
// a directory it made is gone), and the same pack with room succeeds.
#include <gtest/gtest.h>

#include <functional>

#include "ingest/idx_file.h"
#include "ingest/packer.h"
#include "ingest/tree_source.h"
#include "shard/shard.h"
#include "tests/common/storage_double.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::TempDir;
using testing::WriteFaultEnv;

constexpr char kFullDisk[] = "write failed: No space left on device";

// IDX images (n of 28x28) and labels: raw records, written straight to shards.
void WriteIdx(const std::string& dir, int n) {
  auto be32 = [](uint32_t v) {
    return std::string{char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
  };
  std::string images = std::string{0, 0, 8, 3} + be32(n) + be32(28) + be32(28);
  std::string labels = std::string{0, 0, 8, 1} + be32(n);
  for (int i = 0; i < n; ++i) {
    for (int p = 0; p < 28 * 28; ++p) images += char((i * 131 + p * 7) % 251);
    labels += char(i % 10);
  }
  testing::WriteFile(dir + "/images", images);
  testing::WriteFile(dir + "/labels", labels);
}

Status PackIdx(const std::string& src, const std::string& out, Env* env) {
  SK_ASSIGN_OR_RETURN(auto source, OpenIdx(src + "/images", src + "/labels", {}));
  PackOptions o;
  o.out = out;
  o.shard_size = 64 << 10;  // about 80 records a shard
  o.threads = 2;
  o.env = env;
  PackSummary summary;
  return Pack(source.get(), o, PackEvents(), &summary);
}

// A tar of a class-folder tree of JPEGs: streamed members, which the packer
// holds in its spill before it writes them in the seeded order.
void WriteJpegTar(const std::string& dir) {
  for (int c = 0; c < 2; ++c) {
    const std::string cls = dir + "/tree/c" + std::to_string(c);
    testing::MakeDirs(cls);
    for (int i = 0; i < 20; ++i) {
      testing::WriteFile(cls + "/" + std::to_string(i) + ".jpg",
                         testing::MakeJpeg(testing::SyntheticImage(64, 48, 3, c * 100 + i),
                                           testing::JpegFlavor::kRgb));
    }
  }
  ASSERT_EQ(testing::RunCommand("tar -cf " + dir + "/tree.tar -C " + dir + "/tree c0 c1").exit_code,
            0);
}

Status PackTar(const std::string& tar, const std::string& out, Env* env) {
  TreeOptions t;
  t.src = tar;
  SK_ASSIGN_OR_RETURN(auto source, OpenTree(t));
  PackOptions o;
  o.out = out;
  o.shard_size = 16 << 10;
  o.threads = 2;
  o.env = env;
  PackSummary summary;
  return Pack(source.get(), o, PackEvents(), &summary);
}

// What a failed pack leaves: nothing (the directory it made is removed).
void ExpectNothingLeft(const std::string& out) {
  if (!Env::Default()->FileExists(out)) return;
  auto names = Env::Default()->ListDir(out);
  ASSERT_TRUE(names.ok());
  for (const auto& n : *names) {
    EXPECT_EQ(n.find(".tmp"), std::string::npos) << "temporary file left behind: " << n;
    EXPECT_NE(n, "manifest.json") << "a failed pack looks complete";
    EXPECT_NE(n.rfind("shard-", 0), 0u) << "shard left behind: " << n;
  }
  EXPECT_TRUE(Dataset::Open(out).status().IsNotFound());
}

// The same pack with room on the disk: it succeeds and the dataset holds
// `records` and verifies. Returns the bytes it wrote.
uint64_t RerunWithRoom(const std::function<Status(Env*)>& pack, const std::string& out,
                       uint64_t records) {
  WriteFaultEnv room;
  Status s = pack(&room);
  EXPECT_TRUE(s.ok()) << s.ToString();
  VerifyReport report;
  EXPECT_TRUE(VerifyDataset(out, 1, nullptr, &report).ok());
  auto m = ReadManifest(out);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (m.ok()) {
    EXPECT_EQ(m->records(), records);
  }
  return room.written();
}

TEST(PackFullDisk, FailingMidShardLeavesNothingAndARerunSucceeds) {
  TempDir dir;
  WriteIdx(dir.path(), 500);  // 7 shards
  WriteFaultEnv probe;
  ASSERT_TRUE(PackIdx(dir.path(), dir / "probe", &probe).ok());
  ASSERT_GT(ReadManifest(dir / "probe")->shards.size(), 4u);

  // The disk fills up half-way through the shards.
  WriteFaultEnv half(probe.written() / 2);
  Status s = PackIdx(dir.path(), dir / "out", &half);
  ASSERT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_NE(s.message().find(kFullDisk), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(dir / "out/.shard-0000"), std::string::npos)
      << "the error names the shard being written: " << s.message();
  EXPECT_GT(half.refused(), 0u);
  ExpectNothingLeft(dir / "out");

  RerunWithRoom([&](Env* env) { return PackIdx(dir.path(), dir / "out", env); }, dir / "out", 500);
}

TEST(PackFullDisk, FailingInTheManifestLeavesNoDatasetAndARerunSucceeds) {
  TempDir dir;
  WriteIdx(dir.path(), 200);
  WriteFaultEnv probe;
  ASSERT_TRUE(PackIdx(dir.path(), dir / "probe", &probe).ok());
  const uint64_t manifest = *FileSize(dir / "probe/manifest.json");

  // Room for every shard, and for all but the last byte of the manifest.
  WriteFaultEnv no_room(probe.written() - 1);
  Status s = PackIdx(dir.path(), dir / "out", &no_room);
  ASSERT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_NE(s.message().find(dir / "out/manifest.json.tmp: " + std::string(kFullDisk)),
            std::string::npos)
      << s.message();
  EXPECT_EQ(no_room.written(), probe.written() - manifest) << "every shard was written";
  ExpectNothingLeft(dir / "out");

  RerunWithRoom([&](Env* env) { return PackIdx(dir.path(), dir / "out", env); }, dir / "out", 200);
}

TEST(PackFullDisk, FailingInTheSpillLeavesNothingAndARerunSucceeds) {
  TempDir dir;
  WriteJpegTar(dir.path());
  // The spill (written before any shard) fills the disk.
  WriteFaultEnv tiny(4096);
  Status s = PackTar(dir / "tree.tar", dir / "out", &tiny);
  ASSERT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_NE(s.message().find("spill: " + dir / "out: scratch file: " + kFullDisk),
            std::string::npos)
      << s.message();
  ExpectNothingLeft(dir / "out");

  const uint64_t written = RerunWithRoom(
      [&](Env* env) { return PackTar(dir / "tree.tar", dir / "out", env); }, dir / "out", 40);
  // The spill went through the Env too: the images were written twice.
  EXPECT_GE(written, 2 * ReadManifest(dir / "out")->raw_bytes());
}

TEST(WriteFaultEnv, RefusesEveryAppendThatWouldPassTheBudget) {
  TempDir dir;
  WriteFaultEnv env(10);
  auto f = env.NewWritableFile(dir / "f");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE((*f)->Append("0123456").ok());
  Status s = (*f)->Append("789ab");
  EXPECT_TRUE(s.IsIOError());
  EXPECT_EQ(s.message(), dir / "f: " + std::string(kFullDisk));
  EXPECT_FALSE((*f)->Append("xyzw").ok()) << "7 + 4 bytes pass the budget of 10";
  EXPECT_TRUE((*f)->Append("789").ok()) << "what fits still fits";
  EXPECT_TRUE((*f)->Close().ok());
  EXPECT_EQ(testing::ReadFile(dir / "f"), "0123456789");
  EXPECT_EQ(env.written(), 10u);
  EXPECT_EQ(env.refused(), 2u);
}

}  // namespace
}  // namespace shardkit
