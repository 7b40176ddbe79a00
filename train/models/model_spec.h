// The models shardkit-train builds, by name, and what a model is asked to be.
// No LibTorch here: shardkit-train's flags (tools/train/train_cli.cc, also
// built into the torch-free command-line fuzz target) take --arch's allowed
// values and its help from this table; train/models/models.h builds them.
#pragma once

#include <string>

#include "base/names.h"

namespace shardkit {

// To add a model: a value and its name here, its constructor in a file of
// train/models/, and its case in MakeModel (train/models/models.cc).
enum class ModelArch { kResNet18, kResNet34, kResNet50, kResNet20, kTiny };
inline constexpr EnumName<ModelArch> kModelArchNames[] = {{ModelArch::kResNet18, "resnet18"},
                                                          {ModelArch::kResNet34, "resnet34"},
                                                          {ModelArch::kResNet50, "resnet50"},
                                                          {ModelArch::kResNet20, "resnet20"},
                                                          {ModelArch::kTiny, "tiny"}};

struct ModelSpec {
  std::string arch = NameOf(kModelArchNames, ModelArch::kResNet18);  // a name of the table
  int num_classes = 1000;
  int in_channels = 3;
  // The MNIST stem: a 3x3 stride-1 first conv and no max-pool (for 28x28
  // inputs); the trainer chooses it for inputs smaller than 64.
  bool small_input_stem = false;
};

}  // namespace shardkit
