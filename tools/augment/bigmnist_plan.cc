// Output order, part split and settings digest of bigMNIST.
#include "tools/augment/bigmnist_plan.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace shardkit {

Order::Order(const Plan& plan)
    : perm_(plan.total(), plan.seed, 0xC0B1E5),
      versions_(plan.versions),
      per_copy_(plan.n * plan.versions) {}

void Order::At(uint64_t pos, uint64_t* index, uint64_t* version, uint64_t* copy) const {
  const uint64_t q = perm_(pos);
  *copy = q / per_copy_;
  const uint64_t r = q % per_copy_;
  *index = r / versions_;
  *version = r % versions_;
}

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
        " parts, or a smaller --shard-size");
  }
  // 128-bit products: shards x count may pass 2^64.
  using u128 = unsigned __int128;
  r.first_shard = static_cast<uint64_t>(u128{shards} * part.index / part.count);
  r.end_shard = static_cast<uint64_t>(u128{shards} * (part.index + 1) / part.count);
  r.first_record = r.first_shard * records_per_shard;
  r.end_record = std::min(total_records, r.end_shard * records_per_shard);
  return r;
}

std::string SettingsDigest(std::string_view canonical) {
  // Two Mix64 chains over little-endian 8-byte words, with different starts.
  uint64_t a = 0x5348415244ull, b = 0x4B49545F5345ull;
  for (size_t i = 0; i < canonical.size(); i += 8) {
    uint64_t word = 0;
    for (size_t j = 0; j < 8 && i + j < canonical.size(); ++j)
      word |= uint64_t{static_cast<uint8_t>(canonical[i + j])} << (8 * j);
    a = Mix64(a ^ word);
    b = Mix64(b + word * 0x9E3779B97F4A7C15ull);
  }
  a = Mix64(a ^ canonical.size());
  b = Mix64(b ^ ~uint64_t{canonical.size()});
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return hex;
}

}  // namespace shardkit
