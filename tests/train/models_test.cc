// The models: parameter counts and state-dict names are torchvision's, every
// name in the table builds, and weights shardkit-train exports load into
// torchvision strictly and give the same outputs.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>

#include "base/random.h"
#include "shard/shard.h"
#include "tests/common/test_util.h"
#include "tests/train/train_test_util.h"
#include "train/models/models.h"

namespace shardkit {
namespace {

using testing::kPython;
using testing::kTrain;
using testing::LoadExport;
using testing::RunCommand;
using testing::TempDir;

bool PythonHasTorchvision() {
  return RunCommand(std::string(kPython) + " -c 'import torch, torchvision'").exit_code == 0;
}

TEST(ModelTest, ParameterCountsMatchTorchvision) {
  const std::pair<const char*, int64_t> want[] = {
      {"resnet18", 11689512}, {"resnet34", 21797672}, {"resnet50", 25557032}};
  for (const auto& [arch, count] : want) {
    ModelSpec s;
    s.arch = arch;
    auto m = MakeModel(s).value();
    EXPECT_EQ(ParameterCount(AsModule(m)), count) << arch;
  }
}

// The name table: every name builds a model that runs; an unknown name is an
// InvalidArgument naming it and every known name (no exception).
TEST(ModelTest, EveryNameInTheTableBuildsAndAnUnknownNameIsAStatus) {
  for (const auto& entry : kModelArchNames) {
    ModelSpec s;
    s.arch = entry.name;
    s.num_classes = 3;
    s.in_channels = 1;
    s.small_input_stem = true;
    auto m = MakeModel(s);
    ASSERT_TRUE(m.ok()) << entry.name << ": " << m.status().ToString();
    EXPECT_GT(ParameterCount(AsModule(*m)), 0) << entry.name;
    torch::NoGradGuard no_grad;
    AsModule(*m).eval();
    EXPECT_EQ(m->forward(torch::zeros({2, 1, 32, 32})).sizes(), (std::vector<int64_t>{2, 3}))
        << entry.name;
  }
  ModelSpec s;
  s.arch = "resnet99";
  auto m = MakeModel(s);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Status::Code::kInvalidArgument);
  const std::string msg = m.status().ToString();
  EXPECT_NE(msg.find("'resnet99'"), std::string::npos) << msg;
  for (const auto& entry : kModelArchNames)
    EXPECT_NE(msg.find(std::string("'") + entry.name + "'"), std::string::npos) << msg;
}

TEST(ModelTest, StateDictNamesMatchTorchvision) {
  ModelSpec s;
  s.arch = "resnet50";
  auto m = MakeModel(s).value();
  auto sd = StateDict(AsModule(m));
  for (const char* name :
       {"conv1.weight", "bn1.running_mean", "bn1.num_batches_tracked", "layer1.0.conv3.weight",
        "layer1.0.downsample.0.weight", "layer1.0.downsample.1.running_var", "layer4.2.bn3.bias",
        "fc.weight", "fc.bias"}) {
    EXPECT_TRUE(sd.count(name)) << name;
  }
  EXPECT_EQ(sd.size(), 320u);  // len(torchvision.models.resnet50().state_dict())
  if (!PythonHasTorchvision())
    GTEST_SKIP() << "python3-torchvision not installed: skipping the key-by-key comparison";
  for (const char* arch : {"resnet18", "resnet34", "resnet50"}) {
    ModelSpec spec;
    spec.arch = arch;
    auto model = MakeModel(spec).value();
    auto ours = StateDict(AsModule(model));
    auto r = RunCommand(
        std::string(kPython) + " -c \"import torchvision; m=torchvision.models." + arch +
        "(); print('\\n'.join(f'{k} {tuple(v.shape)}' for k, v in m.state_dict().items()))\"");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    std::set<std::string> theirs, mine;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) theirs.insert(line);
    for (const auto& [k, v] : ours) {
      std::string shape = "(";
      for (int64_t d = 0; d < v.dim(); ++d)
        shape += std::to_string(v.size(d)) + (v.dim() == 1 ? "," : (d + 1 < v.dim() ? ", " : ""));
      mine.insert(k + " " + shape + ")");
    }
    EXPECT_EQ(mine, theirs) << arch;
  }
}

