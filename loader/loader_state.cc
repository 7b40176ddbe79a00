#include "loader/loader_state.h"

#include <nlohmann/json.hpp>

namespace shardkit {

std::string LoaderStateToJson(const LoaderState& s) {
  nlohmann::ordered_json j;
  j["version"] = LoaderState::kVersion;
  j["epoch"] = s.epoch;
  j["batch"] = s.batch;
  j["seed"] = s.seed;
  j["world_size"] = s.world_size;
  j["batch_size"] = s.batch_size;
  j["records"] = s.records;
  j["drop_last"] = s.drop_last;
  j["shuffle"] = s.shuffle;
  j["block_window"] = s.block_window;
  j["transform"] = s.transform;
  j["positions"] = nlohmann::json::array();
  for (const auto& r : s.positions) j["positions"].push_back({r.first, r.second});
  j["dataset"] = s.dataset;
  j["order"] = s.order;
  j["size"] = s.size;
  j["resize"] = s.resize;
  return j.dump();
}

Result<LoaderState> LoaderStateFromJson(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [](const std::string& what) {
    return Status::InvalidArgument("not a shardkit loader state: " + what);
  };
  if (!j.is_object()) return bad("not a JSON object");
  LoaderState s;
  auto number = [&](const char* key, uint64_t* out, bool required) -> Status {
    auto it = j.find(key);
    if (it == j.end())
      return required ? bad(std::string("'") + key + "' is missing") : Status::OK();
    if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0))
      return bad(std::string("'") + key + "' is not a non-negative integer");
    *out = it->get<uint64_t>();
    return Status::OK();
  };
  uint64_t version = 0;
  SK_RETURN_IF_ERROR(number("version", &version, true));
  if (version < 1 || version > LoaderState::kVersion) {
    return bad("version " + std::to_string(version) + "; this shardkit reads versions 1.." +
               std::to_string(LoaderState::kVersion));
  }
  const bool v2 = version >= 2;
  SK_RETURN_IF_ERROR(number("epoch", &s.epoch, true));
  SK_RETURN_IF_ERROR(number("batch", &s.batch, true));
  SK_RETURN_IF_ERROR(number("seed", &s.seed, true));
  SK_RETURN_IF_ERROR(number("world_size", &s.world_size, true));
  SK_RETURN_IF_ERROR(number("batch_size", &s.batch_size, true));
  SK_RETURN_IF_ERROR(number("records", &s.records, true));
  SK_RETURN_IF_ERROR(number("block_window", &s.block_window, v2));
  if (s.world_size < 1 || s.batch_size < 1) return bad("world_size and batch_size must be >= 1");
  auto text_field = [&](const char* key, std::string* out) -> Status {
    auto it = j.find(key);
    if (it == j.end()) return v2 ? bad(std::string("'") + key + "' is missing") : Status::OK();
    if (!it->is_string()) return bad(std::string("'") + key + "' is not a string");
    *out = it->get<std::string>();
    return Status::OK();
  };
  if (auto it = j.find("dataset"); it != j.end()) {  // version 4
    if (!it->is_string()) return bad("'dataset' is not a string");
    s.dataset = it->get<std::string>();
  }
  SK_RETURN_IF_ERROR(text_field("shuffle", &s.shuffle));
  SK_RETURN_IF_ERROR(text_field("transform", &s.transform));
  if (auto it = j.find("drop_last"); it != j.end()) {
    if (!it->is_boolean()) return bad("'drop_last' is not true or false");
    s.drop_last = it->get<bool>();
  } else if (v2) {
    return bad("'drop_last' is missing");
  }
  if (auto it = j.find("positions"); it != j.end()) {
    const char* what = "'positions' is not a list of [begin, end] pairs of non-negative integers";
    if (!it->is_array()) return bad(what);
    for (const auto& r : *it) {
      if (!r.is_array() || r.size() != 2 || !r[0].is_number_unsigned() ||
          !r[1].is_number_unsigned()) {
        return bad(what);
      }
      s.positions.emplace_back(r[0].get<uint64_t>(), r[1].get<uint64_t>());
    }
  }
  uint64_t size = 0, resize = 0;  // version 6
  SK_RETURN_IF_ERROR(number("size", &size, false));
  SK_RETURN_IF_ERROR(number("resize", &resize, false));
  if (size > 16384 || resize > 16384) return bad("'size' or 'resize' is not a side in 0..16384");
  s.size = static_cast<int>(size);
  s.resize = static_cast<int>(resize);
  if (auto it = j.find("order"); it != j.end()) {  // version 5
    if (!it->is_array()) return bad("'order' is not a list of record numbers");
    s.order.reserve(it->size());
    for (const auto& r : *it) {
      if (!r.is_number_unsigned()) return bad("'order' is not a list of record numbers");
      s.order.push_back(r.get<uint64_t>());
    }
  }
  return s;
}

std::string DatasetFingerprint(const Manifest& manifest) {
  std::string canonical = "shards";
  for (const ShardInfo& shard : manifest.shards)
    canonical += " " + std::to_string(shard.records) + ":" + std::to_string(shard.crc32c);
  return SettingsDigest(canonical);
}

Status CheckResumable(const LoaderState& saved, const LoaderState& current) {
  auto refuse = [](const std::string& what) { return Status::InvalidArgument(what); };
  if (saved.records != 0 && saved.records != current.records) {
    return refuse("this loader state is for a dataset of " + std::to_string(saved.records) +
                  " records, this one has " + std::to_string(current.records));
  }
  if (!saved.dataset.empty() && saved.dataset != current.dataset) {
    return refuse("this loader state is for another dataset of " + std::to_string(current.records) +
                  " records (its shards' checksums differ from this one's): its positions "
                  "would name other records");
  }
  if (saved.seed != current.seed) {
    return refuse("this loader state was saved with seed " + std::to_string(saved.seed) +
                  ", this loader has seed " + std::to_string(current.seed) +
                  ": the order and augmentation would differ");
  }
  if (saved.batch == 0 && saved.positions.empty()) return Status::OK();  // an epoch boundary
  std::string differs;
  auto compare = [&](const char* what, const std::string& a, const std::string& b) {
    if (a != b) differs += std::string(differs.empty() ? "" : ", ") + what + " " + a + " -> " + b;
  };
  if (!saved.shuffle.empty()) {
    compare("shuffle", saved.shuffle, current.shuffle);
    compare("block window", std::to_string(saved.block_window),
            std::to_string(current.block_window));
  }
  if (!saved.transform.empty()) compare("transform", saved.transform, current.transform);
  const std::string e = std::to_string(saved.epoch), b = std::to_string(saved.batch);
  if (!differs.empty()) {
    return refuse("this loader state is mid-way through epoch " + e + " (batch " + b +
                  "), and this loader orders or augments it differently (" + differs +
                  "): continuing would repeat or skip records, or change them. Resume with the "
                  "saved settings, or start epoch " +
                  std::to_string(saved.epoch + 1) + " (the rest of epoch " + e + " is not read)");
  }
  return Status::OK();
}

}  // namespace shardkit
