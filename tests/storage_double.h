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

#include "base/env.h"

namespace shardkit::testing {

class StorageDouble final : public Env {
 public:
  StorageDouble() = default;

  // Every read waits this long before it is served.
  void set_latency_ns(uint64_t ns) { latency_ns_ = ns; }
  // Reads of a file whose path ends in `suffix` that touch [offset, offset + n)
  // fail with an IOError ("injected read error"), as a failing disk's do.
  void FailReads(const std::string& suffix, uint64_t offset, uint64_t n);
  // From now on each read waits until `n` reads wait together (then all of
  // them go, and the gate stays open), or until `timeout_ms` passed.
  void GateUntilConcurrent(int n, int timeout_ms);
  bool gate_opened() const { return gate_opened_.load(); }

  uint64_t reads() const { return reads_.load(); }
  uint64_t bytes() const { return bytes_.load(); }
  uint64_t hints() const { return hints_.load(); }  // WillNeed calls
  int peak_in_flight() const { return peak_.load(); }
  // The hints of the last SetAccess of any file (pattern, views, uncached).
  AccessHints last_hints() const;

  Result<std::unique_ptr<RandomAccessFile>> OpenForReads(const std::string& path) override;
  bool FileExists(const std::string& path) override { return Env::Default()->FileExists(path); }

 private:
  class File;
  Status BeforeRead(const std::string& path, uint64_t offset, size_t n);
  void AfterRead();

  std::atomic<uint64_t> latency_ns_{0};
  std::atomic<uint64_t> reads_{0}, bytes_{0}, hints_{0};
  std::atomic<int> in_flight_{0}, peak_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Fault {
    std::string suffix;
    uint64_t offset, n;
  };
  std::vector<Fault> faults_;
  int gate_ = 0, waiting_ = 0, gate_timeout_ms_ = 0;
  std::atomic<bool> gate_opened_{false};
  AccessHints hints_seen_;
};

}  // namespace shardkit::testing
