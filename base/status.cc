// Status::ToString and Status::At.
#include "base/status.h"

namespace shardkit {

Status Status::At(Code code, ErrorLocation where, const std::string& what) {
  assert(code != Code::kOk);
  Status s(code, where.ToString() + ": " + what);
  s.located_ = std::make_shared<const Located>(Located{std::move(where), what});
  return s;
}

std::string Status::ToString() const {
  const char* name = "OK";
  switch (code_) {
    case Code::kOk:
      return "OK";
    case Code::kNotFound:
      name = "Not found";
      break;
    case Code::kCorruption:
      name = "Corruption";
      break;
    case Code::kInvalidArgument:
      name = "Invalid argument";
      break;
    case Code::kIOError:
      name = "I/O error";
      break;
    case Code::kUnsupported:
      name = "Unsupported";
      break;
    case Code::kAborted:
      name = "Aborted";
      break;
  }
  return std::string(name) + ": " + msg_;
}

}  // namespace shardkit
