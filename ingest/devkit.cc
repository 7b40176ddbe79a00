// The devkit's ground truth, with meta.mat's synsets read through libmatio
// (ingest/mat_file.h).
#include "ingest/devkit.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "ingest/archive_reader.h"
#include "ingest/mat_file.h"
#include "ingest/text.h"

namespace shardkit {

Result<std::map<int, std::string>> ParseMetaMat(const std::string& bytes,
                                                const std::string& where) {
  SK_ASSIGN_OR_RETURN(
      auto rows, ReadMatStructFieldsFromBytes(bytes, where, "synsets", {"ILSVRC2012_ID", "WNID"}));
  std::map<int, std::string> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const MatValue& id = rows[i][0];
    const MatValue& wnid = rows[i][1];
    if (id.is_text || id.numbers.size() != 1 || !wnid.is_text || wnid.text.empty() ||
        !(std::fabs(id.numbers[0]) < 1e9) || id.numbers[0] != std::floor(id.numbers[0])) {
      return Status::Corruption(where + ": synsets(" + std::to_string(i + 1) +
                                ") has no integer ILSVRC2012_ID or no WNID");
    }
    const auto [it, added] = out.emplace(static_cast<int>(id.numbers[0]), wnid.text);
    if (!added) {
      return Status::Corruption(where + ": synsets(" + std::to_string(i + 1) +
                                ") repeats ILSVRC2012_ID " + std::to_string(it->first) + " (" +
                                it->second + ", then " + wnid.text + ")");
    }
  }
  if (out.empty()) return Status::Corruption(where + ": no synsets");
  return out;
}

Result<std::vector<std::pair<std::string, std::string>>> ReadDevkitValLabels(
    const std::string& devkit) {
  SK_ASSIGN_OR_RETURN(std::string mat, ReadArchiveMember(devkit, "data/meta.mat", 64u << 20));
  SK_ASSIGN_OR_RETURN(auto wnid_of, ParseMetaMat(mat, devkit + ":data/meta.mat"));
  const std::string gt_name = "data/ILSVRC2012_validation_ground_truth.txt";
  SK_ASSIGN_OR_RETURN(std::string gt, ReadArchiveMember(devkit, gt_name, 64u << 20));
  std::vector<std::pair<std::string, std::string>> rows;
  int line = 0;  // the val image's number: the n-th non-blank line
  for (const auto& [unused, text] : TextLines(gt)) {
    ++line;
    char* rest = nullptr;
    errno = 0;
    const long id = std::strtol(text.c_str(), &rest, 10);
    const bool in_range = errno == 0 && id >= INT_MIN && id <= INT_MAX;
    auto it = in_range ? wnid_of.find(static_cast<int>(id)) : wnid_of.end();
    if (rest == text.c_str() || *rest != '\0' || it == wnid_of.end()) {
      return Status::Corruption(devkit + ":" + gt_name + ":" + std::to_string(line) + ": '" +
                                text.substr(0, 40) + "' is not an ILSVRC2012_ID of meta.mat");
    }
    char stem[64];
    std::snprintf(stem, sizeof(stem), "ILSVRC2012_val_%08d", line);
    rows.emplace_back(stem, it->second);
  }
  if (rows.empty()) return Status::Corruption(devkit + ":" + gt_name + ": no labels");
  return rows;
}

}  // namespace shardkit
