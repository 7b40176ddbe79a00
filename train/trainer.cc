// The training loop of one rank.
#include "train/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/file_io.h"
#include "base/format.h"
#include "loader/loader.h"
#include "train/checkpoint.h"
#include "train/device_feeder.h"
#include "train/loss_scale.h"
#include "train/resnet.h"

namespace shardkit {
namespace {

std::atomic<int> g_stop_signal{0};

void OnStopSignal(int sig) { g_stop_signal.store(sig); }

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double LearningRate(const TrainOptions& o, double base, int64_t step, int64_t steps_per_epoch) {
  const double total = static_cast<double>(o.epochs) * steps_per_epoch;
  const double warm = o.warmup_epochs * steps_per_epoch;
  const double s = static_cast<double>(step);
  if (warm > 0 && s < warm) return base * (s + 1) / warm;
  if (o.schedule == "constant") return base;
  const double progress = total > warm ? (s - warm) / (total - warm) : 1.0;
  if (o.schedule == "step") {
    double lr = base;
    for (double milestone : {0.3, 0.6, 0.8}) {
      if (progress >= milestone) lr *= 0.1;
    }
    return lr;
  }
  return base * 0.5 * (1 + std::cos(M_PI * std::min(1.0, progress)));
}

struct EpochTotals {
  double loss_sum = 0, samples = 0, correct = 0;
  double wait_s = 0, step_s = 0, comm_s = 0;
};

// Top-1 and top-5 over a dataset, each rank its share, summed over ranks.
Status Evaluate(torch::nn::AnyModule& model, Loader& loader, BatchFeeder& feeder,
                CollectiveGroup* group, torch::Device device, uint64_t epoch, double* top1,
                double* top5) {
  torch::NoGradGuard no_grad;
  AsModule(model).eval();
  SK_RETURN_IF_ERROR(loader.StartEpoch(epoch));
  // Hits are counted on the device and read once, at the end.
  torch::Tensor hits;
  double n = 0;
  for (;;) {
    std::shared_ptr<const Batch> b;
    SK_RETURN_IF_ERROR(loader.Next(&b));
    if (b == nullptr) break;
    const int real = b->real_size;
    feeder.Stage(b);
    auto [x, y] = feeder.Take();
    if (real == 0) continue;
    torch::Tensor logits = model.forward(x).narrow(0, 0, real);
    torch::Tensor labels = y.narrow(0, 0, real);
    const int64_t k = std::min<int64_t>(5, logits.size(1));
    torch::Tensor top = std::get<1>(logits.topk(k, 1));
    torch::Tensor hit = top.eq(labels.unsqueeze(1));
    torch::Tensor both =
        torch::stack({hit.narrow(1, 0, 1).sum(), hit.any(1).sum()}).to(torch::kFloat64);
    hits = hits.defined() ? hits + both : both;
    n += real;
  }
  // Summed over ranks on the device, where the hits already are (NCCL
  // takes CUDA tensors only), and read once.
  torch::Tensor counts = torch::zeros({3}, torch::dtype(torch::kFloat64).device(device));
  if (hits.defined()) counts.narrow(0, 0, 2).copy_(hits);
  counts[2] = n;
  counts = SumOverRanks(group, counts).cpu();
  const double c1 = counts[0].item<double>(), c5 = counts[1].item<double>();
  n = counts[2].item<double>();
  AsModule(model).train();
  *top1 = n > 0 ? c1 / n : 0;
  *top5 = n > 0 ? c5 / n : 0;
  return Status::OK();
}

// Where the training steps' batches come from. Next() takes the next batch
// and starts moving it to the device; Take() gives that batch's tensors.
class StepSource {
 public:
  virtual ~StepSource() = default;
  virtual Status StartEpoch(uint64_t epoch, uint64_t first_batch) = 0;
  virtual Status Next(std::shared_ptr<const Batch>* batch) = 0;  // null at the epoch's end
  virtual std::pair<torch::Tensor, torch::Tensor> Take() = 0;
  virtual uint64_t batches_per_epoch() const = 0;
  virtual uint64_t corrupt_skipped() const = 0;
};

// The loader, through a device feeder.
class LoaderSteps : public StepSource {
 public:
  LoaderSteps(Loader& loader, BatchFeeder& feeder) : loader_(loader), feeder_(feeder) {}
  Status StartEpoch(uint64_t epoch, uint64_t first_batch) override {
    SK_RETURN_IF_ERROR(loader_.StartEpoch(epoch, first_batch));
    loader_.ResetStats();
    return Status::OK();
  }
  Status Next(std::shared_ptr<const Batch>* batch) override {
    SK_RETURN_IF_ERROR(loader_.Next(batch));
    if (*batch != nullptr) feeder_.Stage(*batch);
    return Status::OK();
  }
  std::pair<torch::Tensor, torch::Tensor> Take() override { return feeder_.Take(); }
  uint64_t batches_per_epoch() const override { return loader_.batches_per_epoch(); }
  uint64_t corrupt_skipped() const override { return loader_.stats().corrupt_skipped; }

