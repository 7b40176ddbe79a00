// --part I/N: parsing, and the split of a dataset's shards into parts.
#include "shard/parts.h"

#include <algorithm>
#include <string>

namespace shardkit {

namespace {

bool ParseCount(std::string_view s, uint32_t* out) {
  if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string_view::npos)
    return false;
  const uint64_t v = std::stoull(std::string(s));
  if (v > UINT32_MAX) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

}  // namespace

Result<PartSpec> ParsePart(std::string_view text) {
  const std::string shown = "'" + std::string(text) + "'";
  const size_t slash = text.find('/');
  PartSpec p;
  if (slash == std::string_view::npos || !ParseCount(text.substr(0, slash), &p.index) ||
      !ParseCount(text.substr(slash + 1), &p.count)) {
    return Status::InvalidArgument(shown + " is not I/N, part I (0-based) of N, e.g. 2/4");
  }
  if (p.count == 0) return Status::InvalidArgument(shown + ": N is 0; N counts the parts, >= 1");
  if (p.count > kMaxParts) {
    return Status::InvalidArgument(shown + ": at most " + std::to_string(kMaxParts) + " parts");
  }
  if (p.index >= p.count) {
    return Status::InvalidArgument(shown + ": part " + std::to_string(p.index) +
                                   " does not exist; the parts of " + std::to_string(p.count) +
                                   " are 0.." + std::to_string(p.count - 1));
  }
  return p;
}

Result<PartRange> SplitIntoParts(PartSpec part, uint64_t total_records,
                                 uint64_t records_per_shard) {
  const uint64_t shards = (total_records + records_per_shard - 1) / records_per_shard;
  PartRange r;
  if (part.whole()) {
    r.end_shard = shards;
    r.end_record = total_records;
    return r;
  }
  if (part.count > shards) {
    return Status::InvalidArgument(
        "--part " + std::to_string(part.index) + "/" + std::to_string(part.count) +
        ": more parts than the output has shards (" + std::to_string(shards) + " of " +
        std::to_string(records_per_shard) + " records); use at most " + std::to_string(shards) +
        " part(s), or a smaller --shard-size");
  }
  // 128-bit products: shards x count may pass 2^64.
  using u128 = unsigned __int128;
  r.first_shard = static_cast<uint64_t>(u128{shards} * part.index / part.count);
  r.end_shard = static_cast<uint64_t>(u128{shards} * (part.index + 1) / part.count);
  r.first_record = r.first_shard * records_per_shard;
  r.end_record = std::min(total_records, r.end_shard * records_per_shard);
  return r;
}

}  // namespace shardkit
