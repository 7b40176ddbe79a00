// Page-locked (pinned) host memory for a Loader's ring slots, from the CUDA
// driver (libcuda.so.1) opened at run time: the binding has no build-time
// CUDA dependency, and a machine without an NVIDIA driver gets a clear
// error. A batch in pinned memory is copied to the GPU by DMA, asynchronously
// (Python's Loader(device="cuda"), as shardkit-train's feeder copies).
#pragma once

#include "base/status.h"
#include "loader/batch.h"

namespace shardkit {

// An allocator of portable pinned buffers, made in the primary context of
// CUDA device `device` (an ordinal as CUDA numbers visible devices; the
// context PyTorch uses). Its buffers may outlive the allocator (each keeps
// the context retained until it is freed). Unavailable: no libcuda.so.1, a
// driver error (named), or no such device.
Result<SlotAllocator> CudaPinnedAllocator(int device);

}  // namespace shardkit
