// A build without libcurl: object-storage URLs are refused by name.
#include "storage/remote/node_cache.h"
#include "storage/remote/object_store.h"

namespace shardkit {

Result<Env*> ObjectStoreEnvFor(const std::string& url) {
  return Status::Unsupported(url +
                             ": this shardkit was built without libcurl, so it reads no "
                             "object storage (apt-get install libcurl4-openssl-dev, then "
                             "rebuild)");
}

Result<std::unique_ptr<Env>> NewCachingEnv(Env*, const NodeCacheOptions& options) {
  return Status::Unsupported(options.dir +
                             ": a node cache is for object storage, which this build (without "
                             "libcurl) does not read");
}

Result<uint64_t> NodeCacheBytes(const std::string&) { return uint64_t{0}; }

}  // namespace shardkit
