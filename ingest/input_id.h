// How a source's settings (SampleSource::Settings) name an input file: by
// what it holds, not where it is, so that the tasks of an array reading
// staged copies agree. Inside ingest/ only (it speaks nlohmann::json).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace shardkit {

// A file a source reads whole anyway (an IDX file): its size and the CRC32C
// of its bytes as stored (a .gz as compressed). Reads the file.
Result<nlohmann::json> InputIdByContent(const std::string& path);

// A file a source reads only a range of (a part of an HDF5 or .mat file):
// its size and modification time, in nanoseconds. A copy made with cp
// differs; one made with cp -p or rsync -t does not.
Result<nlohmann::json> InputIdByStat(const std::string& path);

// A settings object as text: keys sorted, any bytes of a path replaced,
// never thrown on.
std::string SettingsText(const nlohmann::json& settings);

}  // namespace shardkit
