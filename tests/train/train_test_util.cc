// The training tests' shared helpers (train_test_util.h).
#include "tests/train/train_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <vector>

#include "base/random.h"
#include "shard/shard.h"

namespace shardkit::testing {

void WriteToyDataset(const std::string& dir, int n, int classes, const std::string& class_prefix) {
  DatasetWriterOptions o;
  o.shard.kind = format::RecordKind::kRawU8;
  auto w = DatasetWriter::Create(dir, o);
  ASSERT_TRUE(w.ok());
  KeyedRng rng(7);
  for (int i = 0; i < n; ++i) {
    const int label = classes > 0 ? i % classes : -1;
    std::string px(64, '\0');
    for (auto& c : px)
      c = static_cast<char>(std::min<int>(255, label * 60 + static_cast<int>(rng.Below(40))));
    if (classes == 0) {  // unlabelled
      ASSERT_TRUE((*w)->Add(px, -1, std::to_string(i)).ok());
      continue;
    }
    ASSERT_TRUE((*w)->Add(px, label, std::to_string(i)).ok());
  }
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {8, 8, 1};
  for (int c = 0; c < classes; ++c) m.classes.push_back(class_prefix + std::to_string(c));
  ASSERT_TRUE((*w)->Finish(m).ok());
}

std::map<std::string, torch::Tensor> LoadExport(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::map<std::string, torch::Tensor> m;
  for (const auto& e : torch::pickle_load(bytes).toGenericDict())
    m[e.key().toStringRef()] = e.value().toTensor();
  return m;
}

double MaxDiff(const std::map<std::string, torch::Tensor>& a,
               const std::map<std::string, torch::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    EXPECT_NE(it, b.end()) << k;
    if (it == b.end()) continue;
    d = std::max(
        d, (v.to(torch::kFloat64) - it->second.to(torch::kFloat64)).abs().max().item<double>());
  }
  return d;
}

torch::nn::AnyModule TinyModel(int num_classes) {
  ModelSpec spec;
  spec.arch = "tiny";
  spec.num_classes = num_classes;
  spec.in_channels = 1;
  return MakeModel(spec).value();
}

bool ReadToyCheckpoint(const std::string& path, TrainPosition* pos) {
  auto m = TinyModel(4);
  return LoadCheckpoint(path, AsModule(m), nullptr, pos).ok();
}

std::string TrainCmd(const std::string& data, const std::string& extra) {
  return kTrain + " --data " + data +
         " --arch tiny --workers 1 --threads 1 --quiet --lr 0.5 --weight-decay 0 " + extra;
}

TrainOptions TinyTrainOptions(const std::string& data) {
  TrainOptions o;
  o.data = data;
  o.arch = "tiny";
  o.workers = 1;
  o.threads = 1;
  o.batch_size = 8;
  o.lr = 0.5;
  return o;
}

}  // namespace shardkit::testing
