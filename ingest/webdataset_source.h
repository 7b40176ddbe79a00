// WebDataset shards, as image datasets are distributed on model hubs: tar
// files whose members are grouped by key ("000123.jpg", "000123.cls": the
// path up to the first dot of the file name), each group one sample with an
// image (.jpg, .jpeg or .png, in any case) and a class number (.cls,
// decimal text). A key with two images (x.jpg and x.png, x.JPG and x.jpg) or
// two class numbers is refused as a sample: WebDataset gives its user
// whichever the user's decoder names first, so the shard does not say which
// is the sample; neither is packed, and the key and both members are named
// as an unusable member (fatal under --strict). The same member twice in a
// shard keeps the later one, as tar -x does, after naming it.
// Shards are named one by one or by brace patterns
// ("shards-{000000..000123}.tar", "{train,extra}-{0..9}.tar").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "ingest/source.h"

namespace shardkit {

// A pattern's paths in order: {A..B} a numeric range (zero-padded to A's
// width), {x,y} alternatives; more than max_paths is an error.
Result<std::vector<std::string>> ExpandShardPattern(const std::string& pattern,
                                                    size_t max_paths = 1000000);

// Every shard must exist and be a regular file; classes are `class_names`,
// else "0".."max label".
Result<std::unique_ptr<SampleSource>> OpenWebDataset(const std::vector<std::string>& patterns,
                                                     const std::vector<std::string>& class_names);

}  // namespace shardkit
