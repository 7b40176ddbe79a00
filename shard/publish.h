// Publishing a dataset to object storage (staging one back out is
// shard/stage.h's). PushDataset uploads a dataset directory under an s3:// prefix so
// that no reader ever sees a manifest before every shard it names is there
// whole: each shard is uploaded (one PUT, or a multipart upload; every body
// signed with its SHA-256 and MD5, and the object carrying the shard's
// CRC32C as metadata), the manifest last. A shard already there with the
// same bytes (its size and stored CRC32C; for objects pushed without one,
// an ETag that is the MD5 of the local bytes) is not sent again. Replacing
// another dataset (force) removes the remote manifest first, so an
// interrupted push leaves no manifest at all, never one that names missing
// or different shards; a reader that opened the old manifest meanwhile
// finds each replaced shard's CRC32C is not its manifest's (Dataset::Open).
// Multipart uploads a killed push left under the prefix are aborted first;
// a cancelled push aborts its own.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "storage/env.h"

namespace shardkit {

struct PushOptions {
  bool force = false;  // replace a different dataset under the prefix
  int jobs = 8;        // shards uploaded at once
  // Once true (a signal handler's flag), the push stops: uploads under way
  // are aborted, nothing more is published, and the error is Aborted.
  const std::atomic<bool>* cancel = nullptr;
};

struct PushReport {
  uint64_t shards = 0, uploaded = 0, kept = 0;  // kept: already there, the same bytes
  uint64_t uploads_aborted = 0;                 // unfinished multipart uploads an earlier push left
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

}  // namespace shardkit
