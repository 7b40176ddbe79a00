// SampleSource: one way in for every dataset shardkit packs. A source answers
// the same four questions for a class-folder tree, an archive of one,
// ImageNet's tarballs, WebDataset shards, IDX and HDF5 alike: what are the
// samples, their keys, their labels (and the class list), and their bytes.
// The Packer (packer.h) does everything else, once for all of them.
//
// A source lists its samples in its own order (a tree: the order a walk of
// sorted folders visits them) and hands bytes over in one of two ways:
//  - streamed, as a sequential read goes by (archives, IDX, HDF5): through the
//    SampleSink, which prepares and keeps them;
//  - on request (a folder's files): SampleSource::Read, from any thread.
// Every member a source cannot use (an unsafe path, a link, an oversized or
// undecodable member, a member without a label) goes to SampleSink::Unusable
// by name; the sink decides whether that fails the pack (--strict).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "shard/shard_format.h"

namespace shardkit {

// Why a member is not packed. Each reason is counted in the summary.
enum class Unusable {
  kBadImage,     // not a JPEG/PNG the decoder accepts, or unreadable
  kUnsafePath,   // ".." in an archive's path; an absolute name among class tars
  kLink,         // a symbolic or hard link, a device, a FIFO in an archive
  kTooBig,       // over the per-member size limit
  kBadInnerTar,  // a class tar that cannot be read to its end
  kBadName,      // a name too long or not decodable; a class name not UTF-8
  kNoLabel,      // no label for it (val CSV, devkit, WebDataset .cls)
  kDuplicate,    // a member given twice (the last one is kept, as tar -x does); a
                 // WebDataset key with two images or two class numbers (neither kept)
  kOutsideList,  // a class folder that --classes-from does not list
  kEmptyClass,   // a class folder with no image
  // Where the layout has no place for it: an image beside the class folders
  // or below a flat val folder's; a member of a tar of class tars that is
  // not a class tar.
  kOutsideLayout,
  kCount
};
const char* UnusableName(Unusable why);

// One sample as its source lists it.
struct Sample {
  std::string key;   // unique within the dataset (bytes, as the source names it)
  std::string name;  // where it comes from, for messages ("SRC:member")
  int32_t label = -1;
  int64_t held = -1;  // SampleSink::Hold's handle; -1: the source reads it (Read)
  uint64_t ref = 0;   // the source's own handle for Read
  // For a sample the source reads (held < 0): what it knows of the bytes
  // before reading them (a file's size, times and inode, mixed), so that a
  // killed pack is resumed only over the same files; 0: unknown.
  uint64_t stamp = 0;
};

struct Listing {
  std::vector<std::string> classes;
  std::vector<Sample> samples;  // the source's order; Added samples come before these
};

// What a record of the dataset is: a JPEG (every image is validated and
// converted by image/prepare) or a fixed-shape uint8 array stored as is.
struct RecordSpec {
  format::RecordKind kind = format::RecordKind::kJpeg;
  std::vector<int64_t> shape;  // raw: H, W, C
  // Keep the source's order (record i is item i of an IDX or HDF5 file)
  // rather than the seeded shuffle that spreads every class over every shard.
  bool source_order = false;
  // How many records the source holds, when it knows before Scan (IDX,
  // HDF5: fixed-size items, none skipped); 0 when only Scan can tell.
  uint64_t records = 0;
};

class SampleSink {
 public:
  virtual ~SampleSink() = default;
  // A sample complete as it streams by (an IDX item, a WebDataset group).
  virtual Status Add(Sample sample, std::string bytes) = 0;
  // A member's bytes before its source knows its key and label (a file of a
  // tree inside an archive): prepared now and kept until the listing names
  // it. Returns the handle the listing puts in Sample::held.
  virtual Result<int64_t> Hold(const std::string& name, std::string bytes) = 0;
  // A member that is not packed, named and counted. Under --strict this
  // returns the error the source must return; otherwise OK.
  virtual Status Skip(const std::string& name, const std::string& why, Unusable kind) = 0;
  // A note for the user that is no problem (files beside the class folders).
  virtual void Note(const std::string& message) = 0;
  // Bytes of the source read so far, of `total` (0: unknown), for progress.
  virtual void Read(uint64_t done, uint64_t total) = 0;
  // Set once the user interrupted the pack: the source stops and returns it.
  virtual Status Interrupted() const = 0;
};

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  // The source as the user named it, for messages.
  virtual std::string name() const = 0;
  virtual RecordSpec spec() const = 0;
  // Lists the samples, streaming bytes through `sink` on the way.
  virtual Result<Listing> Scan(SampleSink* sink) = 0;
  // Refuses an OUT the pack would read from (inside a folder source).
  virtual Status CheckOutput(const std::string& /*out*/) const { return Status::OK(); }
  // The bytes of a listed sample that was not streamed (held < 0), at most
  // max_bytes. Thread-safe.
  virtual Status Read(const Sample& sample, uint64_t max_bytes, std::string* bytes) const;
  // Makes Scan list only items [first, end) of the source's order (a part
  // of a dataset prepared in pieces), keyed and labelled as in the whole.
  // Sources that know their record count up front implement it; others
  // return Unsupported.
  virtual Status SetRange(uint64_t first, uint64_t end);
  // What decides the bytes of this source's records besides the Packer's
  // options: a JSON object (keys sorted, so the text is canonical) naming
  // the reading ("command") and its inputs by what they hold, with the
  // options the source was opened with, never its threads. An input it reads
  // whole is named by content (size and CRC32C), one it reads only a range
  // of by size and modification time (a copy made with cp differs), one of
  // images by path (the Packer's plan covers every record's bytes). "{}"
  // (the default): nothing identifies the source, so a pack of it is never
  // resumed. PackSettings (packer.h) makes a pack's settings of it.
  virtual Result<std::string> Settings() const;
};

}  // namespace shardkit