 private:
  Loader& loader_;
  BatchFeeder& feeder_;
};

// --synthetic: one batch of random normalised images and labels, made once
// on the device and given for every step: no loader, no copy, no decode.
class SyntheticSteps : public StepSource {
 public:
  SyntheticSteps(const TrainOptions& o, torch::Device device, int channels)
      : steps_(o.synthetic_steps) {
    torch::manual_seed(o.seed + 1);
    const auto format =
        o.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
    x_ = torch::randn({o.batch_size, channels, o.size, o.size}, torch::device(device))
             .contiguous(format);
    y_ = torch::randint(o.synthetic_classes, {o.batch_size},
                        torch::dtype(torch::kInt64).device(device));
    batch_.size = batch_.real_size = o.batch_size;
    batch_.channels = channels;
    batch_.height = batch_.width = o.size;
  }
  Status StartEpoch(uint64_t epoch, uint64_t first_batch) override {
    batch_.epoch = epoch;
    next_ = first_batch;
    return Status::OK();
  }
  Status Next(std::shared_ptr<const Batch>* batch) override {
    if (next_ >= steps_) {
      batch->reset();
      return Status::OK();
    }
    auto b = std::make_shared<Batch>(batch_);
    b->index = next_++;
    *batch = std::move(b);
    return Status::OK();
  }
  std::pair<torch::Tensor, torch::Tensor> Take() override { return {x_, y_}; }
  uint64_t batches_per_epoch() const override { return steps_; }
  uint64_t corrupt_skipped() const override { return 0; }

