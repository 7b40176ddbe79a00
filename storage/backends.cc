// Env::ForPath: the backend that reads a path, POSIX or object storage (the
// one place that knows both).
#include "storage/env.h"
#include "storage/remote/object_store.h"

namespace shardkit {

Result<Env*> Env::ForPath(const std::string& path) {
  if (IsObjectStoreUrl(path)) return ObjectStoreEnvFor(path);
  return Env::Default();
}

}  // namespace shardkit
