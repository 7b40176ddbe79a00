// Distributed set-up for shardkit-train: who this process is (rank, world,
// master) from torchrun's or SLURM's variables, the c10d process group (Gloo
// on CPU, NCCL on CUDA builds), broadcasts, and GradientReducer, which
// averages gradients across ranks in buckets whose all-reduce starts during
// backward, as DistributedDataParallel does.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "train/torch_compat.h"

namespace shardkit {

struct DistEnv {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single process";  // "torchrun variables", "SLURM variables"
};

// RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT if RANK is set; else
// SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID with the first host of
// SLURM_JOB_NODELIST as master (MASTER_ADDR/MASTER_PORT still override);
// else a single process.
Result<DistEnv> DistEnvFromEnvironment();
// The first host of a SLURM node list: "n[01-04,07],gpu5" -> "n01";
// "rack[1-2]-n[01-04]" -> "rack1-n01"; "node1,node2" -> "node1".
std::string FirstHostOfNodeList(const std::string& nodelist);

struct ProcessGroup {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<CollectiveGroup> group;
  std::string backend;  // "gloo" or "nccl"
};

// TCPStore rendezvous at master_addr:master_port (rank 0 serves), then the
// backend. Collectives that wait longer than `timeout` fail with an error.
// The rendezvous itself gives up after `timeout` in every state (no master
// yet, a master that answers but is not a store, missing ranks), and returns
// Aborted as soon as should_stop() says so (a SIGTERM): it runs on a helper
// thread that is abandoned, not joined, when it does not finish in time.
Result<ProcessGroup> CreateProcessGroup(const DistEnv& env, bool cuda,
                                        std::chrono::milliseconds timeout,
                                        const std::function<bool()>& should_stop = nullptr);

// Makes every rank's tensors equal to rank 0's (flattened into one message).
void BroadcastFromRank0(CollectiveGroup& group, const std::vector<torch::Tensor>& tensors);
// Sum of `value` over ranks.
double AllReduceSum(CollectiveGroup& group, double value);

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