 private:
  uint64_t steps_, next_ = 0;
  Batch batch_;
  torch::Tensor x_, y_;
};

// The training device: CPU, or this rank's own GPU (made current, so that
// its context, streams and NCCL communicator live there).
Result<torch::Device> ChooseDevice(const TrainOptions& o, const DistEnv& env, DistBackend backend) {
  const bool want_cuda = o.device == "cuda" || (o.device == "auto" && torch::cuda::is_available());
  if (!want_cuda) return torch::Device(torch::kCPU);
  if (!torch::cuda::is_available()) {
    return Status::InvalidArgument(
        "--device cuda, but this LibTorch build has no CUDA (or no GPU is visible)");
  }
  SK_ASSIGN_OR_RETURN(
      const int index,
      ChooseCudaDevice(env.local_rank, static_cast<int>(torch::cuda::device_count()), backend,
                       std::getenv("CUDA_VISIBLE_DEVICES")));
#ifdef SHARDKIT_WITH_CUDA
  SetCudaDevice(index);
#endif
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

// A validation set must describe the same task as the training set: the same
// classes in the same order, and samples of the same shape. Checked before
// any rendezvous or step, with one line that says what differs.
Status CheckValMatchesTrain(const TrainOptions& o, const Loader& train, const Loader& val) {
  const auto& tc = train.manifest().classes;
  const auto& vc = val.manifest().classes;
  if (vc.empty())
    return Status::InvalidArgument(o.val + ": the manifest lists no classes (--val needs labels)");
  if (tc.size() != vc.size()) {
    return Status::InvalidArgument("--val " + o.val + " has " + std::to_string(vc.size()) +
                                   " classes, --data " + o.data + " has " +
                                   std::to_string(tc.size()));
  }
  for (size_t c = 0; c < tc.size(); ++c) {
    if (tc[c] != vc[c]) {
      return Status::InvalidArgument("--val " + o.val + ": class " + std::to_string(c) + " is '" +
                                     Printable(vc[c]) + "', in --data it is '" + Printable(tc[c]) +
                                     "' (pack val with --classes-from the training set)");
    }
  }
  if (train.channels() != val.channels() || train.height() != val.height() ||
      train.width() != val.width()) {
    auto shape = [](const Loader& l) {
      return std::to_string(l.height()) + "x" + std::to_string(l.width()) + "x" +
             std::to_string(l.channels());
    };
    return Status::InvalidArgument("--val " + o.val + " samples are " + shape(val) +
                                   ", --data samples are " + shape(train));
  }
  return Status::OK();
}

}  // namespace

void InstallStopSignalHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}

namespace {

Status TrainImpl(const TrainOptions& o, const DistEnv& env,
                 c10::intrusive_ptr<CollectiveGroup> injected) {
  const bool rank0 = env.rank == 0;
  auto log = [&](const std::string& msg) {
    if (rank0 && !o.quiet) std::fprintf(stderr, "%s\n", msg.c_str());
  };
  // Device and backend.
  const DistBackend requested = o.backend == "gloo"   ? DistBackend::kGloo
                                : o.backend == "nccl" ? DistBackend::kNccl
                                                      : DistBackend::kAuto;
  SK_ASSIGN_OR_RETURN(const torch::Device device, ChooseDevice(o, env, requested));
  const bool cuda = device.is_cuda();
  if (o.amp && !cuda) {
    return Status::InvalidArgument(
        "--amp needs a CUDA device (this run is on CPU); rerun without --amp");
  }
  SK_ASSIGN_OR_RETURN(const DistBackend backend, ResolveBackend(requested, cuda));
  if (o.threads > 0) torch::set_num_threads(o.threads);

  // Outputs opened as streams: an existing FIFO or device there would block
  // or swallow the metrics. Refused by path before any work starts.
  if (rank0 && !o.metrics_path.empty() && FileExists(o.metrics_path)) {
    SK_RETURN_IF_ERROR(CheckRegularFile(o.metrics_path).WithContext("--metrics"));
  }

  // Data: the loader, or random batches made once on the device.
  std::unique_ptr<Loader> train_loader, val_loader;
  int channels = 3, height = o.size;
  size_t num_classes = static_cast<size_t>(o.synthetic_classes);
  uint64_t records = 0;
  if (!o.synthetic) {
    LoaderOptions lo;
    lo.rank = env.rank;
    lo.world_size = env.world_size;
    lo.batch_size = o.batch_size;
    lo.workers = o.workers;
    lo.prefetch = o.prefetch;
    lo.mmap = o.mmap;
    lo.seed = o.seed;
    lo.transform.kind = TransformKind::kTrain;
    lo.transform.size = o.size;
    // Channels-last training reads NHWC batches, viewed as channels-last NCHW
    // tensors without a copy (BatchView).
    lo.layout = o.channels_last ? Layout::kNHWC : Layout::kNCHW;
#ifdef SHARDKIT_WITH_CUDA
    if (cuda) lo.allocator = PinnedSlotAllocator();  // asynchronous copies from the batches
#endif
    lo.drop_last = true;  // every step a full global batch
    lo.corrupt_policy = o.on_corrupt == "skip" ? CorruptPolicy::kSkip : CorruptPolicy::kFail;
    lo.skip_budget = o.skip_budget;
    SK_ASSIGN_OR_RETURN(train_loader, Loader::Open(o.data, lo));
    if (train_loader->manifest().classes.empty()) {
      return Status::InvalidArgument(
          o.data + ": the manifest lists no classes; shardkit-train needs labelled records");
    }
    if (!o.val.empty()) {
      LoaderOptions vo = lo;
      vo.transform.kind = TransformKind::kVal;
      vo.drop_last = false;
      vo.shuffle = ShuffleMode::kNone;
      vo.batch_size = std::max(o.batch_size, 64);
      SK_ASSIGN_OR_RETURN(val_loader, Loader::Open(o.val, vo));
      SK_RETURN_IF_ERROR(CheckValMatchesTrain(o, *train_loader, *val_loader));
    }
    channels = train_loader->channels();
    height = train_loader->height();
    num_classes = train_loader->manifest().classes.size();
    records = train_loader->dataset_records();
  }

  // Model, identical on every rank: seeded, then rank 0's copy broadcast.
  torch::manual_seed(static_cast<uint64_t>(o.seed));
  ModelSpec spec;
  spec.arch = o.arch;
  spec.num_classes = static_cast<int>(std::max<size_t>(num_classes, 2));
  spec.in_channels = channels;
  spec.small_input_stem = height < 64;
  torch::nn::AnyModule model;
  try {
    model = MakeModel(spec);
  } catch (const std::invalid_argument& e) {
    return Status::InvalidArgument(e.what());
  }
  torch::nn::Module& net = AsModule(model);
  net.to(device);
  if (o.channels_last) {
    torch::NoGradGuard no_grad;
    for (auto& p : net.parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
    }
  }
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& p : net.named_parameters()) named.emplace_back(p.key(), p.value());
  Sgd::Options so;
  so.momentum = o.momentum;
  so.weight_decay = o.weight_decay;
  so.nesterov = o.nesterov;
  Sgd opt(named, so);

