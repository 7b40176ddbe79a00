// Image trees: a class-folder tree (torchvision's ImageFolder layout) or a flat
// validation folder with labels from a CSV or ImageNet's devkit, read from a
// folder or from an archive of one (tar, tar.gz, zip), and ImageNet's train
// tar of per-class tars. A folder and an archive go through one layout, so an
// archive gives exactly the dataset its extraction gives: the same class
// list, keys, labels, bytes and order, or an error.
//
// The layout's rules, the same for folders and archives:
//  - Hidden entries (a name starting with '.', macOS's __MACOSX) are skipped;
//    symbolic links are unusable members (a folder's: unless follow_links).
//  - A file and a folder of one path: the later wins, as tar -x makes it; a
//    member below a file is an error, as it is for tar -x.
//  - The root is the folder whose subfolders are the classes, as
//    torchvision's ImageFolder takes the folder it is given: SRC itself
//    (an archive: the top of its extraction), or --root. One exception, the
//    wrapper rule: while the root holds exactly one folder and no image,
//    and that folder holds folders but no image of its own, the root moves
//    down into it (so an archive of "train/CLASS/..." packs like "train/",
//    through as many such levels as there are). Images are told by content
//    (a JPEG or PNG); other files (a README) count for nothing here. So the
//    classes are ImageFolder's on the folder named, except where ImageFolder
//    would make a single class whose images all lie in its sub-folders
//    (and no image lies beside it): that cannot be told from a wrapper, and
//    the rule takes it for one; --root . keeps SRC as the root. A class
//    folder holding images and sub-folders (n01/a.JPEG, n01/2019/b.JPEG)
//    is a class, never a wrapper.
//  - Files under the root outside every class folder (beside the class
//    folders; in a flat val folder's sub-folders) are not packed: an image
//    among them is an unusable member (named, counted, fatal under
//    --strict), other files (a README, a synset list) are noted.
//  - A class's images are every file below its folder, walked in sorted
//    order, keyed by their path from the root ("n01440764/x.JPEG").
//  - The same path twice in an archive keeps the last one, as tar -x does,
//    after naming it; a second class tar for one class is refused.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "ingest/source.h"

namespace shardkit {

struct TreeOptions {
  std::string src;                   // a folder, or an archive of one
  std::string val_labels;            // CSV (ImageId,PredictionString): a flat val folder
  std::string devkit;                // ILSVRC2012_devkit_t12.tar.gz: a flat val folder
  std::string root;                  // the folder (relative to SRC) that holds the classes
  std::vector<std::string> classes;  // a fixed class list (--classes-from's), else found
  // A folder's symbolic links are followed (each directory once) rather than
  // skipped as unusable members, as an archive's are.
  bool follow_links = false;
};

// A folder or an archive, by what SRC is; refuses what it cannot read
// (no such file, not a folder or an archive, no permission) naming it.
Result<std::unique_ptr<SampleSource>> OpenTree(const TreeOptions& options);

// LOC_val_solution.csv: ImageId -> synset (the first token of
// PredictionString). A byte-order mark, CRLF and the header are accepted; an
// image listed twice is refused naming it and both lines.
Result<std::vector<std::pair<std::string, std::string>>> ReadValLabels(const std::string& csv_path);

}  // namespace shardkit
