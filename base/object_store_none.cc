// A build without libcurl: object-storage URLs are refused by name.
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

}  // namespace shardkit
