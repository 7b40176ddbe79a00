// PackImageNet: an ImageNet-layout folder (class folders, or a flat folder plus
// a LOC_val_solution.csv) into a JPEG dataset. Files are recognised by
// content; CMYK JPEGs and PNGs are converted to RGB JPEG so the loader can
// decode every record; corrupt files are reported and counted.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "image/prepare.h"  // PrepareImage: what the packer does to each file

namespace shardkit {

// SRC is a class-folder tree, or an archive (archive_source.h): ImageNet's
// ILSVRC2012_img_train.tar (a tar of per-class tars), ILSVRC2012_img_val.tar
// (flat, with --val-labels or --devkit), or a tar/tar.gz/zip of a tree. An
// archive gives exactly the dataset its extracted tree would: the same
// records, keys, labels, class list and seeded order. It is read once,
// sequentially; prepared records go to a spill file in OUT (removed at the
// end), then into shards in the seeded order.
struct ImageNetPackOptions {
  std::string src, out;
  std::string val_labels;    // CSV (ImageId,PredictionString); empty: class-folder layout
  std::string devkit;        // ILSVRC2012_devkit_t12.tar.gz: val labels from its ground truth
  std::string archive_root;  // an archive's folder that holds the class folders (else found)
  std::string classes_from;  // a dataset dir whose class list to reuse (e.g. train for val)
  uint64_t shard_size = 256ull << 20;
  int resize_short = 0;  // 0: keep original bytes
  int quality = 90;      // for re-encoded images
  int threads = 0;       // 0: all cores
  uint64_t seed = 0;
  bool strict = false;     // any bad file or empty class is fatal
  bool force = false;      // replace an existing dataset
  std::string created_by;  // JSON for the manifest
};

struct ImageNetPackSummary {
  uint64_t files_seen = 0, packed = 0, bad = 0, converted_cmyk = 0, converted_png = 0,
           reencoded = 0, empty_classes = 0, classes = 0, shards = 0;
  // Archive members named and skipped: unsafe paths, links and special
  // files, members over the size limit, unreadable inner tars.
  uint64_t unsafe_members = 0, link_members = 0, oversized_members = 0, bad_inner_tars = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
  double seconds = 0;
};

// Problems (bad files, empty class folders) go to `report` as they are found.
Status PackImageNet(const ImageNetPackOptions& options,
                    const std::function<void(const std::string&)>& report,
                    ImageNetPackSummary* summary);

// Parses LOC_val_solution.csv: ImageId -> synset (the first token of PredictionString).
Result<std::vector<std::pair<std::string, std::string>>> ReadValLabels(const std::string& csv_path);

}  // namespace shardkit
