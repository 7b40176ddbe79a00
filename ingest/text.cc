// Line and list splitting, once for every source.
#include "ingest/text.h"

#include "shard/manifest.h"  // NumberedClasses

namespace shardkit {

std::vector<std::pair<int, std::string>> TextLines(const std::string& text) {
  std::vector<std::pair<int, std::string>> lines;
  size_t pos = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  int number = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    lines.emplace_back(number, std::move(line));
  }
  return lines;
}

std::vector<std::string> SplitList(const std::string& s, char separator) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t c = s.find(separator, pos);
    if (c == std::string::npos) c = s.size();
    out.push_back(s.substr(pos, c - pos));
    pos = c + 1;
  }
  return out;
}

std::string JoinList(const std::vector<std::string>& items, char separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += items[i];
  }
  return out;
}

Result<std::vector<std::string>> ClassesFor(int64_t max_label,
                                            const std::vector<std::string>& names,
                                            const std::string& where) {
  if (!names.empty()) {
    if (static_cast<int64_t>(names.size()) <= max_label) {
      return Status::InvalidArgument("--class-names lists " + std::to_string(names.size()) +
                                     " classes but the labels of " + where + " go up to " +
                                     std::to_string(max_label));
    }
    return names;
  }
  return NumberedClasses(max_label, where, "pass --class-names, or relabel to 0..classes-1");
}

}  // namespace shardkit
