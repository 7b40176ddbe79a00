#include "tests/common/storage_double.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace shardkit::testing {

class StorageDouble::File final : public RandomAccessFile {
 public:
  File(StorageDouble* env, std::unique_ptr<RandomAccessFile> base, std::string location,
       std::string version)
      : env_(env),
        base_(std::move(base)),
        version_(std::move(version)),
        identity_(version_.empty() ? "" : location + base_->path() + "\n" + version_) {}
  const std::string& path() const override { return base_->path(); }
  uint64_t size() const override { return base_->size(); }
  std::string version() const override { return version_; }
  std::string identity() const override { return identity_; }
  Status Read(uint64_t offset, size_t n, void* dst) const override {
    Status s = env_->BeforeRead(path(), offset, n);
    if (s.ok()) s = base_->Read(offset, n, dst);
    if (s.ok()) env_->Damaged(path(), offset, n, dst);
    env_->AfterRead();
    return s;
  }
  // Remembered, and only the pattern passed on: no views (every byte goes
  // through Read, where the latency and the faults are), no O_DIRECT.
  Status SetAccess(const AccessHints& hints) override {
    {
      std::lock_guard<std::mutex> lock(env_->mu_);
      env_->hints_seen_ = hints;
    }
    AccessHints h;
    h.pattern = hints.pattern;
    return base_->SetAccess(h);
  }
  void WillNeed(uint64_t offset, size_t n) const override {
    std::lock_guard<std::mutex> lock(env_->mu_);
    env_->hints_.fetch_add(1);
    env_->hinted_.emplace_back(offset, n);
    env_->hinted_cv_.notify_all();
  }

 private:
  StorageDouble* env_;
  std::unique_ptr<RandomAccessFile> base_;
  const std::string version_, identity_;
};

void StorageDouble::FailReads(const std::string& suffix, uint64_t offset, uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.push_back(Fault{suffix, offset, n});
}

void StorageDouble::DamageReads(const std::string& suffix, uint64_t offset, int times) {
  std::lock_guard<std::mutex> lock(mu_);
  damages_.push_back(Damage{suffix, offset, times});
}

void StorageDouble::Damaged(const std::string& path, uint64_t offset, size_t n, void* dst) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Damage& d : damages_) {
    if (d.times > 0 && d.offset >= offset && d.offset < offset + n &&
        path.size() >= d.suffix.size() &&
        path.compare(path.size() - d.suffix.size(), d.suffix.size(), d.suffix) == 0) {
      static_cast<char*>(dst)[d.offset - offset] ^= 0x20;
      --d.times;
      damaged_.fetch_add(1);
    }
  }
}

void StorageDouble::GateUntilConcurrent(int n, int timeout_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  gate_ = n;
  gate_timeout_ms_ = timeout_ms;
}

std::vector<std::pair<uint64_t, size_t>> StorageDouble::TakeHinted() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(hinted_);
}

void StorageDouble::WaitForHints(uint64_t n) {
  std::unique_lock<std::mutex> lock(mu_);
  hinted_cv_.wait(lock, [&] { return hints_.load() >= n; });
}

void StorageDouble::set_location(const std::string& location) {
  std::lock_guard<std::mutex> lock(mu_);
  location_ = location;
}

void StorageDouble::set_version(const std::string& version) {
  std::lock_guard<std::mutex> lock(mu_);
  version_ = version;
}

AccessHints StorageDouble::last_hints() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hints_seen_;
}

Result<std::unique_ptr<RandomAccessFile>> StorageDouble::OpenForReads(const std::string& path,
                                                                      const Cancel*) {
  SK_ASSIGN_OR_RETURN(auto base, Env::Default()->OpenForReads(path));
  std::lock_guard<std::mutex> lock(mu_);
  return std::unique_ptr<RandomAccessFile>(new File(this, std::move(base), location_, version_));
}

Status StorageDouble::BeforeRead(const std::string& path, uint64_t offset, size_t n) {
  const int now = in_flight_.fetch_add(1) + 1;
  int peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  reads_.fetch_add(1);
  bytes_.fetch_add(n);
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (gate_ > 0 && !gate_opened_) {
      if (++waiting_ >= gate_) {
        gate_opened_ = true;
        cv_.notify_all();
      } else {
        const bool opened = cv_.wait_for(lock, std::chrono::milliseconds(gate_timeout_ms_),
                                         [&] { return gate_opened_.load() || gate_ == 0; });
        if (!opened) {  // never enough together: the gate is gone, unopened, for every read
          gate_ = 0;
          cv_.notify_all();
        }
      }
      --waiting_;
    }
    for (const Fault& f : faults_) {
      const bool file = path.size() >= f.suffix.size() &&
                        path.compare(path.size() - f.suffix.size(), f.suffix.size(), f.suffix) == 0;
      if (file && offset < f.offset + f.n && f.offset < offset + n) {
        return Status::IOError(path + ": injected read error at offset " + std::to_string(offset));
      }
    }
  }
  if (const uint64_t ns = latency_ns_.load(); ns > 0) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
  }
  return Status::OK();
}

void StorageDouble::AfterRead() { in_flight_.fetch_sub(1); }

class WriteFaultEnv::File final : public WritableFile {
 public:
  File(WriteFaultEnv* env, std::unique_ptr<WritableFile> base)
      : env_(env), base_(std::move(base)) {}
  Status Sync() override { return base_->Sync(); }
  Status Close() override { return base_->Close(); }
  const std::string& path() const override { return base_->path(); }

 protected:
  Status AppendBytes(const char* data, size_t n) override {
    SK_RETURN_IF_ERROR(env_->Charge(path(), n));
    return base_->Append(data, n);
  }

 private:
  WriteFaultEnv* env_;
  std::unique_ptr<WritableFile> base_;
};

class WriteFaultEnv::Scratch final : public ScratchFile {
 public:
  Scratch(WriteFaultEnv* env, std::string dir, std::unique_ptr<ScratchFile> base)
      : env_(env), name_(dir + ": scratch file"), base_(std::move(base)) {}
  Status Append(const void* data, size_t n, uint64_t* offset) override {
    SK_RETURN_IF_ERROR(env_->Charge(name_, n));
    return base_->Append(data, n, offset);
  }
  Status Read(uint64_t offset, size_t n, void* dst) const override {
    return base_->Read(offset, n, dst);
  }

 private:
  WriteFaultEnv* env_;
  std::string name_;
  std::unique_ptr<ScratchFile> base_;
};

Result<std::unique_ptr<WritableFile>> WriteFaultEnv::NewWritableFile(const std::string& path) {
  SK_ASSIGN_OR_RETURN(auto base, Env::Default()->NewWritableFile(path));
  return std::unique_ptr<WritableFile>(new File(this, std::move(base)));
}

Result<std::unique_ptr<ScratchFile>> WriteFaultEnv::NewScratchFile(const std::string& dir) {
  SK_ASSIGN_OR_RETURN(auto base, Env::Default()->NewScratchFile(dir));
  return std::unique_ptr<ScratchFile>(new Scratch(this, dir, std::move(base)));
}

Status WriteFaultEnv::Charge(const std::string& path, size_t n) {
  uint64_t used = written_.load();
  do {
    if (n > budget_ || used > budget_ - n) {
      refused_.fetch_add(1);
      return Status::At(Status::Code::kIOError, {path, ""},
                        std::string("write failed: ") + std::strerror(ENOSPC));
    }
  } while (!written_.compare_exchange_weak(used, used + n));
  return Status::OK();
}

}  // namespace shardkit::testing