  // Where to start.
  TrainPosition pos;
  pos.seed = static_cast<int64_t>(o.seed);
  pos.world_size = env.world_size;
  pos.batch_size = o.batch_size;
  pos.arch = o.arch;
  pos.num_classes = spec.num_classes;
  pos.in_channels = channels;
  pos.loss_scale = o.amp && o.amp_dtype == "fp16" ? 65536.0 : 0;
  const std::string ckpt = o.checkpoint_dir.empty() ? "" : JoinPath(o.checkpoint_dir, "last.pt");
  if (!o.checkpoint_dir.empty() && rank0) SK_RETURN_IF_ERROR(CreateDirs(o.checkpoint_dir));
  if (o.resume && !ckpt.empty() && FileExists(ckpt)) {
    TrainPosition saved;
    SK_RETURN_IF_ERROR(LoadCheckpoint(ckpt, net, &opt, &saved));
    if (saved.arch != o.arch)
      return Status::InvalidArgument(ckpt + " holds a " + saved.arch + ", not a " + o.arch);
    pos.epoch = saved.epoch;
    pos.global_step = saved.global_step;
    pos.loss_scale = saved.loss_scale;
    if (saved.world_size == env.world_size && saved.batch_size == o.batch_size &&
        saved.seed == pos.seed) {
      pos.batch_index = saved.batch_index;
    } else {
      log("resume: world size, batch size or seed changed; restarting epoch " +
          std::to_string(saved.epoch) + " from its first batch");
    }
    log("resumed from " + ckpt + " at epoch " + std::to_string(pos.epoch) + ", batch " +
        std::to_string(pos.batch_index) + ", step " + std::to_string(pos.global_step));
  } else if (o.resume) {
    log("resume: no checkpoint in '" + o.checkpoint_dir + "', starting from scratch");
  }

