// Rendezvous, process groups, broadcasts and the bucketed gradient reducer.
#include "train/dist.h"

#include <netdb.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
// Each backend's header needs the backend's own headers and LibTorch built
// with it (USE_C10D_*, from Torch's CMake targets). PyTorch's wheels may ship
// no Gloo headers: a CUDA build without them has NCCL only, and says so
// (--backend gloo is then refused). nccl.h comes from CUDA or from the
// nvidia-nccl wheel (CMake's SHARDKIT_NCCL_INCLUDE_DIR).
#if defined(USE_C10D_GLOO) && __has_include(<gloo/algorithm.h>)
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#define SHARDKIT_HAS_GLOO 1
#endif
#if defined(SHARDKIT_WITH_CUDA) && defined(USE_C10D_NCCL) && __has_include(<nccl.h>)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define SHARDKIT_HAS_NCCL 1
#endif

namespace shardkit {
namespace {

Result<ProcessGroup> Rendezvous(const DistEnv& env, DistBackend backend, torch::Device device,
                                std::chrono::milliseconds timeout) {
  ProcessGroup pg;
  pg.device = device;
  pg.backend = BackendName(backend);
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    so.isServer = env.rank == 0;
    so.numWorkers = env.world_size;
    so.waitWorkers = true;
    so.timeout = timeout;
    pg.store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    if (backend == DistBackend::kNccl) {
#ifdef SHARDKIT_HAS_NCCL
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      pg.group =
          c10::make_intrusive<c10d::ProcessGroupNCCL>(pg.store, env.rank, env.world_size, opts);
      return pg;
#endif
    } else {
#ifdef SHARDKIT_HAS_GLOO
      auto opts = c10d::ProcessGroupGloo::Options::create();
      opts->timeout = timeout;
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      pg.group =
          c10::make_intrusive<c10d::ProcessGroupGloo>(pg.store, env.rank, env.world_size, opts);
      return pg;
#endif
    }
    return Status::InvalidArgument(std::string("this build has no ") + BackendName(backend));
  } catch (const std::exception& e) {
    return Status::IOError("rendezvous with " + env.master_addr + ":" +
                           std::to_string(env.master_port) + " as rank " +
                           std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
                           " failed: " + e.what());
  }
}

// The store key a rank stopped during the rendezvous sets ("rank N").
constexpr char kStopKey[] = "shardkit/stopped-during-rendezvous";
constexpr char kStopAckKey[] = "shardkit/stopped-during-rendezvous/read-by";

// A client connection of its own to rank 0's store (never counted as a
// worker: the rendezvous' own connection is).
c10::intrusive_ptr<c10d::TCPStore> StoreClient(const DistEnv& env,
                                               std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(env.master_port);
  so.isServer = false;
  so.waitWorkers = false;
  so.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
}

// Best effort, within two seconds: the store may not be up (rank 0 not
// started) or may be this rank's own (rank 0), about to go with it.
// Rank 0's store goes when rank 0 does: stopping, it waits (at most three
// seconds) until each other rank has read the word and counted itself in
// kStopAckKey, so that they end naming it rather than on a reset connection.
void TellPeersThisRankStopped(const DistEnv& env) {
  try {
    auto store = StoreClient(env, std::chrono::seconds(2));
    const std::string who = "rank " + std::to_string(env.rank);
    store->set(kStopKey, std::vector<uint8_t>(who.begin(), who.end()));
    if (env.rank != 0) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (store->add(kStopAckKey, 0) < env.world_size - 1 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } catch (const std::exception&) {
  }
}

}  // namespace

bool BuildHasGloo() {
#ifdef SHARDKIT_HAS_GLOO
  return true;
#else
  return false;
#endif
}

bool BuildHasNccl() {
#ifdef SHARDKIT_HAS_NCCL
  return true;
#else
  return false;
#endif
}

const char* BackendName(DistBackend b) { return NameOf(kDistBackendNames, b); }

Result<DistBackend> ResolveBackend(DistBackend requested, bool cuda) {
  DistBackend b = requested;
  if (b == DistBackend::kAuto) b = cuda ? DistBackend::kNccl : DistBackend::kGloo;
  if (b == DistBackend::kNccl && !cuda) {
    return Status::InvalidArgument(
        "--backend nccl needs CUDA (this run is on CPU): use --backend gloo");
  }
  if (b == DistBackend::kNccl && !BuildHasNccl()) {
    return Status::InvalidArgument(
        "--backend nccl: this build has no NCCL (built against a LibTorch without CUDA)");
  }
  if (b == DistBackend::kGloo && !BuildHasGloo()) {
    return Status::InvalidArgument(
        std::string("--backend gloo: this build has no Gloo (its LibTorch ships no Gloo "
                    "headers)") +
        (cuda ? "; use --backend nccl" : ""));
  }
  return b;
}

Result<int> ChooseCudaDevice(int local_rank, int visible, DistBackend backend,
                             const char* cuda_visible_devices) {
  if (visible < 1) return Status::InvalidArgument("no CUDA device is visible");
  if (local_rank < visible) return local_rank;
  const std::string cvd = cuda_visible_devices != nullptr ? cuda_visible_devices : "";
  if (visible == 1 && !cvd.empty() && cvd.find(',') == std::string::npos) {
    return 0;  // the launcher bound this rank to its own GPU
  }
  if (backend == DistBackend::kGloo) return local_rank % visible;
  return Status::InvalidArgument(
      "local rank " + std::to_string(local_rank) +
      " has no GPU of its own: " + std::to_string(visible) +
      " visible (CUDA_VISIBLE_DEVICES=" + (cvd.empty() ? std::string("unset") : cvd) +
      "); NCCL needs one GPU per rank: start at most " + std::to_string(visible) +
      " ranks per node, or pass --backend gloo to share GPUs");
}

void ShutdownProcessGroup(ProcessGroup* pg) {
  if (!pg->group) return;
#if defined(SHARDKIT_HAS_NCCL) && \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3))
  if (pg->backend == "nccl") {
    try {
      static_cast<c10d::ProcessGroupNCCL&>(*pg->group).shutdown();
    } catch (const std::exception&) {
      // Shutting down a group whose peers are gone: nothing left to release.
    }
  }
#endif
  pg->group.reset();
  pg->store.reset();
}

Result<ProcessGroup> CreateProcessGroup(const DistEnv& env, DistBackend backend,
                                        torch::Device device, std::chrono::milliseconds timeout,
                                        const std::function<bool()>& should_stop) {
  // c10d's TCPStore client blocks without a deadline on a peer that accepts
  // the connection but never answers; so the rendezvous runs on its own
  // thread, and this one keeps the deadline and watches for a stop signal.
  // A host that does not resolve fails at once, not after the timeout.
  if (env.world_size > 1 && env.rank != 0) {
    addrinfo hints = {}, *found = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    const int rc = ::getaddrinfo(env.master_addr.c_str(), nullptr, &hints, &found);
    if (found != nullptr) ::freeaddrinfo(found);
    if (rc != 0) {
      return Status::InvalidArgument("cannot resolve the rendezvous host '" + env.master_addr +
                                     "' (from " + env.source + "): " + ::gai_strerror(rc) +
                                     "; export MASTER_ADDR as rank 0's address");
    }
  }
  struct Pending {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Result<ProcessGroup>> result;
    std::optional<std::string> peer_stopped;  // a sibling's word (kStopKey)
    bool done = false;                        // this rank's wait is over
  };
  auto pending = std::make_shared<Pending>();
  std::thread([pending, env, backend, device, timeout] {
    Result<ProcessGroup> r = Rendezvous(env, backend, device, timeout);
    std::lock_guard<std::mutex> lock(pending->mu);
    pending->result.emplace(std::move(r));
    pending->cv.notify_all();
  }).detach();
  // A rank stopped by a signal while the others wait for it says so in the
  // store (kStopKey), so that they stop too rather than wait out --timeout;
  // each rank watches for that word on a connection of its own.
  if (env.world_size > 1) {
    std::thread([pending, env, timeout] {
      try {
        auto store = StoreClient(env, timeout);
        std::unique_lock<std::mutex> lock(pending->mu);
        while (!pending->done) {
          lock.unlock();
          const bool said = store->check({kStopKey});
          std::string who;
          if (said) {
            const std::vector<uint8_t> v = store->get(kStopKey);
            who.assign(v.begin(), v.end());
            if (env.rank != 0) store->add(kStopAckKey, 1);  // rank 0 waits for the others
          }
          lock.lock();
          if (said) {
            pending->peer_stopped = who;
            pending->cv.notify_all();
            return;
          }
          pending->cv.wait_for(lock, std::chrono::milliseconds(100));
        }
      } catch (const std::exception&) {
        // No store to watch (rank 0 gone, or never there): the rendezvous
        // itself fails or times out.
      }
    }).detach();
  }
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  const auto deadline = std::chrono::steady_clock::now() + timeout + std::chrono::seconds(2);
  std::unique_lock<std::mutex> lock(pending->mu);
  std::shared_ptr<void> finished(nullptr, [&pending](void*) {
    pending->done = true;  // under `lock` wherever this returns
    pending->cv.notify_all();
  });
  while (!pending->result.has_value()) {
    pending->cv.wait_for(lock, std::chrono::milliseconds(50));
    if (pending->result.has_value()) break;
    if (pending->peer_stopped.has_value()) {
      return Status::Aborted(*pending->peer_stopped +
                             " was stopped by a signal during the "
                             "rendezvous with " +
                             where + "; rank " + std::to_string(env.rank) +
                             " stops too, before any step");
    }
    if (should_stop && should_stop()) {
      if (env.world_size > 1) {
        lock.unlock();
        TellPeersThisRankStopped(env);
        lock.lock();
      }
      return Status::Aborted("stopped by a signal during the rendezvous with " + where +
                             ", before any step");
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::IOError(
          "rendezvous with " + where + " as rank " + std::to_string(env.rank) + " of " +
          std::to_string(env.world_size) + " timed out after " +
          std::to_string(timeout.count() / 1000) +
          " s (is MASTER_ADDR:MASTER_PORT rank 0's store, and are all ranks started?)");
    }
  }
  return std::move(*pending->result);
}

void BroadcastFromRank0(CollectiveGroup& group, const std::vector<torch::Tensor>& tensors) {
  if (tensors.empty()) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat_parts;
  for (const auto& t : tensors) flat_parts.push_back(t.detach().reshape(-1).to(torch::kFloat64));
  std::vector<torch::Tensor> flat = {torch::cat(flat_parts)};
  group.broadcast(flat)->wait();
  int64_t offset = 0;
  for (const auto& t : tensors) {
    const int64_t n = t.numel();
    t.detach().copy_(flat[0].narrow(0, offset, n).view(t.sizes()).to(t.dtype()));
    offset += n;
  }
}

std::vector<double> SumOverRanks(CollectiveGroup* group, torch::Device device,
                                 const std::vector<double>& values) {
  if (group == nullptr || values.empty()) return values;
  std::vector<torch::Tensor> t = {
      torch::tensor(values, torch::dtype(torch::kFloat64)).to(device).contiguous()};
  group->allreduce(t)->wait();
  const torch::Tensor sum = t[0].cpu();
  return std::vector<double>(sum.data_ptr<double>(), sum.data_ptr<double>() + sum.numel());
}

struct GradientReducer::State {
  struct Bucket {
    std::vector<size_t> params;  // indexes into State::params
    std::vector<int64_t> offsets;
    torch::Tensor flat;
    int pending = 0;
    bool launched = false;
    c10::intrusive_ptr<CollectiveWork> work;
  };
  std::vector<torch::Tensor> params;
  std::vector<size_t> bucket_of, slot_of;
  std::vector<Bucket> buckets;
  size_t next_launch = 0;
  c10::intrusive_ptr<CollectiveGroup> group;
  int world = 1;
  bool active = false;

