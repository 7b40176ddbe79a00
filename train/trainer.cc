// The training loop of one rank.
#include "train/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <limits>

#include "base/humanize.h"
#include "loader/loader.h"
#include "storage/file_io.h"
#include "storage/output_file.h"
#include "train/checkpoint.h"
#include "train/device_feeder.h"
#include "train/loss_scale.h"
#include "train/lr_schedule.h"
#include "train/models/models.h"
#include "train/sgd.h"

namespace shardkit {
namespace {

std::atomic<int> g_stop_signal{0};

void OnStopSignal(int sig) { g_stop_signal.store(sig); }

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Where the training steps' batches come from. Next() takes the next batch
// and starts moving it to the device; Take() gives that batch's tensors.
class StepSource {
 public:
  virtual ~StepSource() = default;
  virtual Status StartEpoch(uint64_t epoch, uint64_t first_batch) = 0;
  // The input side from the next epoch on (a resolution schedule's).
  virtual Status SetSize(int size) = 0;
  virtual Status Next(std::shared_ptr<const Batch>* batch) = 0;  // null at the epoch's end
  virtual std::pair<torch::Tensor, torch::Tensor> Take() = 0;
  virtual uint64_t batches_per_epoch() const = 0;
  virtual LoaderStats loader_stats() const = 0;  // since the epoch's start
};

// Training needs a label on every sample: the loader refuses labels outside
// the manifest's classes, but -1 (an unlabelled record) is valid data.
Status CheckLabelled(const Batch& b, const std::string& data) {
  for (int i = 0; i < b.size; ++i) {
    if (b.labels[i] < 0) {
      return Status::InvalidArgument(data + ": record " + std::to_string(b.sample_ids[i]) +
                                     " has no label; shardkit-train needs labelled records");
    }
  }
  return Status::OK();
}

// The loader, through a device feeder.
class LoaderSteps : public StepSource {
 public:
  LoaderSteps(Loader& loader, BatchFeeder& feeder, std::string data)
      : loader_(loader), feeder_(feeder), data_(std::move(data)) {}
  Status StartEpoch(uint64_t epoch, uint64_t first_batch) override {
    SK_RETURN_IF_ERROR(loader_.StartEpoch(epoch, first_batch));
    loader_.ResetStats();
    return Status::OK();
  }
  Status SetSize(int size) override { return loader_.SetSize(size); }
  Status Next(std::shared_ptr<const Batch>* batch) override {
    SK_RETURN_IF_ERROR(loader_.Next(batch));
    if (*batch != nullptr) SK_RETURN_IF_ERROR(CheckLabelled(**batch, data_));
    if (*batch != nullptr) feeder_.Stage(*batch);
    return Status::OK();
  }
  std::pair<torch::Tensor, torch::Tensor> Take() override { return feeder_.Take(); }
  uint64_t batches_per_epoch() const override { return loader_.batches_per_epoch(); }
  LoaderStats loader_stats() const override { return loader_.stats(); }

