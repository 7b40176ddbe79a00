// The sizes of a MATLAB .mat file, checked before libmatio reads it.
// libmatio 1.5 trusts what a file declares: it allocates a struct's elements
// by its dimensions before reading them, and zero-fills the data a truncated
// file lacks. So every .mat file shardkit opens is walked here first, reading
// only sizes: each element within what holds it, every compressed variable
// inflated once to its end (its length and checksum), each numeric array's
// data exactly its dimensions' worth, a struct's or cell's elements within its
// bytes, and for 7.3 (HDF5) no dataset larger than its file could hold.
// Nothing is allocated from a size the file declares.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace shardkit {

struct MatFileInfo {
  int version = 0;                 // 5 (level 5, MATLAB -v6/-v7) or 73 (HDF5)
  std::vector<std::string> names;  // the variables, in the file's order
  // 7.3: variables whose data libmatio would read as other values (stored
  // outside the file, or as another type than their MATLAB_class), with why:
  // refused when asked for.
  std::map<std::string, std::string> unreadable;
};

// Checks the file at `path`; messages name it as `where`.
Result<MatFileInfo> CheckMatFile(const std::string& path, const std::string& where);

}  // namespace shardkit
