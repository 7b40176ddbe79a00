// Distributed set-up for shardkit-train: who this process is (DistEnv: rank,
// world, master, as tools/train reads them from torchrun's or SLURM's
// variables), which GPU it trains on, the c10d process group (Gloo on CPU, NCCL on CUDA), the
// collectives the trainer issues (each on the group's device: NCCL takes CUDA tensors only), and
// GradientReducer, which averages gradients across ranks in buckets whose
// all-reduce starts during backward, as DistributedDataParallel does.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "train/torch_compat.h"
#include "train/train_options.h"

namespace shardkit {

// Who this process is among the job's ranks, and what the launcher gave it.
struct DistEnv {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single process";  // "torchrun variables", "SLURM variables"
  int nodes = 1;                          // the job's nodes, as reported in the epochs' metrics
  // The launcher's CUDA_VISIBLE_DEVICES (empty: unset), for ChooseCudaDevice.
  std::string cuda_visible_devices;
};

// The c10d backend: Gloo (CPU tensors; CUDA tensors too, through host
// copies, so ranks may share a GPU) or NCCL (CUDA tensors only, one GPU per
// rank). kAuto is NCCL on CUDA, Gloo on CPU.
// Which backends this build has: Gloo where LibTorch's Gloo headers were
// found (PyTorch's wheels may lack them), NCCL in CUDA builds.
bool BuildHasGloo();
bool BuildHasNccl();
// kAuto resolved for a run on `cuda` or CPU; an error that says why when the
// backend cannot carry that run (NCCL on CPU, a backend this build lacks).
Result<DistBackend> ResolveBackend(DistBackend requested, bool cuda);
const char* BackendName(DistBackend b);

// The GPU this rank trains on, from its local rank (LOCAL_RANK or
// SLURM_LOCALID) among `visible` GPUs. A local rank beyond the visible GPUs
// is refused by name for NCCL (two ranks on one GPU: NCCL refuses them),
// except where the launcher gave each rank its own single GPU
// (CUDA_VISIBLE_DEVICES naming one device, as srun --gpus-per-task does);
// Gloo may share GPUs (local_rank % visible). `cuda_visible_devices` is the
// variable's value or null.
Result<int> ChooseCudaDevice(int local_rank, int visible, DistBackend backend,
                             const char* cuda_visible_devices);

struct ProcessGroup {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<CollectiveGroup> group;
  std::string backend;  // "gloo" or "nccl"
  // Where this group's collectives take their tensors: the rank's GPU for
  // NCCL, the training device for Gloo.
  torch::Device device = torch::kCPU;
};

// TCPStore rendezvous at master_addr:master_port (rank 0 serves), then the
// backend (kGloo or kNccl, resolved). Collectives that wait longer than
// `timeout` fail with an error. The rendezvous itself gives up after
// `timeout` in every state (no master yet, a master that answers but is not
// a store, missing ranks), and returns Aborted as soon as should_stop() says
// so (a SIGTERM): it runs on a helper thread that is abandoned, not joined,
// when it does not finish in time.
Result<ProcessGroup> CreateProcessGroup(const DistEnv& env, DistBackend backend,
                                        torch::Device device, std::chrono::milliseconds timeout,
                                        const std::function<bool()>& should_stop = nullptr);
// Shuts the backend down where LibTorch asks for it (NCCL in PyTorch 2.x
// warns about, and may hang on, a group destroyed without it).
void ShutdownProcessGroup(ProcessGroup* pg);

// Makes every rank's tensors equal to rank 0's (flattened into one message
// on the tensors' device).
void BroadcastFromRank0(CollectiveGroup& group, const std::vector<torch::Tensor>& tensors);
// The element-wise sum over ranks of `values`, in one all-reduce of a
// float64 tensor placed on `device` (the group's device). With no group,
// the values themselves. Every "sum these numbers over ranks" goes here.
std::vector<double> SumOverRanks(CollectiveGroup* group, torch::Device device,
                                 const std::vector<double>& values);

// Averages gradients over ranks. Parameters are grouped into buckets of about
// `bucket_bytes`, in reverse registration order (the order backward produces
// gradients); a hook on each parameter copies its gradient into its bucket,
// and the bucket's all-reduce starts asynchronously as soon as it is full, in
// bucket order on every rank. Finish() waits for all buckets and writes the
// averaged gradients into the parameters' .grad. Not thread-safe; one per model.
class GradientReducer {
 public:
  // The first bucket (the last layers) is capped at first_bucket_bytes, as
  // DDP does, so that communication starts early in backward.
  GradientReducer(std::vector<torch::Tensor> params, c10::intrusive_ptr<CollectiveGroup> group,
                  int world_size, size_t bucket_bytes = 25u << 20,
                  size_t first_bucket_bytes = 1u << 20);
  ~GradientReducer();
  // Call before each backward. `signal` is summed over ranks along with the
  // gradients (it rides in the last bucket: no extra collective per step).
  void Prepare(double signal = 0);
  // Call after backward: waits, averages, writes .grad. Returns the seconds
  // spent waiting (communication not hidden behind backward); *signal_sum, if
  // given, receives the sum of every rank's `signal`.
  double Finish(double* signal_sum = nullptr);
  size_t num_buckets() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace shardkit
