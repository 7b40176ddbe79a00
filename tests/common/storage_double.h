// StorageDouble: an Env for tests that behaves like network storage. It
// serves the POSIX files under it (Env::Default()) and adds what GPFS,
// Lustre or an object store do to a reader: a latency per read, reads that
// fail at chosen bytes, and reads held until several wait together (which
// proves a reader keeps them in flight at once: a reader that reads one at a
// time never opens the gate). It counts reads, bytes, read-ahead hints and
// the most reads in flight, and records the access hints it was given. No
// root and no FUSE: the FUSE passthrough (bench/delayfs.c) stays the check on
// a real filesystem, in bench/latency_compare.sh.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "storage/env.h"

namespace shardkit::testing {

class StorageDouble final : public Env {
 public:
  StorageDouble() = default;

  // Every read waits this long before it is served.
  void set_latency_ns(uint64_t ns) { latency_ns_ = ns; }
  // Whether it says it is remote (Env::remote), as object storage does.
  void set_remote(bool remote) { remote_ = remote; }
  bool remote() const override { return remote_; }
  // Reads of a file whose path ends in `suffix` that touch [offset, offset + n)
  // fail with an IOError ("injected read error"), as a failing disk's do.
  void FailReads(const std::string& suffix, uint64_t offset, uint64_t n);
  // The next `times` reads of such a file that cover byte `offset` deliver
  // it flipped (bits 0x20), as a network that damages bytes in transit.
  void DamageReads(const std::string& suffix, uint64_t offset, int times);
  int damaged() const { return damaged_.load(); }  // reads delivered damaged
  // From now on each read waits until `n` reads wait together (then all of
  // them go, and the gate stays open), or until `timeout_ms` passed.
  void GateUntilConcurrent(int n, int timeout_ms);
  bool gate_opened() const { return gate_opened_.load(); }

  uint64_t reads() const { return reads_.load(); }
  uint64_t bytes() const { return bytes_.load(); }
  uint64_t hints() const { return hints_.load(); }  // WillNeed calls
  // Returns once `n` WillNeed calls were made (a reader got that far).
  void WaitForHints(uint64_t n);
  // What files opened from now on say they are (RandomAccessFile::identity):
  // "LOCATION" + path + "\n" + VERSION, where the location stands for an
  // endpoint ("double:" by default) and the version for an ETag ("1" by
  // default, also their version()). An empty version gives an empty
  // identity, as a server that names no versions.
  void set_location(const std::string& location);
  void set_version(const std::string& version);
  // The ranges of the WillNeed calls (offset, bytes) since the last call.
  std::vector<std::pair<uint64_t, size_t>> TakeHinted();
  int peak_in_flight() const { return peak_.load(); }
  // The hints of the last SetAccess of any file (pattern, views, uncached).
  AccessHints last_hints() const;

  Result<std::unique_ptr<RandomAccessFile>> OpenForReads(const std::string& path,
                                                         const Cancel* cancel = nullptr) override;
  bool FileExists(const std::string& path) override { return Env::Default()->FileExists(path); }

 private:
  class File;
  Status BeforeRead(const std::string& path, uint64_t offset, size_t n);
  void AfterRead();

  std::atomic<uint64_t> latency_ns_{0};
  std::atomic<bool> remote_{false};
  std::atomic<uint64_t> reads_{0}, bytes_{0}, hints_{0};
  std::atomic<int> in_flight_{0}, peak_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Fault {
    std::string suffix;
    uint64_t offset, n;
  };
  std::vector<Fault> faults_;
  struct Damage {
    std::string suffix;
    uint64_t offset;
    int times;
  };
  std::vector<Damage> damages_;
  std::atomic<int> damaged_{0};
  void Damaged(const std::string& path, uint64_t offset, size_t n, void* dst);
  int gate_ = 0, waiting_ = 0, gate_timeout_ms_ = 0;
  std::atomic<bool> gate_opened_{false};
  AccessHints hints_seen_;
  std::vector<std::pair<uint64_t, size_t>> hinted_;
  std::condition_variable hinted_cv_;
  std::string location_ = "double:", version_ = "1";
};

// WriteFaultEnv: the POSIX filesystem (Env::Default()) as a disk that fills
// up, for writers given an Env (PackOptions::env). Every byte appended to a
// file or a scratch file through it counts against a budget; an append that
// would go past it fails whole, with the IOError a full disk gives ("PATH:
// write failed: No space left on device"), and nothing of it is written
// (a smaller one may still fit, as on a disk). Reads, listings, renames,
// removals and locks pass through. Thread-safe.
class WriteFaultEnv final : public Env {
 public:
  static constexpr uint64_t kNoLimit = ~uint64_t{0};
  explicit WriteFaultEnv(uint64_t budget = kNoLimit) : budget_(budget) {}

  // Bytes appended through this Env so far (the ones that failed aside).
  uint64_t written() const { return written_.load(); }
  // Appends refused for want of space so far.
  uint64_t refused() const { return refused_.load(); }

  Result<std::unique_ptr<RandomAccessFile>> OpenForReads(const std::string& path,
                                                         const Cancel* cancel = nullptr) override {
    return Env::Default()->OpenForReads(path, cancel);
  }
  bool FileExists(const std::string& path) override { return Env::Default()->FileExists(path); }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  Result<std::unique_ptr<ScratchFile>> NewScratchFile(const std::string& dir) override;
  Status RenameFile(const std::string& from, const std::string& to) override {
    return Env::Default()->RenameFile(from, to);
  }
  Status RemoveFile(const std::string& path) override { return Env::Default()->RemoveFile(path); }
  Status RemoveDir(const std::string& dir) override { return Env::Default()->RemoveDir(dir); }
  Status CreateDirs(const std::string& dir) override { return Env::Default()->CreateDirs(dir); }
  Status SyncDir(const std::string& dir) override { return Env::Default()->SyncDir(dir); }
  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    return Env::Default()->ListDir(dir);
  }
  Result<std::unique_ptr<DirLock>> LockDir(const std::string& dir, bool wait = false,
                                           const Cancel* cancel = nullptr) override {
    return Env::Default()->LockDir(dir, wait, cancel);
  }

 private:
  class File;
  class Scratch;
  // OK if n more bytes fit in the budget (they are counted), else the full
  // disk's error naming `path`.
  Status Charge(const std::string& path, size_t n);

  const uint64_t budget_;
  std::atomic<uint64_t> written_{0}, refused_{0};
};

}  // namespace shardkit::testing
