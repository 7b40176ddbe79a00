// Publishing a dataset to object storage, and copying files out of any
// storage. PushDataset uploads a dataset directory under an s3:// prefix so
// that no reader ever sees a manifest before every shard it names is there
// whole: each shard is uploaded (one PUT, or a multipart upload whose parts
// carry their MD5), the manifest last; a shard already there with the same
// bytes (its size and ETag, which S3 derives from the MD5s) is not sent again.
// Replacing another dataset (force) removes the remote manifest first, so an
// interrupted push leaves no manifest at all, never one that names missing or
// different shards.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "storage/env.h"

namespace shardkit {

struct PushOptions {
  bool force = false;  // replace a different dataset under the prefix
  int jobs = 8;        // shards uploaded at once
};

struct PushReport {
  uint64_t shards = 0, uploaded = 0, kept = 0;  // kept: already there, the same bytes
  uint64_t bytes_uploaded = 0, bytes_kept = 0;
  uint64_t stale_removed = 0;  // shards of the replaced dataset the new one does not name
  bool manifest_written = false;
};

// Progress, called from the upload threads one at a time: bytes done of the
// bytes to send, as they go.
using PushProgress = std::function<void(uint64_t done, uint64_t total)>;

// Uploads the dataset in `dir` (a whole one: a part's directory is refused)
// to `url` (s3://BUCKET/PREFIX). A local shard whose bytes are not the
// manifest's (CRC32C) is an error naming it, and nothing of it is published.
Status PushDataset(const std::string& dir, const std::string& url, const PushOptions& options,
                   const PushProgress& progress, PushReport* report);

// Copies the file `from` (a path or a URL: Env::ForPath) to the local file
// `to` (created or truncated); returns its CRC32C. A failed copy removes `to`.
Result<uint32_t> CopyToLocalFile(const std::string& from, const std::string& to);

}  // namespace shardkit
