// The command-line contract shared by shardkit-pack, -augment, -bench and
// -train: exit codes (0 success, 1 verify found bad data, 2 usage or I/O
// error), one-line error messages, and validators for flags, so that no
// value (malformed, negative, huge, NaN) escapes as an exception or a crash.
#pragma once

#include <CLI/CLI.hpp>
#include <cctype>
#include <string>
#include <vector>

#include "base/names.h"
#include "base/status.h"

namespace shardkit::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitBadData = 1;        // verify found bad data; nothing else uses it
inline constexpr int kExitError = 2;          // usage, I/O or any other error
inline constexpr int kExitInterrupted = 130;  // Ctrl-C or SIGTERM stopped it (128 + SIGINT)

// Threads of a tool (0: all cores) at most: more is a typo, not a machine.
inline constexpr int kMaxThreads = 256;

// Parses argv. Returns -1 when the tool should go on; otherwise the exit code:
// 0 after --help, 2 after a usage error (one line on stderr: "TOOL: error: ...").
int Parse(CLI::App& app, int argc, char** argv, const char* tool);

// Prints "TOOL: error: MESSAGE" (first line of it only) and "hint: ..." if
// given; returns kExitError.
int Fail(const char* tool, const Status& s, const std::string& hint = "");
// A tool's exit code once standard output is flushed: a write that failed
// (a full disk, a closed pipe) turns success into kExitError, said on stderr.
int FlushedExit(const char* tool, int rc);
int Fail(const char* tool, const std::string& message, const std::string& hint = "");

// An integer in [lo, hi]; the message names the range.
CLI::Validator IntIn(long long lo, long long hi);
// A finite number in [lo, hi] (NaN and infinities refused); open_lo excludes lo.
CLI::Validator RealIn(double lo, double hi, bool open_lo = false);
// A non-negative integer that fits in 64 bits (CLI11 would wrap "-1").
CLI::Validator Unsigned();
// One of `names`, spelled exactly.
CLI::Validator OneOf(std::vector<std::string> names);

// A flag whose value is one of an enum's names (its table, base/names.h; any
// case), parsed once, straight into *value; the help lists the names and
// the default.
template <typename E, size_t N>
CLI::Option* AddEnum(CLI::App* app, const std::string& flag, E* value,
                     const EnumName<E> (&table)[N], const std::string& help) {
  auto find = [&table](std::string s) -> const EnumName<E>* {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const EnumName<E>& e : table) {
      std::string n = e.name;
      for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (n == s) return &e;
    }
    return nullptr;
  };
  std::string list;
  for (const EnumName<E>& e : table) list += (list.empty() ? "" : " | ") + std::string(e.name);
  CLI::Option* o = app->add_option_function<std::string>(
      flag, [value, find](const std::string& s) { *value = find(s)->value; },
      help + " (" + list + ")");
  o->check(CLI::Validator(
      [find, list](std::string& s) -> std::string {
        return find(s) ? "" : "'" + s + "' is not one of " + list;
      },
      list));
  o->default_str(NameOf(table, *value));
  return o;
}

// A size in bytes: a number, or one with a binary suffix (K, M, G, T: 1024^n;
// "50G", "512M"), into *value; refused otherwise (or above 2^62).
CLI::Option* AddBytes(CLI::App* app, const std::string& flag, uint64_t* value,
                      const std::string& help);

// "1,2,4" -> {1, 2, 4}, each in [lo, hi]; an error naming `flag` otherwise.
Result<std::vector<int>> ParseIntList(const std::string& text, int lo, int hi,
                                      const std::string& flag);

}  // namespace shardkit::cli
