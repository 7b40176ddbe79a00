// The one place where LibTorch 1.13 (Debian's) and 2.x (what clusters install)
// differ for shardkit: in 2.x the c10d backends (ProcessGroupGloo, ...NCCL)
// derive from c10d::Backend, in 1.13 from c10d::ProcessGroup. Both offer the
// same collective calls, which is all shardkit uses.
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace shardkit {

#if TORCH_VERSION_MAJOR >= 2
using CollectiveGroup = c10d::Backend;
#else
using CollectiveGroup = c10d::ProcessGroup;
#endif
using CollectiveWork = c10d::Work;

}  // namespace shardkit
