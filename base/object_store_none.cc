// A build without libcurl: object-storage URLs are refused by name.
#include "base/node_cache.h"
#include "base/object_store.h"

namespace shardkit {

bool IsObjectStoreUrl(const std::string& path) {
  return path.rfind("s3://", 0) == 0 || path.rfind("http://", 0) == 0 ||
         path.rfind("https://", 0) == 0;
}

Result<Env*> Env::ForPath(const std::string& path) {
  if (IsObjectStoreUrl(path)) {
    return Status::Unsupported(path +
                               ": this shardkit was built without libcurl, so it reads no "
                               "object storage (apt-get install libcurl4-openssl-dev, then "
                               "rebuild)");
  }
  return Env::Default();
}

Result<std::unique_ptr<Env>> NewCachingEnv(Env*, const NodeCacheOptions& options) {
  return Status::Unsupported(options.dir +
                             ": a node cache is for object storage, which this build (without "
                             "libcurl) does not read");
}

Result<uint64_t> NodeCacheBytes(const std::string&) { return uint64_t{0}; }

}  // namespace shardkit