 private:
  Loader& loader_;
  BatchFeeder& feeder_;
  const std::string data_;
};

// --synthetic: one batch of random normalised images and labels, made once
// on the device and given for every step: no loader, no copy, no decode.
class SyntheticSteps : public StepSource {
 public:
  SyntheticSteps(const TrainOptions& o, torch::Device device, int channels, int size)
      : steps_(o.synthetic_steps),
        device_(device),
        format_(o.channels_last ? torch::MemoryFormat::ChannelsLast
                                : torch::MemoryFormat::Contiguous) {
    torch::manual_seed(o.seed + 1);
    y_ = torch::randint(o.synthetic_classes, {o.batch_size},
                        torch::dtype(torch::kInt64).device(device));
    batch_.size = batch_.real_size = o.batch_size;
    batch_.channels = channels;
    (void)SetSize(size);
  }
  Status SetSize(int size) override {
    if (x_.defined() && batch_.height == size) return Status::OK();
    x_ = torch::randn({batch_.size, batch_.channels, size, size}, torch::device(device_))
             .contiguous(format_);
    batch_.height = batch_.width = size;
    return Status::OK();
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
  LoaderStats loader_stats() const override { return LoaderStats(); }

 private:
  uint64_t steps_, next_ = 0;
  torch::Device device_;
  torch::MemoryFormat format_;
  Batch batch_;
  torch::Tensor x_, y_;
};

// The training device: CPU, or this rank's own GPU (made current, so that
// its context, streams and NCCL communicator live there).
Result<torch::Device> ChooseDevice(const TrainOptions& o, const DistEnv& env, DistBackend backend) {
  const bool want_cuda = o.device == TrainDevice::kCuda ||
                         (o.device == TrainDevice::kAuto && torch::cuda::is_available());
  if (!want_cuda) return torch::Device(torch::kCPU);
  if (!torch::cuda::is_available()) {
    return Status::InvalidArgument(
        "--device cuda, but this LibTorch build has no CUDA (or no GPU is visible)");
  }
  SK_ASSIGN_OR_RETURN(
      const int index,
      ChooseCudaDevice(env.local_rank, static_cast<int>(torch::cuda::device_count()), backend,
                       env.cuda_visible_devices.c_str()));
#ifdef SHARDKIT_WITH_CUDA
  SetCudaDevice(index);
#endif
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

// A validation set must describe the same task as the training set: the same
// classes in the same order, and samples of the same shape. Checked before
// any rendezvous or step, with one line that says what differs.
// `cropped`: JPEG records, each loader's own output side (--val-size, a
// resolution schedule); raw ones are the same shape in both or refused.
Status CheckValMatchesTrain(const TrainOptions& o, const Loader& train, const Loader& val,
                            bool cropped) {
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
  if (train.channels() != val.channels() ||
      (!cropped && (train.height() != val.height() || train.width() != val.width()))) {
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
  // Ctrl-C and a closed terminal checkpoint too; a second one of them kills
  // at once (the handler is reset on the first), for a user who will not wait.
  // One that was ignored stays ignored (nohup, a background job).
  sa.sa_flags = SA_RESETHAND;
  for (int sig : {SIGINT, SIGHUP}) {
    struct sigaction old = {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(sig, &sa, nullptr);
  }
}

namespace {

// The training input's side in epoch `epoch` (from 0): the resolution
// schedule's, or --size.
int TrainSizeAt(const TrainOptions& o, int64_t epoch) {
  return o.resolution.active() ? o.resolution.SizeAt(static_cast<int>(
                                     std::min<int64_t>(epoch, std::numeric_limits<int>::max())))
                               : o.size;
}

// Every loader option the trainer sets, in one place: the training set's
// for this rank on `device`, and the validation set's, derived from them.
// JPEG records are cropped (train: RandomResizedCrop + flip; val: Resize +
// CenterCrop); raw records (MNIST, bigMNIST) are trained on as stored, with
// no crop, resize or flip: the loader's rule (TransformApplies) takes only
// transform none for them.
LoaderOptions TrainLoaderOptions(const TrainOptions& o, const DistEnv& env, torch::Device device,
                                 format::RecordKind records) {
  LoaderOptions lo;
  lo.rank = env.rank;
  lo.world_size = env.world_size;
  lo.batch_size = o.batch_size;
  lo.workers = o.workers;
  lo.prefetch = o.prefetch;
  lo.mmap = o.mmap;
  // The node cache is for object storage: a local --data reads through the
  // page cache (a remote --val still uses the cache: ValLoaderOptions).
  if (IsObjectStoreUrl(o.data)) {
    lo.cache_dir = o.cache_dir;
    lo.cache_limit = o.cache_limit;
  }
  lo.seed = o.seed;
  lo.transform.kind = TransformApplies(records, TransformKind::kTrain) ? TransformKind::kTrain
                                                                       : TransformKind::kNone;
  lo.transform.size = TrainSizeAt(o, 0);  // set again at each epoch's start (RunSteps)
  // Channels-last training reads NHWC batches, viewed as channels-last
  // NCHW tensors without a copy (BatchView).
  lo.layout = o.channels_last ? Layout::kNHWC : Layout::kNCHW;
#ifdef SHARDKIT_WITH_CUDA
  if (device.is_cuda()) lo.allocator = PinnedSlotAllocator();  // asynchronous copies
#else
  (void)device;
#endif
  lo.drop_last = true;  // every step a full global batch
  lo.corrupt_policy = o.on_corrupt;
  lo.skip_budget = o.skip_budget;
  return lo;
}

LoaderOptions ValLoaderOptions(const TrainOptions& o, LoaderOptions train) {
  LoaderOptions vo = std::move(train);
  if (vo.transform.kind != TransformKind::kNone) {
    vo.transform.kind = TransformKind::kVal;
    vo.transform.size = o.val_size > 0 ? o.val_size : TrainSizeAt(o, o.epochs - 1);
  }
  vo.drop_last = false;
  vo.shuffle = ShuffleMode::kNone;
  vo.batch_size = std::max(o.batch_size, 64);
  vo.cache_dir = IsObjectStoreUrl(o.val) ? o.cache_dir : "";
  vo.cache_limit = IsObjectStoreUrl(o.val) ? o.cache_limit : 0;
  return vo;
}

// One rank's training, in named steps: SetUp (device, data, model, resume),
// SetUpGroup (process group), then for each epoch Epoch: RunSteps (Step after
// Step), then EndEpoch (Evaluate, Checkpoint, Report), or StopOnSignal.
// Options arrive parsed (enums); what they imply is decided once here
// (precision_, base_lr_), not on every step.
class Trainer {
 public:
  Trainer(const TrainOptions& o, const DistEnv& env, c10::intrusive_ptr<CollectiveGroup> injected,
          const TrainEvents& events)
      : o_(o), env_(env), events_(events), injected_(std::move(injected)), rank0_(env.rank == 0) {}

  Status Run();

 private:
  enum class Precision { kFp32, kFp16, kBf16 };

  void Note(const std::string& msg) const {
    if (rank0_ && events_.note) events_.note(msg);
  }
  void Warn(const std::string& msg) const {
    if (rank0_ && events_.warning) events_.warning(msg);
  }
  torch::nn::Module& net() { return AsModule(model_); }
  CollectiveGroup* group() const { return pg_.group.get(); }
  bool fp16() const { return precision_ == Precision::kFp16; }
  // The learning rate at the schedule's position in steps of this run's
  // global batch: samples stepped through, so that a resume with another
  // world or batch size keeps its place (and the linear-scaling base rate
  // follows the new global batch). `back` steps earlier.
  double LearningRate(int back = 0) const {
    const double g = static_cast<double>(o_.batch_size) * env_.world_size;
    return lr_.At(std::max(0.0, static_cast<double>(pos_.schedule_samples) / g - back));
  }

  // Set-up, in this order.
  Status SetUp();
  Status SetUpDevice();
  Status SetUpData();
  Status OpenLoaders();
  Status SetUpModel();
  Status Resume();
  Status SetUpGroup();
  void NoteStart();

  // An epoch: its steps from pos_, then the end of the epoch.
  Status Epoch(bool* more);
  Status RunSteps(EpochSums* tot, bool* stopped);
  template <typename FetchNext>
  Status Step(const Batch& b, EpochSums* tot, double* stop, torch::Tensor* loss_out,
              FetchNext fetch_next);
  bool UnscaleOrSkip();
  void AddToEpochSums(const Batch& b, const torch::Tensor& loss, const torch::Tensor& logits,
                      const torch::Tensor& y);
  void ReportProgress(const EpochSums& tot, const torch::Tensor& loss);
  Status StopOnSignal();
  Status EndEpoch(EpochSums tot, double seconds, bool* more);
  Status Evaluate(double* top1, double* top5);
  Status Checkpoint(const TrainPosition& at);
  Status Report(const EpochSums& sums, double secs, double top1, double top5);
  Status CheckOutputs() const;

  const TrainOptions& o_;
  const DistEnv& env_;
  const TrainEvents& events_;
  c10::intrusive_ptr<CollectiveGroup> injected_;
  const bool rank0_;
  torch::Device device_{torch::kCPU};
  DistBackend backend_ = DistBackend::kAuto;
  Precision precision_ = Precision::kFp32;
  std::unique_ptr<Loader> train_loader_, val_loader_;
  std::unique_ptr<BatchFeeder> feeder_;
  std::unique_ptr<StepSource> steps_;
  int channels_ = 3, height_ = 0;
  bool cropped_ = false;  // JPEG records, cropped to a side (a schedule's, --size)
  size_t num_classes_ = 0;
  int64_t steps_per_epoch_ = 0;
  double base_lr_ = 0;
  LearningRateSchedule lr_{LrSchedule::kConstant, 0, 0, 0, 0};  // set in SetUpData
  LossScaler scaler_;                                           // fp16
  ModelSpec spec_;
  torch::nn::AnyModule model_;
  std::unique_ptr<Sgd> opt_;
  std::vector<torch::Tensor> buffers_;
  TrainPosition pos_;
  std::string ckpt_;
  ProcessGroup pg_;
  std::unique_ptr<GradientReducer> reducer_;
  std::ofstream metrics_;
  Clock::time_point epoch_start_;
  int64_t first_batch_ = 0;
  torch::Tensor loss_sum_dev_, correct_dev_;  // summed over the epoch's steps, on the device
};

Status Trainer::Run() {
  SK_RETURN_IF_ERROR(SetUp());
  // Shut the backend down however this returns.
  std::shared_ptr<void> shutdown(nullptr, [this](void*) { ShutdownProcessGroup(&pg_); });
  SK_RETURN_IF_ERROR(SetUpGroup());
  for (; pos_.data.epoch < static_cast<uint64_t>(o_.epochs);
       ++pos_.data.epoch, pos_.data.batch = 0, pos_.data.positions.clear()) {
    if (o_.max_steps > 0 && pos_.global_step >= o_.max_steps) break;  // not an empty epoch
    bool more = true;
    SK_RETURN_IF_ERROR(Epoch(&more));
    if (!more) break;  // max_steps reached mid-epoch
  }
  if (rank0_ && !o_.export_path.empty()) SK_RETURN_IF_ERROR(ExportWeights(o_.export_path, net()));
  return Status::OK();
}

Status Trainer::SetUp() {
  SK_RETURN_IF_ERROR(SetUpDevice());
  // Every rank: a flag check each can make (the others wait for rank 0 in
  // the rendezvous otherwise); rank 0: the paths.
  if (o_.resume && o_.checkpoint_dir.empty()) {
    return Status::InvalidArgument("--resume needs --checkpoint-dir (where last.pt is)");
  }
  if (rank0_) SK_RETURN_IF_ERROR(CheckOutputs());
  SK_RETURN_IF_ERROR(SetUpData());
  SK_RETURN_IF_ERROR(SetUpModel());
  SK_RETURN_IF_ERROR(Resume());
  if (rank0_ && !o_.metrics_path.empty()) {
    metrics_.open(o_.metrics_path, std::ios::app);
    if (!metrics_) return Status::IOError(o_.metrics_path + ": cannot open for appending");
  }
  return Status::OK();
}

// Every output, by path, before any work starts: what cannot be written ends
// the run now rather than after training, and no output may overwrite what
// the run reads or its other outputs (a dataset's files, the checkpoints).
// --metrics is opened as a stream: an existing FIFO or device there would
// block or swallow the metrics.
Status Trainer::CheckOutputs() const {
  std::vector<std::string> ckpts;
  if (!o_.checkpoint_dir.empty()) {
    SK_RETURN_IF_ERROR(CheckOutputDir(o_.checkpoint_dir).WithContext("--checkpoint-dir"));
    SK_RETURN_IF_ERROR(CheckOutputOutsideInputs(o_.checkpoint_dir, {o_.data, o_.val})
                           .WithContext("--checkpoint-dir"));
    // Made now (Resume would), so that outputs inside it can be checked.
    SK_RETURN_IF_ERROR(Env::Default()->CreateDirs(o_.checkpoint_dir));
    ckpts = {JoinPath(o_.checkpoint_dir, "last.pt"), JoinPath(o_.checkpoint_dir, "prev.pt")};
    for (const std::string& c : ckpts) {  // a checkpoint that is a link into the data
      SK_RETURN_IF_ERROR(
          CheckOutputOutsideInputs(c, {o_.data, o_.val}).WithContext("--checkpoint-dir"));
    }
  }
  auto check_file = [&](const char* flag, const std::string& path,
                        std::vector<std::string> others) -> Status {
    if (path.empty()) return Status::OK();
    SK_RETURN_IF_ERROR(CheckOutputFile(path).WithContext(flag));
    others.push_back(o_.data);
    others.push_back(o_.val);
    others.insert(others.end(), ckpts.begin(), ckpts.end());
    return CheckOutputOutsideInputs(path, others).WithContext(flag);
  };
  SK_RETURN_IF_ERROR(check_file("--export", o_.export_path, {o_.metrics_path}));
  SK_RETURN_IF_ERROR(check_file("--metrics", o_.metrics_path, {}));
  if (!o_.metrics_path.empty() && Env::Default()->FileExists(o_.metrics_path)) {
    SK_RETURN_IF_ERROR(CheckRegularFile(o_.metrics_path).WithContext("--metrics"));
  }
  return Status::OK();
}

// The device and backend, and the precision they allow.
Status Trainer::SetUpDevice() {
  SK_ASSIGN_OR_RETURN(device_, ChooseDevice(o_, env_, o_.backend));
  const bool cuda = device_.is_cuda();
  if (o_.amp && !cuda) {
    return Status::InvalidArgument(
        "--amp needs a CUDA device (this run is on CPU); rerun without --amp");
  }
  precision_ = !o_.amp                           ? Precision::kFp32
               : o_.amp_dtype == AmpDtype::kFp16 ? Precision::kFp16
                                                 : Precision::kBf16;
  // A backend is needed where this process makes a group (several ranks, none
  // injected), or checked where one was asked for by name: a single process
  // on a build without Gloo (pip's LibTorch may ship no Gloo headers) trains
  // on CPU all the same.
  const bool makes_group = env_.world_size > 1 && !injected_;
  if (makes_group || o_.backend != DistBackend::kAuto) {
    SK_ASSIGN_OR_RETURN(backend_, ResolveBackend(o_.backend, cuda));
  }
  if (o_.threads > 0) torch::set_num_threads(o_.threads);
  return Status::OK();
}

// The loaders (OpenLoaders), or random batches made once on the device; the
// feeder that moves and normalises batches there.
Status Trainer::SetUpData() {
  int channels = 3;
  num_classes_ = static_cast<size_t>(o_.synthetic_classes);
  height_ = TrainSizeAt(o_, o_.epochs - 1);  // the stem follows the last epochs' side
  if (!o_.synthetic) {
    SK_RETURN_IF_ERROR(OpenLoaders());
    channels = train_loader_->channels();
    if (!cropped_) height_ = train_loader_->height();
    num_classes_ = train_loader_->manifest().classes.size();
  }
  channels_ = channels;
  const bool none = o_.normalize == Normalize::kNone;
  const std::vector<float> mean = none            ? std::vector<float>(channels, 0.0f)
                                  : channels == 3 ? std::vector<float>{0.485f, 0.456f, 0.406f}
                                                  : std::vector<float>(channels, 0.5f);
  const std::vector<float> stdv = none            ? std::vector<float>(channels, 1.0f)
                                  : channels == 3 ? std::vector<float>{0.229f, 0.224f, 0.225f}
                                                  : std::vector<float>(channels, 0.25f);
  feeder_ = MakeBatchFeeder(device_, mean, stdv, o_.channels_last);
  if (o_.synthetic) {
    steps_ = std::make_unique<SyntheticSteps>(o_, device_, channels, TrainSizeAt(o_, 0));
  } else {
    steps_ = std::make_unique<LoaderSteps>(*train_loader_, *feeder_, o_.data);
  }
  steps_per_epoch_ = static_cast<int64_t>(steps_->batches_per_epoch());
  const double global_batch = static_cast<double>(o_.batch_size) * env_.world_size;
  base_lr_ = o_.lr * global_batch / 256.0;
  lr_ = LearningRateSchedule(o_.schedule, base_lr_, o_.warmup_epochs, o_.epochs, steps_per_epoch_);
  return Status::OK();
}

// The training loader, and the validation loader checked against it.
Status Trainer::OpenLoaders() {
  if (!o_.cache_dir.empty() && !IsObjectStoreUrl(o_.data) && !IsObjectStoreUrl(o_.val)) {
    return Status::InvalidArgument("--cache-dir " + o_.cache_dir +
                                   ": a node cache is for object storage (s3://, http(s)://), and "
                                   "--data and --val are local");
  }
  SK_ASSIGN_OR_RETURN(const Manifest manifest, ReadManifest(o_.data));
  const LoaderOptions lo = TrainLoaderOptions(o_, env_, device_, manifest.record.kind);
  cropped_ = lo.transform.kind != TransformKind::kNone;
  if (!cropped_ && (o_.resolution.active() || o_.val_size > 0)) {
    return Status::InvalidArgument(
        o_.data + " holds raw records, trained on as stored: " +
        (o_.resolution.active() ? "--resolution-schedule" : "--val-size") +
        " sets the side JPEG records are cropped to");
  }
  SK_ASSIGN_OR_RETURN(train_loader_, Loader::Open(o_.data, lo));
  if (train_loader_->manifest().classes.empty()) {
    return Status::InvalidArgument(
        o_.data + ": the manifest lists no classes; shardkit-train needs labelled records");
  }
  if (o_.val.empty()) return Status::OK();
  SK_ASSIGN_OR_RETURN(val_loader_, Loader::Open(o_.val, ValLoaderOptions(o_, lo)));
  return CheckValMatchesTrain(o_, *train_loader_, *val_loader_, cropped_);
}

// The model, identical on every rank (seeded; rank 0's copy is broadcast
// in SetUpGroup), and its optimizer.
Status Trainer::SetUpModel() {
  torch::manual_seed(static_cast<uint64_t>(o_.seed));
  spec_.arch = o_.arch;
  if (o_.num_classes > 0 && static_cast<size_t>(o_.num_classes) < num_classes_) {
    return Status::InvalidArgument("--num-classes " + std::to_string(o_.num_classes) +
                                   " is fewer than the data's " + std::to_string(num_classes_) +
                                   " classes");
  }
  spec_.num_classes =
      o_.num_classes > 0 ? o_.num_classes : static_cast<int>(std::max<size_t>(num_classes_, 2));
  spec_.in_channels = channels_;
  spec_.small_input_stem = o_.stem == Stem::kSmall || (o_.stem == Stem::kAuto && height_ < 64);
  SK_ASSIGN_OR_RETURN(model_, MakeModel(spec_));
  net().to(device_);
  if (o_.channels_last) {
    torch::NoGradGuard no_grad;
    for (auto& p : net().parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
    }
  }
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& p : net().named_parameters()) named.emplace_back(p.key(), p.value());
  Sgd::Options so;
  so.momentum = o_.momentum;
  so.weight_decay = o_.weight_decay;
  so.nesterov = o_.nesterov;
  opt_ = std::make_unique<Sgd>(named, so);
  for (auto& b : net().buffers()) buffers_.push_back(b);
  return Status::OK();
}

// Where to start: the beginning, or the checkpoint's position. The loader
// continues from the saved data position (Loader::Restore: one policy with
// Python's load_state_dict), on this run's ranks and batch size even where
// they differ from the saved run's (elastic resume: the rest of the epoch,
// each record once); the schedule keeps its place by samples seen.
Status Trainer::Resume() {
  if (train_loader_) {
    pos_.data = train_loader_->state();
  } else {
    pos_.data.seed = o_.seed;
    pos_.data.world_size = static_cast<uint64_t>(env_.world_size);
    pos_.data.batch_size = static_cast<uint64_t>(o_.batch_size);
  }
  pos_.data.epoch = pos_.data.batch = 0;
  pos_.arch = o_.arch;
  pos_.num_classes = spec_.num_classes;
  pos_.in_channels = channels_;
  pos_.loss_scale = fp16() ? LossScaler::kInitialScale : 0;
  ckpt_ = o_.checkpoint_dir.empty() ? "" : JoinPath(o_.checkpoint_dir, "last.pt");
  if (!o_.checkpoint_dir.empty() && rank0_)
    SK_RETURN_IF_ERROR(Env::Default()->CreateDirs(o_.checkpoint_dir));
  if (!o_.resume) return Status::OK();
  if (ckpt_.empty() || !Env::Default()->FileExists(ckpt_)) {
    Warn("resume: no checkpoint in '" + o_.checkpoint_dir + "', starting from scratch");
    return Status::OK();
  }
  TrainPosition saved;
  SK_RETURN_IF_ERROR(LoadCheckpoint(ckpt_, net(), opt_.get(), &saved));
  if (saved.arch != o_.arch)
    return Status::InvalidArgument(ckpt_ + " holds a " + saved.arch + ", not a " + o_.arch);
  if (train_loader_) {
    SK_RETURN_IF_ERROR(train_loader_->Restore(saved.data).WithContext("--resume " + ckpt_));
    pos_.data = train_loader_->state();
  } else {
    pos_.data.epoch = saved.data.epoch;
    pos_.data.batch = saved.data.batch;
  }
  pos_.global_step = saved.global_step;
  pos_.schedule_samples = saved.schedule_samples;
  pos_.loss_scale = saved.loss_scale;
  if (fp16()) {  // a checkpoint of a run without fp16 holds no scale: start afresh
    scaler_ = LossScaler(saved.loss_scale > 0 ? saved.loss_scale : LossScaler::kInitialScale);
    pos_.loss_scale = scaler_.scale();
  }
  std::string how = "at epoch " + std::to_string(saved.data.epoch) + ", batch " +
                    std::to_string(saved.data.batch) + ", step " + std::to_string(pos_.global_step);
  if (!pos_.data.positions.empty()) {
    uint64_t left = 0;
    for (const auto& r : pos_.data.positions) left += r.second - r.first;
    how += " of " + std::to_string(saved.data.world_size) + " rank(s) x batch " +
           std::to_string(saved.data.batch_size) + "; the epoch's " + std::to_string(left) +
           " remaining records continue on " + std::to_string(env_.world_size) +
           " rank(s) x batch " + std::to_string(o_.batch_size) + " (" +
           std::to_string(train_loader_->batches_per_epoch()) + " steps)";
  }
  Note("resumed from " + ckpt_ + " " + how);
  return Status::OK();
}

// Distributed: every collective takes its tensors on pg_.device.
Status Trainer::SetUpGroup() {
  pg_.device = device_;
  if (injected_) {
    pg_.group = injected_;
    pg_.backend = "injected";
  } else if (env_.world_size > 1) {
    SK_ASSIGN_OR_RETURN(pg_, CreateProcessGroup(env_, backend_, device_,
                                                std::chrono::milliseconds(o_.timeout_s * 1000LL),
                                                [] { return g_stop_signal.load() != 0; }));
  }
  if (group() != nullptr) {
    std::vector<torch::Tensor> state = net().parameters();
    state.insert(state.end(), buffers_.begin(), buffers_.end());
    BroadcastFromRank0(*group(), state);
    reducer_ = std::make_unique<GradientReducer>(net().parameters(), pg_.group, env_.world_size,
                                                 static_cast<size_t>(o_.bucket_mb * (1 << 20)));
    Note("DDP over " + pg_.backend + ": " + std::to_string(env_.world_size) + " ranks (" +
         env_.source + "), " + std::to_string(reducer_->num_buckets()) + " gradient bucket(s)");
  }
  NoteStart();
  net().train();
  return Status::OK();
}

void Trainer::NoteStart() {
  Note("training " + o_.arch + " (" + std::to_string(ParameterCount(net())) + " parameters, " +
       std::to_string(spec_.num_classes) + " outputs, " +
       (spec_.small_input_stem ? "small" : "torchvision") + " stem) on " +
       (o_.synthetic
            ? std::string("synthetic data (random batches made once on the device)")
            : o_.data + ": " + std::to_string(train_loader_->dataset_records()) + " records" +
                  (train_loader_->manifest().record.kind == format::RecordKind::kJpeg
                       ? std::string()
                       : std::string(" (raw, as stored: no crop, resize or flip)"))) +
       ", " + std::to_string(steps_per_epoch_) + " steps/epoch, global batch " +
       std::to_string(o_.batch_size * env_.world_size) + ", lr " + std::to_string(base_lr_) +
       ", device " + device_.str());
}

// One epoch from pos_.data.batch: its steps, then (EndEpoch) evaluation,
// checkpoint and report. *more is false when max_steps stopped it mid-epoch;
// Aborted when a signal stopped it (after checkpointing).
Status Trainer::Epoch(bool* more) {
  EpochSums tot;
  bool stopped = false;
  const auto start = Clock::now();
  SK_RETURN_IF_ERROR(RunSteps(&tot, &stopped));
  if (stopped) return StopOnSignal();
  return EndEpoch(tot, Since(start), more);
}

// The epoch's steps from pos_.data.batch. Batch k + 1 is taken from the
// loader and its copy to the device started before step k's first host
// synchronisation, so the copy overlaps the step; loss and accuracy are
// summed on the device and read only for a progress event and at the epoch's end.
Status Trainer::RunSteps(EpochSums* tot, bool* stopped) {
  const auto t_start = Clock::now();
  // A resolution schedule's side for this epoch; an epoch resumed part-way
  // keeps the side it was saved at (Loader::Restore set it back).
  if (o_.resolution.active() && pos_.data.batch == 0) {
    SK_RETURN_IF_ERROR(steps_->SetSize(TrainSizeAt(o_, static_cast<int64_t>(pos_.data.epoch))));
    if (train_loader_) {  // the checkpoint's data position says the side (and its transform)
      const LoaderState now = train_loader_->state();
      pos_.data.size = now.size;
      pos_.data.resize = now.resize;
      pos_.data.transform = now.transform;
    }
  }
  SK_RETURN_IF_ERROR(steps_->StartEpoch(pos_.data.epoch, pos_.data.batch));
  epoch_start_ = Clock::now();
  tot->wait_s += Since(t_start);  // the loader's epoch start is waiting for data too
  first_batch_ = static_cast<int64_t>(pos_.data.batch);
  auto fetch = [&](std::shared_ptr<const Batch>* out) -> Status {
    const auto t_wait = Clock::now();
    SK_RETURN_IF_ERROR(steps_->Next(out));
    tot->wait_s += Since(t_wait);
    return Status::OK();
  };
  loss_sum_dev_ = torch::Tensor();
  correct_dev_ = torch::Tensor();
  std::shared_ptr<const Batch> b, next;
  if (o_.max_steps <= 0 || pos_.global_step < o_.max_steps) SK_RETURN_IF_ERROR(fetch(&b));
  tot->start_s = Since(t_start);
  for (; b != nullptr; b = std::move(next)) {
    const bool last = o_.max_steps > 0 && pos_.global_step + 1 >= o_.max_steps;
    double stop = 0;
    torch::Tensor loss;
    SK_RETURN_IF_ERROR(
        Step(*b, tot, &stop, &loss, [&] { return last ? Status::OK() : fetch(&next); }));
    if (stop > 0.5) {
      *stopped = true;
      break;
    }
    ReportProgress(*tot, loss);
  }
  if (loss_sum_dev_.defined()) {
    tot->loss_sum = loss_sum_dev_.item<double>();
    tot->correct = correct_dev_.item<double>();
  }
  return Status::OK();
}

// One optimizer step on batch b: forward and backward (autocast as
// precision_ says), gradients averaged over ranks, fp16 loss scaling,
// SGD. `fetch_next` runs while the gradients are being reduced.
template <typename FetchNext>
Status Trainer::Step(const Batch& b, EpochSums* tot, double* stop, torch::Tensor* loss_out,
                     FetchNext fetch_next) {
  const auto t_step = Clock::now();
  auto [x, y] = steps_->Take();
  const double lr = LearningRate();
  if (!buffers_.empty() && group() != nullptr)
    BroadcastFromRank0(*group(), buffers_);  // BN statistics follow rank 0
  opt_->ZeroGrad();
  // A stop signal on any rank stops every rank at this step: the flag is
  // summed over ranks together with the gradients.
  *stop = g_stop_signal.load() != 0 ? 1 : 0;
  if (reducer_) reducer_->Prepare(*stop);
  torch::Tensor logits, loss;
  {
    AutocastGuard autocast(precision_ != Precision::kFp32, precision_ == Precision::kBf16);
    logits = model_.forward(x);
    loss = torch::nn::functional::cross_entropy(
        logits.to(torch::kFloat32), y,
        torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(o_.label_smoothing));
  }
  (fp16() ? loss * scaler_.scale() : loss).backward();
  tot->step_s += Since(t_step);
  SK_RETURN_IF_ERROR(fetch_next());
  const auto t_finish = Clock::now();
  if (reducer_) tot->comm_s += reducer_->Finish(stop);
  const bool step_ok = !fp16() || UnscaleOrSkip();
  if (step_ok) opt_->Step(lr);
  ++pos_.global_step;
  pos_.schedule_samples += static_cast<int64_t>(o_.batch_size) * env_.world_size;
  pos_.data.batch = b.index + 1;
  AddToEpochSums(b, loss, logits, y);
  tot->samples += b.size;
  tot->records += b.real_size;
  tot->step_s += Since(t_finish);
  *loss_out = loss;
  return Status::OK();
}

// fp16: unscales the gradients; false (skip the step) if any overflowed
// (LossScaler). Gradients are already averaged, so every rank decides the
// same. The scale is part of the position a checkpoint keeps.
bool Trainer::UnscaleOrSkip() {
  std::vector<torch::Tensor> grads;
  for (auto& p : net().parameters()) {
    if (p.grad().defined()) grads.push_back(p.mutable_grad());
  }
  const bool ok = scaler_.UnscaleOrSkip(std::move(grads));
  pos_.loss_scale = scaler_.scale();
  return ok;
}

// The step's loss (times its samples) and correct predictions, added on the device.
void Trainer::AddToEpochSums(const Batch& b, const torch::Tensor& loss, const torch::Tensor& logits,
                             const torch::Tensor& y) {
  torch::NoGradGuard no_grad;
  torch::Tensor l = loss.detach().to(torch::kFloat64) * b.size;
  torch::Tensor c = logits.detach().argmax(1).eq(y).sum().to(torch::kFloat64);
  loss_sum_dev_ = loss_sum_dev_.defined() ? loss_sum_dev_.add_(l) : l;
  correct_dev_ = correct_dev_.defined() ? correct_dev_.add_(c) : c;
}

// Every print_every batches, where someone listens: the step's loss (a
// device sync) and the pace of this run's part of the epoch.
void Trainer::ReportProgress(const EpochSums& tot, const torch::Tensor& loss) {
  const int64_t batch = static_cast<int64_t>(pos_.data.batch);
  if (!rank0_ || !events_.progress || batch % std::max(1, o_.print_every) != 0) return;
  const double secs = Since(epoch_start_);
  const double done = static_cast<double>(batch - first_batch_);
  StepProgress p;
  p.epoch = pos_.data.epoch + 1;
  p.epochs = o_.epochs;
  p.batch = batch;
  p.batches_per_epoch = static_cast<int64_t>(steps_->batches_per_epoch());
  p.loss = loss.item<double>();
  p.lr = LearningRate(1);
  p.images_per_sec = tot.samples * env_.world_size / std::max(secs, 1e-9);
  p.data_wait_fraction = tot.wait_s / std::max(tot.wait_s + tot.step_s, 1e-9);
  p.eta_seconds = (p.batches_per_epoch - batch) * secs / std::max(done, 1.0);
  events_.progress(p);
}

// A signal stopped every rank at the same step: rank 0 checkpoints there,
// every rank waits for it, and training ends as Aborted.
Status Trainer::StopOnSignal() {
  SK_RETURN_IF_ERROR(Checkpoint(pos_));
  SumOverRanks(group(), pg_.device, {0});  // every rank waits for the checkpoint
  Note("stopped by signal " + std::to_string(g_stop_signal.load()) + " at epoch " +
       std::to_string(pos_.data.epoch) + ", batch " + std::to_string(pos_.data.batch) +
       "; checkpoint written to " + (ckpt_.empty() ? "(none)" : ckpt_));
  return Status::Aborted("stopped by a signal after checkpointing");
}

// The epoch's figures summed over ranks (every rank reaches here with its
// own), evaluation, the checkpoint and the report. *more is false when the
// epoch ended early (max_steps).
Status Trainer::EndEpoch(EpochSums tot, double seconds, bool* more) {
  // Of this epoch's batches: after an elastic resume, those of its rest.
  const bool epoch_done = pos_.data.batch >= steps_->batches_per_epoch();
  double top1 = -1, top5 = -1;
  const LoaderStats ls = steps_->loader_stats();
  tot.corrupt_skipped = static_cast<double>(ls.samples_replaced);
  tot.loader_busy_s = ls.read_s + ls.decompress_s + ls.decode_s + ls.transform_s;
  tot.fills_alone = static_cast<double>(ls.fills_alone);
  tot.fills_shared = static_cast<double>(ls.fills_shared);
  const EpochSums sums = EpochSumsOverRanks(group(), pg_.device, tot);
  if (val_loader_) SK_RETURN_IF_ERROR(Evaluate(&top1, &top5));
  if (epoch_done) {
    TrainPosition next = pos_;  // a finished epoch resumes at the next one's start
    ++next.data.epoch;
    next.data.batch = 0;
    next.data.positions.clear();
    SK_RETURN_IF_ERROR(Checkpoint(next));
  } else {
    SK_RETURN_IF_ERROR(Checkpoint(pos_));
  }
  SK_RETURN_IF_ERROR(Report(sums, seconds, top1, top5));
  *more = epoch_done;
  return Status::OK();
}

// Top-1 and top-5 over the validation set, each rank its share: hits are
// counted on the device, read once, and summed over ranks.
Status Trainer::Evaluate(double* top1, double* top5) {
  torch::NoGradGuard no_grad;
  net().eval();
  SK_RETURN_IF_ERROR(val_loader_->StartEpoch(0));
  torch::Tensor hits;
  double n = 0;
  for (;;) {
    std::shared_ptr<const Batch> b;
    SK_RETURN_IF_ERROR(val_loader_->Next(&b));
    if (b == nullptr) break;
    SK_RETURN_IF_ERROR(CheckLabelled(*b, o_.val));
    const int real = b->real_size;
    feeder_->Stage(b);
    auto [x, y] = feeder_->Take();
    if (real == 0) continue;
    torch::Tensor logits = model_.forward(x).narrow(0, 0, real);
    torch::Tensor labels = y.narrow(0, 0, real);
    const int64_t k = std::min<int64_t>(5, logits.size(1));
    torch::Tensor top = std::get<1>(logits.topk(k, 1));
    torch::Tensor hit = top.eq(labels.unsqueeze(1));
    torch::Tensor both =
        torch::stack({hit.narrow(1, 0, 1).sum(), hit.any(1).sum()}).to(torch::kFloat64);
    hits = hits.defined() ? hits + both : both;
    n += real;
  }
  double c1 = 0, c5 = 0;
  if (hits.defined()) {
    const torch::Tensor h = hits.cpu();
    c1 = h[0].item<double>();
    c5 = h[1].item<double>();
  }
  const std::vector<double> sum = SumOverRanks(group(), pg_.device, {c1, c5, n});
  net().train();
  *top1 = sum[2] > 0 ? sum[0] / sum[2] : 0;
  *top5 = sum[2] > 0 ? sum[1] / sum[2] : 0;
  return Status::OK();
}

// Rank 0 writes the checkpoint (at `at`); the others have nothing to do.
Status Trainer::Checkpoint(const TrainPosition& at) {
  if (!rank0_ || ckpt_.empty()) return Status::OK();
  return SaveCheckpoint(ckpt_, net(), *opt_, at);
}

// The epoch's report, from figures summed over ranks: to --metrics and the
// caller (rank 0).
Status Trainer::Report(const EpochSums& sums, double secs, double top1, double top5) {
  if (!rank0_) return Status::OK();
  EpochReport r;
  r.epoch = pos_.data.epoch + 1;
  // The side this epoch was trained at (0: raw records, as stored).
  r.size = o_.synthetic ? TrainSizeAt(o_, static_cast<int64_t>(pos_.data.epoch))
           : cropped_   ? train_loader_->height()
                        : 0;
  r.seconds = secs;
  r.sums = sums;
  r.top1 = top1;
  r.top5 = top5;
  r.lr = LearningRate(1);
  r.world_size = env_.world_size;
  r.nodes = env_.nodes;
  r.batch_size = o_.batch_size;
  r.workers = o_.workers;
  r.steps = pos_.global_step;
  r.arch = o_.arch;
  r.device = device_.str();
  r.synthetic = o_.synthetic;
  r.amp = o_.amp ? NameOf(kAmpDtypeNames, o_.amp_dtype) : "off";
  r.backend = pg_.backend.empty() ? "none" : pg_.backend;
  if (events_.epoch_end) events_.epoch_end(r);
  if (metrics_.is_open()) {
    metrics_ << EpochReportJson(r) << "\n" << std::flush;
    if (!metrics_) {
      return Status::IOError("--metrics " + o_.metrics_path + ": cannot write epoch " +
                             std::to_string(r.epoch) +
                             "'s line (disk full?); the file may end "
                             "with a partial line");
    }
  }
  return Status::OK();
}

}  // namespace

Status Train(const TrainOptions& o, const DistEnv& env, const TrainEvents& events) {
  return Trainer(o, env, {}, events).Run();
}

Status Train(const TrainOptions& o, const DistEnv& env, c10::intrusive_ptr<CollectiveGroup> group,
             const TrainEvents& events) {
  return Trainer(o, env, std::move(group), events).Run();
}

}  // namespace shardkit
