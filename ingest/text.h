// Text the sources read: label files and CSVs as people save them (a UTF-8
// byte-order mark, CRLF or LF line ends, blank lines), comma lists, and the
// class names of integer labels.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace shardkit {

// The non-blank lines of `text` with their 1-based line numbers; a leading
// UTF-8 byte-order mark and each line's trailing CR are dropped.
std::vector<std::pair<int, std::string>> TextLines(const std::string& text);

// "a,b,,c" -> {"a", "b", "", "c"}.
std::vector<std::string> SplitList(const std::string& s, char separator = ',');
// SplitList's inverse: {"a", "b", "", "c"} -> "a,b,,c"; {} -> "".
std::string JoinList(const std::vector<std::string>& items, char separator = ',');

// The class list of integer labels up to max_label: `names` if given (and
// enough), else the numbers "0".."max_label". `where` names the labels.
Result<std::vector<std::string>> ClassesFor(int64_t max_label,
                                            const std::vector<std::string>& names,
                                            const std::string& where);

}  // namespace shardkit
