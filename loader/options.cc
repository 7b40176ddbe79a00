// The rules on the loader's options, each in one place: ValidateLoaderOptions
// (every option's range, checked before a Loader opens anything, and by the
// tools through it) and TransformApplies (which records a transform takes).
#include <algorithm>
#include <cmath>
#include <string>

#include "loader/options.h"

namespace shardkit {

Status ValidateLoaderOptions(const LoaderOptions& o) {
  auto bad = [](const std::string& what) { return Status::InvalidArgument(what); };
  if (o.workers < 1 || o.workers > kMaxLoaderWorkers) {
    return bad("workers must be in 1.." + std::to_string(kMaxLoaderWorkers) + ", not " +
               std::to_string(o.workers));
  }
  if (o.prefetch < 1 || o.prefetch > kMaxPrefetch) {
    return bad("prefetch must be in 1.." + std::to_string(kMaxPrefetch) + ", not " +
               std::to_string(o.prefetch));
  }
  if (o.batch_size < 1 || o.batch_size > kMaxBatchSize) {
    return bad("batch size must be in 1.." + std::to_string(kMaxBatchSize) + ", not " +
               std::to_string(o.batch_size));
  }
  if (o.world_size > kMaxWorldSize) {
    return bad("world size must be at most " + std::to_string(kMaxWorldSize) + ", not " +
               std::to_string(o.world_size));
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return bad("rank " + std::to_string(o.rank) + " is not in 0..world_size-1 (world size " +
               std::to_string(o.world_size) + ")");
  }
  if (o.shuffle == ShuffleMode::kGiven && o.world_size != 1) {
    return bad("world size " + std::to_string(o.world_size) +
               " with orders given (a sampler's indices): a given order is this rank's already, "
               "and the loader does not partition it again; give world size 1, and let the "
               "sampler partition (DistributedSampler's num_replicas and rank)");
  }
  if (o.block_window < 1) return bad("block window must be at least 1");
  if (o.read_depth < kAutoReadDepth || o.read_depth > 1024)
    return bad("read depth must be in 0..1024, not " + std::to_string(o.read_depth));
  if (o.read_ahead_bytes < (1u << 20) || o.read_ahead_bytes > (64ull << 30))
    return bad("read-ahead bytes must be in 1 MiB..64 GiB");
  if (o.cache_limit > 0 && o.cache_dir.empty()) {
    return bad("cache_limit bounds a node cache: it needs cache_dir");
  }
  const TransformParams& t = o.transform;
  if (t.size < 1 || t.size > 4096)
    return bad("transform size must be in 1..4096, not " + std::to_string(t.size));
  for (int v : {t.height, t.width, t.resize, t.resize_height, t.resize_width}) {
    if (v < 0 || v > 16384)
      return bad("transform sizes must be in 1..16384, not " + std::to_string(v));
  }
  if ((t.height > 0) != (t.width > 0) || (t.resize_height > 0) != (t.resize_width > 0)) {
    return bad("give a transform's height and width together");
  }
  if (t.kind == TransformKind::kVal &&
      (t.resize_height > 0 ? t.resize_height < t.out_height() || t.resize_width < t.out_width()
                           : t.resize > 0 && t.resize < std::max(t.out_height(), t.out_width()))) {
    return bad("CenterCrop " + std::to_string(t.out_height()) + "x" +
               std::to_string(t.out_width()) + " is larger than the Resize before it");
  }
  if (!(t.flip_prob == -1 || (t.flip_prob >= 0 && t.flip_prob <= 1))) {  // -1: the default
    return bad("flip probability must be in [0, 1]");
  }
  auto finite = [](double v) { return std::isfinite(v); };
  if (!finite(t.min_scale) || !finite(t.max_scale) || t.min_scale <= 0 ||
      t.min_scale > t.max_scale || t.max_scale > 1) {
    return bad("crop scale range must satisfy 0 < min <= max <= 1");
  }
  if (!finite(t.min_ratio) || !finite(t.max_ratio) || t.min_ratio <= 0 ||
      t.min_ratio > t.max_ratio) {
    return bad("crop aspect-ratio range must satisfy 0 < min <= max");
  }
  if (!finite(t.crop_fraction) || t.crop_fraction <= 0 || t.crop_fraction > 1) {
    return bad("val crop fraction must be in (0, 1]");
  }
  for (int v : {t.pad_left, t.pad_top, t.pad_right, t.pad_bottom}) {
    if (v < 0 || v > kMaxPadding)
      return bad("crop padding must be in 0.." + std::to_string(kMaxPadding) + ", not " +
                 std::to_string(v));
  }
  if (t.fill_channels < 1 || t.fill_channels > 4)
    return bad("crop fill must have 1 to 4 values, not " + std::to_string(t.fill_channels));
  return Status::OK();
}

bool TransformApplies(format::RecordKind record, TransformKind transform) {
  return record == format::RecordKind::kJpeg || transform == TransformKind::kNone ||
         transform == TransformKind::kCrop;
}

}  // namespace shardkit
