// TrainOptions: everything a training run is told (shardkit-train's flags
// but those of the tool itself, defined with their ranges in
// tools/train/train_cli.h). No LibTorch here, so
// the command-line fuzz target (built without torch) parses exactly the flags
// the tool does.
#pragma once

#include <cstdint>
#include <string>

#include "base/names.h"
#include "loader/options.h"
#include "loader/resolution_schedule.h"
#include "train/models/model_spec.h"

namespace shardkit {

// Each enum with its one name table: the flags' values, the metrics' words.
enum class LrSchedule { kCosine, kStep, kConstant };  // step: x0.1 at 30/60/80% of training
inline constexpr EnumName<LrSchedule> kLrScheduleNames[] = {{LrSchedule::kCosine, "cosine"},
                                                            {LrSchedule::kStep, "step"},
                                                            {LrSchedule::kConstant, "constant"}};
enum class AmpDtype { kFp16, kBf16 };
inline constexpr EnumName<AmpDtype> kAmpDtypeNames[] = {{AmpDtype::kFp16, "fp16"},
                                                        {AmpDtype::kBf16, "bf16"}};
enum class TrainDevice { kAuto, kCpu, kCuda };
inline constexpr EnumName<TrainDevice> kTrainDeviceNames[] = {
    {TrainDevice::kAuto, "auto"}, {TrainDevice::kCpu, "cpu"}, {TrainDevice::kCuda, "cuda"}};
// The collectives' backend (train/dist.h). kAuto is NCCL on CUDA, Gloo on CPU.
enum class DistBackend { kAuto, kGloo, kNccl };
inline constexpr EnumName<DistBackend> kDistBackendNames[] = {
    {DistBackend::kAuto, "auto"}, {DistBackend::kGloo, "gloo"}, {DistBackend::kNccl, "nccl"}};

// The ResNets' first layers: torchvision's 7x7 stride-2 convolution and
// max-pool at every input size, or the small-input stem (3x3 stride 1, no
// max-pool); auto takes the small one under 64 pixels.
enum class Stem { kAuto, kTorchvision, kSmall };
inline constexpr EnumName<Stem> kStemNames[] = {
    {Stem::kAuto, "auto"}, {Stem::kTorchvision, "torchvision"}, {Stem::kSmall, "small"}};
// What the device does to uint8 pixels: ImageNet's mean and std after /255,
// or /255 alone (ToTensor's values, as scripts that normalise nothing see).
enum class Normalize { kImageNet, kNone };
inline constexpr EnumName<Normalize> kNormalizeNames[] = {{Normalize::kImageNet, "imagenet"},
                                                          {Normalize::kNone, "none"}};

struct TrainOptions {
  std::string data, val;
  std::string arch = NameOf(kModelArchNames, ModelArch::kResNet18);  // train/models/model_spec.h
  int epochs = 1;
  int batch_size = 32;  // per rank
  int workers = 2;      // loader threads per rank
  bool mmap = true;     // loader reads shards through read-only mappings
  // Object storage (--data s3://...): a node cache (LoaderOptions::cache_dir).
  std::string cache_dir;
  uint64_t cache_limit = 0;
  int prefetch = 4;
  double lr = 0.1;  // for a global batch of 256; scaled linearly with the global batch
  double momentum = 0.9;
  double weight_decay = 1e-4;
  bool nesterov = false;
  double warmup_epochs = 0;
  LrSchedule schedule = LrSchedule::kCosine;
  double label_smoothing = 0;
  bool amp = false;  // CUDA: autocast + (fp16) dynamic loss scaling
  AmpDtype amp_dtype = AmpDtype::kFp16;
  bool channels_last = true;  // faster on CPU (oneDNN) and with AMP on CUDA
  int size = 224;             // JPEG input side
  // JPEG records: the training side each epoch (FFCV's low-resolution
  // first epochs), instead of `size`; inactive by default.
  ResolutionSchedule resolution;
  int val_size = 0;     // validation CenterCrop side (0: the last training side)
  int num_classes = 0;  // the classifier's outputs; 0: the dataset's classes
  Stem stem = Stem::kAuto;
  Normalize normalize = Normalize::kImageNet;
  std::string checkpoint_dir;
  bool resume = false;
  std::string export_path;
  std::string metrics_path;
  uint64_t seed = 0;
  int64_t max_steps = 0;  // stop after this many optimizer steps in total (0: no limit)
  int threads = 0;        // torch intra-op threads per rank (0: cores / local ranks)
  int timeout_s = 300;    // collectives and rendezvous
  double bucket_mb = 25;
  TrainDevice device = TrainDevice::kAuto;
  DistBackend backend = DistBackend::kAuto;
  // Random batches made once on the device instead of the loader: the
  // ceiling that every figure with real data is compared with.
  bool synthetic = false;
  int synthetic_classes = 1000;
  int64_t synthetic_steps = 100;                    // steps per synthetic epoch
  int print_every = 20;                             // a progress event (TrainEvents) every N steps
  CorruptPolicy on_corrupt = CorruptPolicy::kFail;  // skip: replace, count, within skip_budget
  uint64_t skip_budget = 100;
};

}  // namespace shardkit
