// The one place where LibTorch 1.13 (Debian's) and 2.x (what clusters install)
// differ for shardkit: in 2.x the c10d backends (ProcessGroupGloo, ...NCCL)
// derive from c10d::Backend, in 1.13 from c10d::ProcessGroup. Both offer the
// same collective calls, which is all shardkit uses. Neither backend's header
// is included here: PyTorch's wheels may ship no Gloo headers, so only
// dist.cc includes the backends, each where it is available.
#pragma once

#include <torch/version.h>

#include <torch/csrc/distributed/c10d/Store.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace shardkit {

#if TORCH_VERSION_MAJOR >= 2
using CollectiveGroup = c10d::Backend;
#else
using CollectiveGroup = c10d::ProcessGroup;
#endif
using CollectiveWork = c10d::Work;

}  // namespace shardkit

#include <ATen/autocast_mode.h>

namespace shardkit {

// Enables CUDA autocast (fp16, or bf16) for its lifetime.
class AutocastGuard {
 public:
  AutocastGuard(bool enabled, bool bf16) : enabled_(enabled) {
    if (!enabled_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_dtype(at::kCUDA, bf16 ? at::kBFloat16 : at::kHalf);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
    at::autocast::set_autocast_gpu_dtype(bf16 ? at::kBFloat16 : at::kHalf);
    at::autocast::set_enabled(true);
#endif
  }
  ~AutocastGuard() {
    if (!enabled_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCUDA, false);
#else
    at::autocast::set_enabled(false);
#endif
    at::autocast::clear_cache();
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool enabled_;
};

}  // namespace shardkit