  void LaunchReady() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      Bucket& b = buckets[next_launch++];
      std::vector<torch::Tensor> t = {b.flat};
      b.work = group->allreduce(t);
      b.launched = true;
    }
  }

  void OnGrad(size_t i, const torch::Tensor& grad) {
    if (!active) return;
    Bucket& b = buckets[bucket_of[i]];
    const int64_t n = params[i].numel();
    b.flat.narrow(0, b.offsets[slot_of[i]], n).copy_(grad.detach().reshape(-1));
    if (--b.pending == 0) LaunchReady();
  }
};

GradientReducer::GradientReducer(std::vector<torch::Tensor> params,
                                 c10::intrusive_ptr<CollectiveGroup> group, int world_size,
                                 size_t bucket_bytes, size_t first_bucket_bytes)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.params = std::move(params);
  s.group = std::move(group);
  s.world = world_size;
  s.bucket_of.resize(s.params.size());
  s.slot_of.resize(s.params.size());
  // Reverse registration order: the last layers' gradients are ready first.
  size_t bytes = bucket_bytes;
  for (size_t k = s.params.size(); k-- > 0;) {
    const torch::Tensor& p = s.params[k];
    const size_t pb = static_cast<size_t>(p.numel()) * sizeof(float);
    const size_t cap = s.buckets.size() == 1 ? first_bucket_bytes : bucket_bytes;
    if (s.buckets.empty() || bytes + pb > cap) {
      s.buckets.emplace_back();
      bytes = 0;
    }
    State::Bucket& b = s.buckets.back();
    s.bucket_of[k] = s.buckets.size() - 1;
    s.slot_of[k] = b.params.size();
    b.offsets.push_back(b.params.empty() ? 0
                                         : b.offsets.back() + s.params[b.params.back()].numel());
    b.params.push_back(k);
    bytes += pb;
  }
  for (size_t i = 0; i < s.buckets.size(); ++i) {
    auto& b = s.buckets[i];
    // The last bucket has one more element: the per-step signal.
    const int64_t total =
        b.offsets.back() + s.params[b.params.back()].numel() + (i + 1 == s.buckets.size() ? 1 : 0);
    b.flat = torch::zeros({total}, s.params[b.params.front()].options().dtype(torch::kFloat32));
  }
  std::weak_ptr<State> weak = state_;
  for (size_t k = 0; k < s.params.size(); ++k) {
    s.params[k].register_hook([weak, k](torch::Tensor grad) {
      if (auto st = weak.lock()) st->OnGrad(k, grad);
    });
  }
}

