// The input resolution of each epoch, as the fastest published ImageNet
// recipes train (FFCV's ResNet-50 and ResNet-18 configurations): low
// resolution first, ramped linearly to the final one, evaluated at another.
// The train crop is decoded at the DCT scale its output size allows and
// the resample shrinks with the side, so a 160 px epoch costs the loader
// 0.86 of a 224 px one (docs/performance.md); the model's saving is larger
// (0.51 of the pixels). shardkit-train's
// --resolution-schedule and Python's shardkit.ResolutionSchedule set each
// epoch's side with Loader::SetSize.
#pragma once

#include <string>

#include "base/status.h"

namespace shardkit {

struct ResolutionSchedule {
  int min_size = 0, max_size = 0;      // 0: no schedule (the fixed --size)
  int start_epoch = 0, end_epoch = 0;  // the ramp: min_size up to start, max_size from end
  // The side of epoch `epoch`'s training crops: min_size until start_epoch,
  // max_size from end_epoch, between them the straight line from one to the
  // other rounded to the nearest multiple of 32, as FFCV's
  // get_resolution(epoch) rounds it.
  int SizeAt(int epoch) const;
  bool active() const { return min_size > 0; }
};

// The schedule, checked: sides 16..4096, MIN <= MAX, epochs 0..1e6, START <=
// END; an error says what is wrong.
Result<ResolutionSchedule> MakeResolutionSchedule(long min_size, long max_size, long start_epoch,
                                                  long end_epoch);
// "MIN:MAX:START:END" (sides in pixels, epochs from 0), e.g. FFCV's
// ResNet-50 "160:192:65:76". An error names the text and what is wrong.
Result<ResolutionSchedule> ParseResolutionSchedule(const std::string& text);

}  // namespace shardkit
