// The shared command-line contract: parsing, one-line errors, validators.
#include "tools/common/cli.h"

#include "base/humanize.h"

#include "base/version.h"
#include "storage/file_io.h"
#include "storage/output_file.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace shardkit::cli {
namespace {

std::string FirstLine(const std::string& s) {
  const size_t nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

bool ParseLong(const std::string& s, long long* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

}  // namespace

int Parse(CLI::App& app, int argc, char** argv, const char* tool) {
  // Before anything is opened: no file may take a closed standard stream's
  // number. (SIGPIPE keeps its default: `| head` ends a tool quietly; an
  // output file that is a FIFO is written with it held back, storage/file_io.)
  ReserveStandardStreams();
  app.set_version_flag("--version", std::string(tool) + " " + kVersion);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = FirstLine(e.what());
    std::string help = tool;  // the subcommand's help, where one was chosen
    for (const CLI::App* sub : app.get_subcommands()) help += " " + sub->get_name();
    std::fprintf(stderr, "%s: error: %s (see %s --help)\n", tool, msg.c_str(), help.c_str());
    return kExitError;
  }
  return -1;
}

int Fail(const char* tool, const std::string& message, const std::string& hint) {
  std::fprintf(stderr, "%s: error: %s\n", tool, FirstLine(message).c_str());
  if (!hint.empty()) std::fprintf(stderr, "hint: %s\n", hint.c_str());
  return kExitError;
}

int Fail(const char* tool, const Status& s, const std::string& hint) {
  return Fail(tool, s.message(), hint);
}

CLI::Validator IntIn(long long lo, long long hi) {
  const std::string range = "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        long long v = 0;
        if (!ParseLong(s, &v) || v < lo || v > hi) return "'" + s + "' is not " + range;
        return "";
      },
      "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

CLI::Validator RealIn(double lo, double hi, bool open_lo) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "a finite number in %s%g, %g]", open_lo ? "(" : "[", lo, hi);
  const std::string range = buf;
  return CLI::Validator(
      [lo, hi, open_lo, range](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || v < lo || v > hi ||
            (open_lo && v == lo)) {
          return "'" + s + "' is not " + range;
        }
        return "";
      },
      range);
}

CLI::Validator Unsigned() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
        if (digits) std::strtoull(s.c_str(), &end, 10);
        if (!digits || errno == ERANGE)
          return "'" + s + "' is not an integer in 0..18446744073709551615";
        return "";
      },
      "UINT");
}

CLI::Validator OneOf(std::vector<std::string> names) {
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : " | ") + n;
  return CLI::Validator(
      [names, list](std::string& s) -> std::string {
        for (const auto& n : names) {
          if (s == n) return "";
        }
        return "'" + s + "' is not one of " + list;
      },
      list);
}

Result<std::vector<int>> ParseIntList(const std::string& text, int lo, int hi,
                                      const std::string& flag) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    long long v = 0;
    if (!ParseLong(item, &v) || v < lo || v > hi) {
      return Status::InvalidArgument(flag + ": '" + item + "' is not an integer in " +
                                     std::to_string(lo) + ".." + std::to_string(hi));
    }
    out.push_back(static_cast<int>(v));
    pos = comma + 1;
  }
  return out;
}

CLI::Option* AddBytes(CLI::App* app, const std::string& flag, uint64_t* value,
                      const std::string& help) {
  CLI::Option* o = app->add_option_function<std::string>(
      flag, [value](const std::string& s) { ParseByteSize(s, value); }, help);
  o->check(CLI::Validator(
      [](std::string& s) -> std::string {
        uint64_t unused = 0;
        return ParseByteSize(s, &unused) ? ""
                                         : "'" + s + "' is not a size (bytes, or with K, M, G, T)";
      },
      "SIZE"));
  return o;
}

int FlushedExit(const char* tool, int rc) {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return rc;
  const int err = errno;
  std::fprintf(stderr, "%s: error: standard output: write error (%s)\n", tool,
               err != 0 ? std::strerror(err) : "unknown");
  return rc == kExitOk ? kExitError : rc;
}

}  // namespace shardkit::cli
