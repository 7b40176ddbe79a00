// Status and Result<T>: how shardkit library code reports recoverable errors
// (I/O, corruption, bad arguments) without exceptions, in the style of leveldb.
#pragma once

#include <cassert>
#include <memory>
#include <string>
#include <utility>
#include <variant>

namespace shardkit {

// Where an error is, as data: the file (a path; an archive inside another
// is "outer:inner") and, where the error is about a part of it, the member
// (an archive member, a shard's record: "" for the file itself). A Status
// made with one (Status::At) says it at the start of its message, "file: "
// or "file:member: "; code that decides by the place reads these fields,
// never the message.
struct ErrorLocation {
  std::string file, member;
  // "file" or "file:member", as messages show it.
  std::string ToString() const { return member.empty() ? file : file + ":" + member; }
};

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kNotFound,
    kCorruption,
    kInvalidArgument,
    kIOError,
    kUnsupported,
    kAborted
  };

  Status() = default;
  static Status OK() { return Status(); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status InvalidArgument(std::string msg) {
    return Status(Code::kInvalidArgument, std::move(msg));
  }
  static Status IOError(std::string msg) { return Status(Code::kIOError, std::move(msg)); }
  static Status Unsupported(std::string msg) { return Status(Code::kUnsupported, std::move(msg)); }
  static Status Aborted(std::string msg) { return Status(Code::kAborted, std::move(msg)); }
  // An error of `code` about `where`: the message is "WHERE: what" (WHERE as
  // ErrorLocation::ToString shows it); location() and what() keep the parts.
  static Status At(Code code, ErrorLocation where, const std::string& what);

  bool ok() const { return code_ == Code::kOk; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }
  bool IsIOError() const { return code_ == Code::kIOError; }
  bool IsUnsupported() const { return code_ == Code::kUnsupported; }
  bool IsAborted() const { return code_ == Code::kAborted; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }
  // Where the error is, if the code that made it said (At); else null.
  const ErrorLocation* location() const { return located_ ? &located_->where : nullptr; }
  // The message without its location: `what` as given to At; else message().
  const std::string& what() const { return located_ ? located_->what : msg_; }

  // "Corruption: shard-00001.sks: record 7: checksum mismatch".
  std::string ToString() const;

  // Whether the error may be gone if the same thing is tried again later
  // (storage that did not answer, or kept failing until its retries were
  // spent), as opposed to one that the same request will meet again (a
  // refused key, a missing bucket, bad data): what a tool's "rerun to
  // resume" goes by.
  bool transient() const { return transient_; }
  Status MarkTransient() const {
    Status s = *this;
    s.transient_ = !ok();
    return s;
  }

  // Returns a status of the same code with `context` prepended ("context:
  // message"), and the same location and what().
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    Status s(code_, context + ": " + msg_);
    s.located_ = located_;
    s.transient_ = transient_;
    return s;
  }
  void IgnoreError() const {}

 private:
  struct Located {
    ErrorLocation where;
    std::string what;
  };
  Status(Code code, std::string msg) : code_(code), msg_(std::move(msg)) {}
  Code code_ = Code::kOk;
  std::string msg_;
  std::shared_ptr<const Located> located_;  // shared: errors are copied, rarely located
  bool transient_ = false;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T operator*() && { return std::move(*this).value(); }

 private:
  std::variant<T, Status> v_;
};

#define SK_RETURN_IF_ERROR(expr)     \
  do {                               \
    ::shardkit::Status _st = (expr); \
    if (!_st.ok()) return _st;       \
  } while (0)

#define SK_CONCAT_INNER(a, b) a##b
#define SK_CONCAT(a, b) SK_CONCAT_INNER(a, b)
#define SK_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
// SK_ASSIGN_OR_RETURN(auto x, MakeX()); returns the error status if MakeX() failed.
#define SK_ASSIGN_OR_RETURN(lhs, expr) \
  SK_ASSIGN_OR_RETURN_IMPL(SK_CONCAT(_res_, __LINE__), lhs, expr)

}  // namespace shardkit
