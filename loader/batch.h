// Batch: what the loader hands out, and where its memory comes from. Part
// of the loader's public API (loader/loader.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "image/image.h"

namespace shardkit {

// One batch: uint8 pixels (N x C x H x W or N x H x W x C), labels, and the
// global record number of each sample. The pointers stay valid while the
// Batch's lease (std::shared_ptr<const Batch>) or its copy lives.
struct Batch {
  uint64_t epoch = 0;
  uint64_t index = 0;  // batch number within the epoch
  int size = 0;        // samples (the last batch may be short unless drop_last)
  int real_size = 0;   // of those, samples that are not padding (see Partition)
  int channels = 0, height = 0, width = 0;
  Layout layout = Layout::kNCHW;
  uint8_t* data = nullptr;
  int32_t* labels = nullptr;
  uint64_t* sample_ids = nullptr;
  size_t sample_bytes() const { return size_t(channels) * height * width; }
};

// Returns `bytes` of memory, aligned to 64 bytes at least, owned by the
// returned pointer (its deleter frees it). Called from the producer thread;
// the memory is freed from whichever thread drops the last reference.
using SlotAllocator = std::function<std::shared_ptr<uint8_t>(size_t bytes)>;
// The default: 64-byte aligned heap memory.
std::shared_ptr<uint8_t> DefaultSlotAllocator(size_t bytes);

}  // namespace shardkit
