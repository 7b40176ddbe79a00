// MATLAB .mat files through libmatio: level 5 (plain or compressed
// variables, as MATLAB -v6/-v7 and scipy.io.savemat save them) and 7.3
// (HDF5). A uint8 image array with an integer label vector is a SampleSource
// of raw_u8 records in the file's order, read in slabs; a struct array's
// fields are what the ImageNet devkit's meta.mat holds. Every file passes
// mat_check.h's size walk before libmatio reads it, and whatever libmatio
// would print is an error naming the file and variable instead.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "ingest/source.h"

namespace shardkit {

// Where the item index is among the image array's dimensions (MATLAB's
// order, as `size(X)` prints them). kAuto: the dimension the labels' length
// matches, first or last.
enum class MatLayout {
  kAuto,
  kHWCN,  // H x W x C x N, or H x W x N (SVHN's: the last index is the image)
  kNHWC,  // N x H x W x C, or N x H x W
};
Result<MatLayout> ParseMatLayout(const std::string& name);  // "auto", "HWCN", "NHWC"

struct MatOptions {
  std::string file;
  std::string images, labels;  // variable names
  MatLayout layout = MatLayout::kAuto;
  // The values the file's labels may hold, checked before label_map: a value
  // outside [first_label, last_label] is refused, naming it and its index,
  // then "is outside " + labels_meaning (SVHN's 1..10). last_label <
  // first_label: no such check (the classes below still apply).
  int64_t first_label = 0, last_label = -1;
  std::string labels_meaning;
  // Label values replaced before anything else (SVHN's 10 -> 0).
  std::vector<std::pair<int64_t, int64_t>> label_map;
  // The classes: these names, label i being class_names[i] (a label past
  // them is an error); else "0".."max label".
  std::vector<std::string> class_names;
  // The reading, as a pack's settings name it (their "command"): "mat", or
  // "svhn" (SvhnOptions), whose class names are its own, not given.
  std::string reading = "mat";
};

// "10:0,11:1" -> {{10, 0}, {11, 1}}; a value mapped twice is an error.
Result<std::vector<std::pair<int64_t, int64_t>>> ParseLabelMap(const std::string& text);

// torchvision.datasets.SVHN's reading of train_32x32.mat / test_32x32.mat /
// extra_32x32.mat: X (32 x 32 x 3 x N uint8), y (N x 1), label 10 as 0,
// classes "0".."9". SVHN's labels are 1..10 (10 the digit 0); any other
// value (0, 11, 255, -1) is refused with the value and its index, not
// skipped: the file is then not in SVHN's convention (a 0 may be a digit 0
// of a file relabelled 0..9, or a missing label), so no label in it can be
// trusted to mean SVHN's digit, and skipping would shift record i off the
// file's item i that torchvision's SVHN[i] and --part's ranges count on.
MatOptions SvhnOptions(const std::string& file);

// The file opened and checked (types, ranks, lengths, labels): a source of
// raw_u8 records of shape H x W x C (C = 1 for a rank-3 array), record i
// being image i with pixel (h, w, c) = X(h, w, c, i) in MATLAB's indexing
// (what scipy.io.loadmat gives as X[h, w, c, i]).
Result<std::unique_ptr<SampleSource>> OpenMat(const MatOptions& options);

// One field of one struct element: a char array's text (UTF-8), or a numeric
// array's values as doubles (column-major).
struct MatValue {
  bool is_text = false;
  std::string text;
  std::vector<double> numbers;
};

// The struct array `variable` of the .mat file at `path` (`where` names it in
// messages): for each element, in order, the values of `fields`.
Result<std::vector<std::vector<MatValue>>> ReadMatStructFields(
    const std::string& path, const std::string& where, const std::string& variable,
    const std::vector<std::string>& fields);

// The same from a file's bytes in memory (an archive member).
Result<std::vector<std::vector<MatValue>>> ReadMatStructFieldsFromBytes(
    const std::string& bytes, const std::string& where, const std::string& variable,
    const std::vector<std::string>& fields);

}  // namespace shardkit