// Loads an export of shardkit-train into our model of `spec` and into
// torchvision's (`constructor`, Python), runs both on x, and checks that
// torchvision takes the state dict strictly and gives our outputs.
void ExpectTorchvisionGivesOurOutputs(const TempDir& dir, const std::string& exported,
                                      const ModelSpec& spec, const std::string& constructor,
                                      const torch::Tensor& x) {
  auto m = MakeModel(spec).value();
  ASSERT_TRUE(LoadStateDict(AsModule(m), LoadExport(exported)).ok());
  AsModule(m).eval();
  torch::Tensor y = m.forward(x);
  ASSERT_EQ(y.size(1), spec.num_classes);
  c10::Dict<std::string, torch::Tensor> io;
  io.insert("x", x);
  io.insert("y", y.detach());
  auto bytes = torch::pickle_save(io);
  testing::WriteFile(dir / "io.pt", std::string(bytes.begin(), bytes.end()));
  const std::string py =
      "import torch, torchvision\n"
      "m = torchvision.models." +
      constructor +
      "\n"
      "m.load_state_dict(torch.load('" +
      exported +
      "'), strict=True)\n"
      "m.eval()\n"
      "io = torch.load('" +
      dir / "io.pt" +
      "')\n"
      "with torch.no_grad(): y = m(io['x'])\n"
      "d = (y - io['y']).abs().max().item()\n"
      "print('max diff', d)\n"
      "assert d < 1e-4, d\n";
  testing::WriteFile(dir / "check.py", py);
  auto check = RunCommand(std::string(kPython) + " " + dir / "check.py");
  EXPECT_EQ(check.exit_code, 0) << check.out;
}

TEST(TrainTest, ExportedWeightsLoadIntoTorchvisionAndGiveTheSameOutputs) {
  if (!PythonHasTorchvision()) GTEST_SKIP() << "python3-torch/python3-torchvision not installed";
  TempDir dir;
  // A tiny JPEG dataset (64x64, two classes) so the standard 7x7 stem is used.
  {
    DatasetWriterOptions o;
    o.shard.compression = CompressionMode::kStore;
    o.shard.kind = format::RecordKind::kJpeg;
    auto w = DatasetWriter::Create(dir / "jpeg", o);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 8; ++i) {
      std::string j =
          testing::MakeJpeg(testing::SyntheticImage(80, 72, 3, i), testing::JpegFlavor::kRgb);
      ASSERT_TRUE((*w)->Add(j, i % 2, std::to_string(i)).ok());
    }
    Manifest m;
    m.record.kind = format::RecordKind::kJpeg;
    m.classes = {"a", "b"};
    ASSERT_TRUE((*w)->Finish(m).ok());
  }
  auto r = RunCommand(kTrain + " --data " + dir / "jpeg" +
                      " --arch resnet18 --size 64 --batch-size 4 --workers 1"
                      " --max-steps 2 --quiet --export " +
                      dir / "resnet18.pt");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // Our output on a fixed input, and torchvision's.
  ModelSpec spec;
  spec.arch = "resnet18";
  spec.num_classes = 2;
  ExpectTorchvisionGivesOurOutputs(
      dir, dir / "resnet18.pt", spec, "resnet18(num_classes=2)",
      torch::sin(torch::arange(2 * 3 * 64 * 64, torch::kFloat32) * 0.001).view({2, 3, 64, 64}));
}

// The SVHN study's model: torchvision's resnet50() as it is (7x7 stem,
// max-pool, 1000 outputs) on 32x32 inputs that are not normalised (ToTensor
// only), batch 512 per rank in the study; here 4, for one step.
TEST(TrainTest, TheSvhnStudysResNet50IsTorchvisionsOn32PixelInputsWithItsThousandWayHead) {
  if (!PythonHasTorchvision()) GTEST_SKIP() << "python3-torch/python3-torchvision not installed";
  TempDir dir;
  {
    DatasetWriterOptions o;
    o.shard.kind = format::RecordKind::kRawU8;
    auto w = DatasetWriter::Create(dir / "svhn", o);
    ASSERT_TRUE(w.ok());
    KeyedRng rng(3);
    for (int i = 0; i < 16; ++i) {
      std::string px(32 * 32 * 3, '\0');
      for (auto& c : px) c = static_cast<char>(rng.Below(256));
      ASSERT_TRUE((*w)->Add(px, i % 10, std::to_string(i)).ok());
    }
    Manifest m;
    m.record.kind = format::RecordKind::kRawU8;
    m.record.shape = {32, 32, 3};
    for (int c = 0; c < 10; ++c) m.classes.push_back(std::to_string(c));
    ASSERT_TRUE((*w)->Finish(m).ok());
  }
  auto r = RunCommand(kTrain + " --data " + dir / "svhn" +
                      " --arch resnet50 --stem torchvision --num-classes 1000 --normalize none"
                      " --batch-size 4 --workers 1 --max-steps 1 --export " +
                      dir / "resnet50.pt");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("resnet50 (25557032 parameters, 1000 outputs, torchvision stem)"),
            std::string::npos)
      << r.out;
  ModelSpec spec;
  spec.arch = "resnet50";  // 1000 classes, torchvision's stem: ModelSpec's defaults
  ExpectTorchvisionGivesOurOutputs(
      dir, dir / "resnet50.pt", spec, "resnet50()",
      torch::cos(torch::arange(2 * 3 * 32 * 32, torch::kFloat32) * 0.01).view({2, 3, 32, 32}));
}

}  // namespace
}  // namespace shardkit
