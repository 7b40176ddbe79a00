// ResNet building blocks, named as torchvision names them.
#include "train/models/resnet.h"

#include <vector>

namespace shardkit {
namespace {

namespace nn = torch::nn;

nn::Conv2d Conv(int in, int out, int k, int stride, int pad) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(pad).bias(false));
}

// torchvision.models.resnet.BasicBlock
struct BasicBlockImpl : nn::Module {
  static constexpr int kExpansion = 1;
  BasicBlockImpl(int in, int planes, int stride) {
    conv1 = register_module("conv1", Conv(in, planes, 3, stride, 1));
    bn1 = register_module("bn1", nn::BatchNorm2d(planes));
    conv2 = register_module("conv2", Conv(planes, planes, 3, 1, 1));
    bn2 = register_module("bn2", nn::BatchNorm2d(planes));
    if (stride != 1 || in != planes) {
      downsample = register_module(
          "downsample", nn::Sequential(Conv(in, planes, 1, stride, 0), nn::BatchNorm2d(planes)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor identity = downsample.is_empty() ? x : downsample->forward(x);
    torch::Tensor out = torch::relu(bn1(conv1(x)));
    out = bn2(conv2(out));
    return torch::relu(out + identity);
  }
  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  nn::Sequential downsample{nullptr};
};
TORCH_MODULE(BasicBlock);

// torchvision.models.resnet.Bottleneck (stride on the 3x3 conv, "ResNet v1.5")
struct BottleneckImpl : nn::Module {
  static constexpr int kExpansion = 4;
  BottleneckImpl(int in, int planes, int stride) {
    conv1 = register_module("conv1", Conv(in, planes, 1, 1, 0));
    bn1 = register_module("bn1", nn::BatchNorm2d(planes));
    conv2 = register_module("conv2", Conv(planes, planes, 3, stride, 1));
    bn2 = register_module("bn2", nn::BatchNorm2d(planes));
    conv3 = register_module("conv3", Conv(planes, planes * kExpansion, 1, 1, 0));
    bn3 = register_module("bn3", nn::BatchNorm2d(planes * kExpansion));
    if (stride != 1 || in != planes * kExpansion) {
      downsample =
          register_module("downsample", nn::Sequential(Conv(in, planes * kExpansion, 1, stride, 0),
                                                       nn::BatchNorm2d(planes * kExpansion)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor identity = downsample.is_empty() ? x : downsample->forward(x);
    torch::Tensor out = torch::relu(bn1(conv1(x)));
    out = torch::relu(bn2(conv2(out)));
    out = bn3(conv3(out));
    return torch::relu(out + identity);
  }
  nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  nn::Sequential downsample{nullptr};
};
TORCH_MODULE(Bottleneck);

void InitLikeTorchvision(nn::Module& m) {
  for (auto& mod : m.modules(/*include_self=*/false)) {
    if (auto* conv = mod->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = mod->as<nn::BatchNorm2d>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
  }
}

// torchvision.models.resnet.ResNet, plus the small-input stem.
template <typename Block>
struct ResNetImpl : nn::Module {
  ResNetImpl(const std::vector<int>& layers, const ModelSpec& spec)
      : small_stem(spec.small_input_stem) {
    conv1 = register_module("conv1", small_stem ? Conv(spec.in_channels, 64, 3, 1, 1)
                                                : Conv(spec.in_channels, 64, 7, 2, 3));
    bn1 = register_module("bn1", nn::BatchNorm2d(64));
    layer1 = register_module("layer1", MakeLayer(64, layers[0], 1));
    layer2 = register_module("layer2", MakeLayer(128, layers[1], 2));
    layer3 = register_module("layer3", MakeLayer(256, layers[2], 2));
    layer4 = register_module("layer4", MakeLayer(512, layers[3], 2));
    fc = register_module("fc", nn::Linear(512 * Block::Impl::kExpansion, spec.num_classes));
    InitLikeTorchvision(*this);
  }
  nn::Sequential MakeLayer(int planes, int blocks, int stride) {
    nn::Sequential seq;
    seq->push_back(Block(inplanes, planes, stride));
    inplanes = planes * Block::Impl::kExpansion;
    for (int i = 1; i < blocks; ++i) seq->push_back(Block(inplanes, planes, 1));
    return seq;
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn1(conv1(x)));
    if (!small_stem) x = torch::max_pool2d(x, 3, 2, 1);
    x = layer4->forward(layer3->forward(layer2->forward(layer1->forward(x))));
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return fc(x);
  }
  bool small_stem;
  int inplanes = 64;
  nn::Conv2d conv1{nullptr};
  nn::BatchNorm2d bn1{nullptr};
  nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  nn::Linear fc{nullptr};
};

// ResNet-20: 3 stages of 3 basic blocks, 16/32/64 channels.
struct ResNet20Impl : nn::Module {
  explicit ResNet20Impl(const ModelSpec& spec) {
    conv1 = register_module("conv1", Conv(spec.in_channels, 16, 3, 1, 1));
    bn1 = register_module("bn1", nn::BatchNorm2d(16));
    int in = 16;
    auto stage = [&](int planes, int stride) {
      nn::Sequential seq;
      for (int i = 0; i < 3; ++i) {
        seq->push_back(BasicBlock(in, planes, i == 0 ? stride : 1));
        in = planes;
      }
      return seq;
    };
    layer1 = register_module("layer1", stage(16, 1));
    layer2 = register_module("layer2", stage(32, 2));
    layer3 = register_module("layer3", stage(64, 2));
    fc = register_module("fc", nn::Linear(64, spec.num_classes));
    InitLikeTorchvision(*this);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn1(conv1(x)));
    x = layer3->forward(layer2->forward(layer1->forward(x)));
    return fc(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  }
  nn::Conv2d conv1{nullptr};
  nn::BatchNorm2d bn1{nullptr};
  nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr};
  nn::Linear fc{nullptr};
};

}  // namespace

torch::nn::AnyModule MakeResNet18(const ModelSpec& spec) {
  return nn::AnyModule(
      std::make_shared<ResNetImpl<BasicBlock>>(std::vector<int>{2, 2, 2, 2}, spec));
}

torch::nn::AnyModule MakeResNet34(const ModelSpec& spec) {
  return nn::AnyModule(
      std::make_shared<ResNetImpl<BasicBlock>>(std::vector<int>{3, 4, 6, 3}, spec));
}

torch::nn::AnyModule MakeResNet50(const ModelSpec& spec) {
  return nn::AnyModule(
      std::make_shared<ResNetImpl<Bottleneck>>(std::vector<int>{3, 4, 6, 3}, spec));
}

torch::nn::AnyModule MakeResNet20(const ModelSpec& spec) {
  return nn::AnyModule(std::make_shared<ResNet20Impl>(spec));
}

}  // namespace shardkit
