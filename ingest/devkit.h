// ImageNet's official devkit (ILSVRC2012_devkit_t12.tar.gz): the validation
// ground truth (data/ILSVRC2012_validation_ground_truth.txt, one ILSVRC class
// id per val image, in image order) and the map from those ids to WordNet ids
// (data/meta.mat, a MATLAB file whose struct array `synsets` has the
// fields ILSVRC2012_ID and WNID), read through libmatio.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace shardkit {

// The `synsets` of a meta.mat's bytes: ILSVRC2012_ID -> WNID.
Result<std::map<int, std::string>> ParseMetaMat(const std::string& bytes, const std::string& where);

// Val image file name ("ILSVRC2012_val_00000001.JPEG" -> stem) -> WNID, from a devkit archive.
Result<std::vector<std::pair<std::string, std::string>>> ReadDevkitValLabels(
    const std::string& devkit);

}  // namespace shardkit
