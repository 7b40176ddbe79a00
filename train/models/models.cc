// The name table's constructors.
#include "train/models/models.h"

#include "train/models/resnet.h"
#include "train/models/tiny_net.h"

namespace shardkit {

Result<torch::nn::AnyModule> MakeModel(const ModelSpec& spec) {
  ModelArch arch;
  if (!ValueOf(kModelArchNames, spec.arch, &arch)) {
    return Status::InvalidArgument("unknown model '" + spec.arch + "' (must be " +
                                   NameList(kModelArchNames) + ")");
  }
  switch (arch) {
    case ModelArch::kResNet18:
      return MakeResNet18(spec);
    case ModelArch::kResNet34:
      return MakeResNet34(spec);
    case ModelArch::kResNet50:
      return MakeResNet50(spec);
    case ModelArch::kResNet20:
      return MakeResNet20(spec);
    case ModelArch::kTiny:
      return MakeTinyNet(spec);
  }
  return Status::InvalidArgument("model '" + spec.arch + "' has no constructor");
}

torch::nn::Module& AsModule(torch::nn::AnyModule& m) { return *m.ptr(); }

int64_t ParameterCount(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace shardkit