GradientReducer::~GradientReducer() = default;

size_t GradientReducer::num_buckets() const { return state_->buckets.size(); }

void GradientReducer::Prepare(double signal) {
  State& s = *state_;
  s.buckets.back().flat[-1] = signal;
  for (auto& b : s.buckets) {
    b.pending = static_cast<int>(b.params.size());
    b.launched = false;
    b.work.reset();
  }
  s.next_launch = 0;
  s.active = true;
}

double GradientReducer::Finish(double* signal_sum) {
  State& s = *state_;
  const auto t0 = std::chrono::steady_clock::now();
  // Parameters that got no gradient this step contribute zeros, so that every
  // rank launches the same buckets in the same order.
  for (auto& b : s.buckets) {
    if (b.pending > 0) {
      for (size_t slot = 0; slot < b.params.size(); ++slot) {
        if (!s.params[b.params[slot]].grad().defined()) {
          b.flat.narrow(0, b.offsets[slot], s.params[b.params[slot]].numel()).zero_();
        }
      }
      b.pending = 0;
    }
  }
  s.LaunchReady();
  torch::NoGradGuard no_grad;
  for (auto& b : s.buckets) {
    b.work->wait();
    b.flat.div_(s.world);
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      torch::Tensor& p = s.params[b.params[slot]];
      torch::Tensor avg = b.flat.narrow(0, b.offsets[slot], p.numel()).view(p.sizes());
      if (p.grad().defined()) {
        p.mutable_grad().copy_(avg);
      } else {
        p.mutable_grad() = avg.clone();
      }
    }
  }
  if (signal_sum != nullptr) *signal_sum = s.buckets.back().flat[-1].item<double>() * s.world;
  s.active = false;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace shardkit
