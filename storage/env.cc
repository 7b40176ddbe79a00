// The storage seam's parts that no backend owns: the defaults of Env and
// RandomAccessFile (the copy of LinkOrCopyFile among them), WritableFile's
// checksum, WriteFileAtomic, FileCrc32c.
#include "storage/env.h"

#include <algorithm>

#include "base/crc32c.h"
#include "storage/file_io.h"

namespace shardkit {

Status RandomAccessFile::View(uint64_t offset, size_t n, std::string_view* out) const {
  return Status::Unsupported(path() + ": no views of this file (not mapped)");
}

namespace {
class CopiedRegion final : public FileRegion {
 public:
  explicit CopiedRegion(std::string data) : data_(std::move(data)) { bytes_ = data_; }

 private:
  std::string data_;
};

Status Cannot(const std::string& path, const char* what) {
  return Status::Unsupported(path + ": this storage cannot " + what);
}
}  // namespace

Result<std::unique_ptr<FileRegion>> RandomAccessFile::MapRegion(uint64_t offset, size_t n) const {
  std::string data(n, '\0');
  SK_RETURN_IF_ERROR(Read(offset, n, data.data()));
  return std::unique_ptr<FileRegion>(new CopiedRegion(std::move(data)));
}

Result<std::string> Env::ReadFile(const std::string& path, uint64_t max_size,
                                  const Cancel* cancel) {
  SK_ASSIGN_OR_RETURN(auto file, OpenForReads(path, cancel));
  if (file->size() > max_size) {
    return Status::At(Status::Code::kInvalidArgument, {path, ""},
                      "file is " + std::to_string(file->size()) +
                          " bytes, more than the limit of " + std::to_string(max_size));
  }
  std::string data(file->size(), '\0');
  SK_RETURN_IF_ERROR(file->Read(0, data.size(), data.data()));
  return data;
}

Result<std::unique_ptr<WritableFile>> Env::NewWritableFile(const std::string& path) {
  return Cannot(path, "write files");
}
Status Env::RenameFile(const std::string& from, const std::string& to) {
  return Cannot(from, "rename files");
}
Status Env::RemoveFile(const std::string& path) { return Cannot(path, "remove files"); }
Status Env::CreateDirs(const std::string& dir) { return Cannot(dir, "create directories"); }
Status Env::SyncDir(const std::string& dir) { return Cannot(dir, "sync directories"); }
Status Env::RemoveDir(const std::string& dir) { return Cannot(dir, "remove directories"); }
Result<std::unique_ptr<ScratchFile>> Env::NewScratchFile(const std::string& dir) {
  return Cannot(dir, "hold scratch files");
}
Result<std::vector<std::string>> Env::ListDir(const std::string& dir) {
  return Cannot(dir, "list directories");
}
Result<std::unique_ptr<DirLock>> Env::LockDir(const std::string& dir, bool, const Cancel*) {
  return Cannot(dir, "lock a directory against other writers");
}

Result<bool> Env::LinkOrCopyFile(const std::string& from, const std::string& to) {
  SK_ASSIGN_OR_RETURN(auto in, OpenForReads(from));
  SK_ASSIGN_OR_RETURN(auto out, NewWritableFile(to));
  Status s = CopyInto(*in, out.get());
  if (!s.ok()) {
    out.reset();
    RemoveFile(to).IgnoreError();
    return s;
  }
  return false;
}

bool IsObjectStoreUrl(const std::string& path) {
  return path.rfind("s3://", 0) == 0 || path.rfind("http://", 0) == 0 ||
         path.rfind("https://", 0) == 0;
}

Status CopyInto(const RandomAccessFile& in, WritableFile* out, size_t chunk) {
  std::vector<char> buf(static_cast<size_t>(std::min<uint64_t>(chunk, in.size())));
  in.WillNeed(chunk, chunk);
  for (uint64_t off = 0; off < in.size(); off += chunk) {
    in.WillNeed(off + 2 * chunk, chunk);
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, in.size() - off));
    SK_RETURN_IF_ERROR(in.Read(off, n, buf.data()));
    SK_RETURN_IF_ERROR(out->Append(buf.data(), n));
  }
  SK_RETURN_IF_ERROR(out->Sync());
  return out->Close();
}

Result<uint32_t> FileCrc32c(Env* env, const std::string& path) {
  SK_ASSIGN_OR_RETURN(auto f, env->OpenForReads(path));
  std::vector<char> buf(static_cast<size_t>(std::min<uint64_t>(4 << 20, f->size())));
  uint32_t crc = 0;
  for (uint64_t off = 0; off < f->size();) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), f->size() - off));
    SK_RETURN_IF_ERROR(f->Read(off, n, buf.data()));
    crc = crc32c::Extend(crc, buf.data(), n);
    off += n;
  }
  return crc;
}

Status WritableFile::Append(const void* data, size_t n) {
  crc_ = crc32c::Extend(crc_, data, n);
  size_ += n;
  return AppendBytes(static_cast<const char*>(data), n);
}

Result<std::unique_ptr<WritableFile>> WritableFile::Create(const std::string& path) {
  return Env::Default()->NewWritableFile(path);
}

Result<std::unique_ptr<DirLock>> DirLock::Acquire(const std::string& dir) {
  return Env::Default()->LockDir(dir);
}

Status WriteFileAtomic(Env* env, const std::string& path, std::string_view data) {
  if (env->remote()) {  // an object appears only once whole
    SK_ASSIGN_OR_RETURN(auto f, env->NewWritableFile(path));
    SK_RETURN_IF_ERROR(f->Append(data));
    return f->Close();
  }
  const std::string tmp = path + ".tmp";
  // A stale PATH.tmp goes first: creating over it would follow it if it were
  // a link (or write into the file it is a hard link of), which may be a
  // dataset's shard.
  if (Status s = env->RemoveFile(tmp); !s.ok() && !s.IsNotFound()) return s;
  {
    SK_ASSIGN_OR_RETURN(auto f, env->NewWritableFile(tmp));
    Status s = f->Append(data);
    if (s.ok()) s = f->Sync();
    if (s.ok()) s = f->Close();
    if (!s.ok()) {
      env->RemoveFile(tmp).IgnoreError();
      return s;
    }
  }
  if (Status s = env->RenameFile(tmp, path); !s.ok()) {
    env->RemoveFile(tmp).IgnoreError();
    return s;
  }
  std::string dir = ".";
  if (auto slash = path.rfind('/'); slash != std::string::npos) dir = path.substr(0, slash + 1);
  return env->SyncDir(dir);
}

}  // namespace shardkit
