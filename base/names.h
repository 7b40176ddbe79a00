// One name table per enum: the names the tools, the Python binding and the
// files (manifests, loader states, checkpoints) use for an enum's values,
// written once and read both ways, with the list for error messages.
//
//   inline constexpr EnumName<Layout> kLayoutNames[] = {{Layout::kNCHW, "NCHW"}, ...};
//   NameOf(kLayoutNames, Layout::kNHWC)           -> "NHWC"
//   ValueOf(kLayoutNames, "NHWC", &layout)        -> true
//   NameList(kLayoutNames)                        -> "'NCHW' or 'NHWC'"
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace shardkit {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The value's name (the table's first entry for it); "?" if it has none.
template <typename E, size_t N>
const char* NameOf(const EnumName<E> (&table)[N], E value) {
  for (const EnumName<E>& e : table) {
    if (e.value == value) return e.name;
  }
  return "?";
}

// The value named `name` (exactly); false, leaving *value alone, if none is.
template <typename E, size_t N>
bool ValueOf(const EnumName<E> (&table)[N], std::string_view name, E* value) {
  for (const EnumName<E>& e : table) {
    if (name == e.name) {
      *value = e.value;
      return true;
    }
  }
  return false;
}

// "'a', 'b' or 'c'": every name, for "must be ... not 'x'".
template <typename E, size_t N>
std::string NameList(const EnumName<E> (&table)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) out += i + 1 == N ? " or " : ", ";
    out += std::string("'") + table[i].name + "'";
  }
  return out;
}

}  // namespace shardkit
