// Status::ToString.
#include "base/status.h"

namespace shardkit {

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
