// A source's inputs as its settings name them: by content or by stat.
#include "ingest/input_id.h"

#include <sys/stat.h>

#include "shard/manifest.h"
#include "storage/file_io.h"

namespace shardkit {

Result<nlohmann::json> InputIdByContent(const std::string& path) {
  SK_ASSIGN_OR_RETURN(const uint64_t bytes, FileSize(path));
  SK_ASSIGN_OR_RETURN(const uint32_t crc, FileCrc32c(Env::Default(), path));
  return nlohmann::json{{"bytes", bytes}, {"crc32c", Crc32cHex(crc)}};
}

Result<nlohmann::json> InputIdByStat(const std::string& path) {
  SK_ASSIGN_OR_RETURN(const uint64_t bytes, FileSize(path));
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::IOError(path + ": cannot stat");
  return nlohmann::json{{"bytes", bytes},
                        {"mtime_ns", int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec}};
}

std::string SettingsText(const nlohmann::json& settings) {
  return settings.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace shardkit