  // Distributed: every collective below takes its tensors on pg.device.
  ProcessGroup pg;
  pg.device = device;
  if (injected) {
    pg.group = injected;
    pg.backend = "injected";
  } else if (env.world_size > 1) {
    SK_ASSIGN_OR_RETURN(pg, CreateProcessGroup(env, backend, device,
                                               std::chrono::milliseconds(o.timeout_s * 1000LL),
                                               [] { return g_stop_signal.load() != 0; }));
  }
  // Shut the backend down however this function returns.
  std::shared_ptr<void> shutdown(nullptr, [&pg](void*) { ShutdownProcessGroup(&pg); });
  CollectiveGroup* group = pg.group.get();
  std::unique_ptr<GradientReducer> reducer;
  std::vector<torch::Tensor> buffers;
  for (auto& b : net.buffers()) buffers.push_back(b);
  if (group != nullptr) {
    std::vector<torch::Tensor> state = net.parameters();
    state.insert(state.end(), buffers.begin(), buffers.end());
    BroadcastFromRank0(*group, state);
    reducer = std::make_unique<GradientReducer>(net.parameters(), pg.group, env.world_size,
                                                static_cast<size_t>(o.bucket_mb * (1 << 20)));
    log("DDP over " + pg.backend + ": " + std::to_string(env.world_size) + " ranks (" + env.source +
        "), " + std::to_string(reducer->num_buckets()) + " gradient bucket(s)");
  }

  const std::vector<float> mean = channels == 3 ? std::vector<float>{0.485f, 0.456f, 0.406f}
                                                : std::vector<float>(channels, 0.5f);
  const std::vector<float> stdv = channels == 3 ? std::vector<float>{0.229f, 0.224f, 0.225f}
                                                : std::vector<float>(channels, 0.25f);
  std::unique_ptr<BatchFeeder> feeder = MakeBatchFeeder(device, mean, stdv, o.channels_last);
  std::unique_ptr<StepSource> steps;
  if (o.synthetic) {
    steps = std::make_unique<SyntheticSteps>(o, device, channels);
  } else {
    steps = std::make_unique<LoaderSteps>(*train_loader, *feeder);
  }

  const int64_t steps_per_epoch = static_cast<int64_t>(steps->batches_per_epoch());
  const double global_batch = static_cast<double>(o.batch_size) * env.world_size;
  const double base_lr = o.lr * global_batch / 256.0;
  log("training " + o.arch + " (" + std::to_string(ParameterCount(net)) + " parameters) on " +
      (o.synthetic ? std::string("synthetic data (random batches made once on the device)")
                   : o.data + ": " + std::to_string(records) + " records") +
      ", " + std::to_string(steps_per_epoch) + " steps/epoch, global batch " +
      std::to_string(static_cast<int64_t>(global_batch)) + ", lr " + std::to_string(base_lr) +
      ", device " + device.str());

  auto save = [&]() -> Status {
    if (!rank0 || ckpt.empty()) return Status::OK();
    return SaveCheckpoint(ckpt, net, opt, pos);
  };
  std::ofstream metrics;
  if (rank0 && !o.metrics_path.empty()) {
    metrics.open(o.metrics_path, std::ios::app);
    if (!metrics) return Status::IOError(o.metrics_path + ": cannot open for appending");
  }
  const bool fp16 = o.amp && o.amp_dtype == "fp16";
  const bool tty = isatty(2) != 0;
  int64_t good_steps = 0;
  net.train();

  for (; pos.epoch < o.epochs; ++pos.epoch, pos.batch_index = 0) {
    if (o.max_steps > 0 && pos.global_step >= o.max_steps) break;  // not an empty epoch
    SK_RETURN_IF_ERROR(steps->StartEpoch(static_cast<uint64_t>(pos.epoch),
                                         static_cast<uint64_t>(pos.batch_index)));
    EpochTotals tot;
    const auto epoch_start = Clock::now();
    const int64_t first_batch = pos.batch_index;
    bool stopped = false;
    // Batch k + 1 is taken from the loader and its copy to the device
    // started before step k's first host synchronisation, so the copy
    // overlaps the step; loss and accuracy are summed on the device and
    // read only when printed and at the epoch's end.
    std::shared_ptr<const Batch> b, next;
    auto fetch = [&](std::shared_ptr<const Batch>* out) -> Status {
      const auto t_wait = Clock::now();
      SK_RETURN_IF_ERROR(steps->Next(out));
      tot.wait_s += Since(t_wait);
      return Status::OK();
    };
    torch::Tensor loss_sum_dev, correct_dev;  // summed over the epoch's steps, on the device
    if (o.max_steps <= 0 || pos.global_step < o.max_steps) SK_RETURN_IF_ERROR(fetch(&b));
    for (; b != nullptr; b = std::move(next)) {
      const auto t_step = Clock::now();
      auto [x, y] = steps->Take();
      const double lr = LearningRate(o, base_lr, pos.global_step, steps_per_epoch);
      if (buffers.size() > 0 && group != nullptr)
        BroadcastFromRank0(*group, buffers);  // BN statistics follow rank 0
      opt.ZeroGrad();
      // A stop signal on any rank stops every rank at this step: the flag is
      // summed over ranks together with the gradients.
      double stop = g_stop_signal.load() != 0 ? 1 : 0;
      if (reducer) reducer->Prepare(stop);
      torch::Tensor logits, loss;
      {
        AutocastGuard autocast(o.amp && cuda, o.amp_dtype == "bf16");
        logits = model.forward(x);
        loss = torch::nn::functional::cross_entropy(
            logits.to(torch::kFloat32), y,
            torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(o.label_smoothing));
      }
      (fp16 ? loss * pos.loss_scale : loss).backward();
      tot.step_s += Since(t_step);
      if (o.max_steps <= 0 || pos.global_step + 1 < o.max_steps) SK_RETURN_IF_ERROR(fetch(&next));
      const auto t_finish = Clock::now();
      if (reducer) tot.comm_s += reducer->Finish(&stop);
      bool step_ok = true;
      if (fp16) {
        // Unscale; skip the step and halve the scale if any gradient overflowed
        // (gradients are already averaged, so every rank decides the same).
        std::vector<torch::Tensor> grads;
        for (auto& p : net.parameters()) {
          if (p.grad().defined()) grads.push_back(p.mutable_grad());
        }
        if (UnscaleGradients(std::move(grads), pos.loss_scale).item<float>() != 0) {
          pos.loss_scale /= 2;
          good_steps = 0;
          step_ok = false;
        } else if (++good_steps % 2000 == 0) {
          pos.loss_scale *= 2;
        }
      }
      if (step_ok) opt.Step(lr);
      ++pos.global_step;
      pos.batch_index = static_cast<int64_t>(b->index) + 1;
      {
        torch::NoGradGuard no_grad;
        torch::Tensor l = loss.detach().to(torch::kFloat64) * b->size;
        torch::Tensor c = logits.detach().argmax(1).eq(y).sum().to(torch::kFloat64);
        loss_sum_dev = loss_sum_dev.defined() ? loss_sum_dev.add_(l) : l;
        correct_dev = correct_dev.defined() ? correct_dev.add_(c) : c;
      }
      tot.samples += b->size;
      tot.step_s += Since(t_finish);
      if (stop > 0.5) {
        stopped = true;
        break;
      }
      if (rank0 && !o.quiet && (pos.batch_index % std::max(1, o.print_every) == 0)) {
        const double secs = Since(epoch_start);
        const double done = static_cast<double>(pos.batch_index - first_batch);
        std::fprintf(
            stderr,
            tty ? "\repoch %lld/%d  step %lld/%lld  loss %.4f  lr %.4f  %.0f img/s  data-wait "
                  "%.0f%%  ETA %s   "
                : "epoch %lld/%d  step %lld/%lld  loss %.4f  lr %.4f  %.0f img/s  data-wait %.0f%% "
                  " ETA %s\n",
            (long long)pos.epoch + 1, o.epochs, (long long)pos.batch_index,
            (long long)steps_per_epoch, loss.item<double>(), lr,
            tot.samples * env.world_size / std::max(secs, 1e-9),
            100 * tot.wait_s / std::max(tot.wait_s + tot.step_s, 1e-9),
            FormatDuration((steps_per_epoch - pos.batch_index) * secs / std::max(done, 1.0))
                .c_str());
        std::fflush(stderr);
      }
    }
    if (rank0 && !o.quiet && tty) std::fprintf(stderr, "\n");
    if (stopped) {
      SK_RETURN_IF_ERROR(save());
      SumOverRanks(group, pg.device, {0});  // every rank waits for the checkpoint
      log("stopped by signal " + std::to_string(g_stop_signal.load()) + " at epoch " +
          std::to_string(pos.epoch) + ", batch " + std::to_string(pos.batch_index) +
          "; checkpoint written to " + (ckpt.empty() ? "(none)" : ckpt));
      return Status::Aborted("stopped by a signal after checkpointing");
    }
    if (loss_sum_dev.defined()) {
      tot.loss_sum = loss_sum_dev.item<double>();
      tot.correct = correct_dev.item<double>();
    }
    const double secs = Since(epoch_start);
    const bool epoch_done = pos.batch_index >= steps_per_epoch;
    // The epoch's figures, summed over ranks in one all-reduce.
    const std::vector<double> sum =
        SumOverRanks(group, pg.device,
                     {tot.loss_sum, tot.samples, tot.correct, tot.wait_s, tot.comm_s, tot.step_s,
                      static_cast<double>(steps->corrupt_skipped())});
    const double loss_sum = sum[0], samples = sum[1], correct = sum[2], wait = sum[3],
                 comm = sum[4], step = sum[5], skipped = sum[6];
    double top1 = -1, top5 = -1;
    if (val_loader)
      SK_RETURN_IF_ERROR(Evaluate(model, *val_loader, *feeder, group, pg.device, 0, &top1, &top5));
    if (epoch_done) {
      pos.batch_index = steps_per_epoch;
      TrainPosition next = pos;
      next.epoch = pos.epoch + 1;
      next.batch_index = 0;
      if (rank0 && !ckpt.empty()) SK_RETURN_IF_ERROR(SaveCheckpoint(ckpt, net, opt, next));
    } else if (!ckpt.empty()) {
      SK_RETURN_IF_ERROR(save());
    }
    nlohmann::json j;
    j["epoch"] = pos.epoch + 1;
    j["seconds"] = secs;
    j["images_per_sec"] = samples / std::max(secs, 1e-9);
    j["loss"] = samples > 0 ? loss_sum / samples : 0;
    j["train_top1"] = samples > 0 ? correct / samples : 0;
    if (top1 >= 0) {
      j["top1"] = top1;
      j["top5"] = top5;
    }
    j["data_wait_fraction"] = wait / std::max(wait + step, 1e-9);
    j["comm_exposed_seconds"] = comm / env.world_size;
    j["comm_exposed_fraction"] = comm / std::max(wait + step, 1e-9);
    j["lr"] = LearningRate(o, base_lr, std::max<int64_t>(0, pos.global_step - 1), steps_per_epoch);
    j["world_size"] = env.world_size;
    j["nodes"] =
        std::getenv("SLURM_JOB_NUM_NODES") ? std::atoi(std::getenv("SLURM_JOB_NUM_NODES")) : 1;
    j["batch_size"] = o.batch_size;
    j["workers"] = o.workers;
    j["steps"] = pos.global_step;
    j["arch"] = o.arch;
    j["device"] = device.str();
    j["synthetic"] = o.synthetic;
    j["amp"] = o.amp ? o.amp_dtype : "off";
    j["backend"] = pg.backend.empty() ? "none" : pg.backend;
    j["corrupt_skipped"] = static_cast<uint64_t>(skipped);
    if (rank0) {
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
      if (metrics.is_open()) metrics << j.dump() << "\n" << std::flush;
    }
    if (!epoch_done) break;  // max_steps reached mid-epoch
  }
  if (rank0 && !o.export_path.empty()) SK_RETURN_IF_ERROR(ExportWeights(o.export_path, net));
  return Status::OK();
}

}  // namespace

Status Train(const TrainOptions& o, const DistEnv& env) { return TrainImpl(o, env, {}); }

Status Train(const TrainOptions& o, const DistEnv& env, c10::intrusive_ptr<CollectiveGroup> group) {
  return TrainImpl(o, env, std::move(group));
}

}  // namespace shardkit
