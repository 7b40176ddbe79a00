// IDX parsing with bounded, checked sizes; gzip through zlib.
#include "ingest/idx_file.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "ingest/input_id.h"
#include "ingest/text.h"
#include "shard/shard_format.h"
#include "storage/file_io.h"

namespace shardkit {

uint64_t IdxArray::item_size() const {
  uint64_t n = 1;
  for (size_t i = 1; i < dims.size(); ++i) n *= dims[i];
  return n;
}

namespace {

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// Validates the magic and dimensions; returns the header size and data size.
Status ParseHeader(const uint8_t* p, size_t avail, const std::string& where, uint64_t max_bytes,
                   IdxArray* out, size_t* header_size, uint64_t* data_size) {
  if (avail < 4) return Status::Corruption(where + ": too short for an IDX header");
  if (p[0] != 0 || p[1] != 0) {
    return Status::Corruption(
        where + ": bad IDX magic (first two bytes must be zero; is this an IDX file?)");
  }
  if (p[2] != 0x08) {
    return Status::Unsupported(where + ": IDX data type 0x" + std::to_string(p[2]) +
                               " is not unsigned byte (0x08)");
  }
  const int ndims = p[3];
  if (ndims < 1 || ndims > 4)
    return Status::Corruption(where + ": IDX declares " + std::to_string(ndims) + " dimensions");
  *header_size = 4 + 4 * static_cast<size_t>(ndims);
  if (avail < *header_size) return Status::Corruption(where + ": truncated IDX header");
  uint64_t total = 1;
  out->dims.clear();
  for (int d = 0; d < ndims; ++d) {
    uint32_t v = BigEndian32(p + 4 + 4 * d);
    out->dims.push_back(v);
    if (v == 0 && d > 0)
      return Status::Corruption(where + ": IDX dimension " + std::to_string(d) + " is zero");
    if (__builtin_mul_overflow(total, uint64_t{v}, &total) || total > max_bytes) {
      return Status::Corruption(where + ": IDX header declares more than " +
                                std::to_string(max_bytes) + " bytes");
    }
  }
  *data_size = total;
  return Status::OK();
}

}  // namespace

Result<IdxArray> ParseIdx(std::string_view bytes, const std::string& where) {
  IdxArray a;
  size_t header = 0;
  uint64_t size = 0;
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  SK_RETURN_IF_ERROR(ParseHeader(p, bytes.size(), where, UINT64_MAX / 2, &a, &header, &size));
  if (bytes.size() - header != size) {
    return Status::Corruption(where + ": IDX header declares " + std::to_string(size) +
                              " data bytes, file has " + std::to_string(bytes.size() - header));
  }
  a.data.assign(p + header, p + header + size);
  return a;
}

Result<IdxArray> ReadIdxFile(const std::string& path, uint64_t max_bytes) {
  if (!Env::Default()->FileExists(path)) return Status::NotFound(path + ": no such file");
  SK_RETURN_IF_ERROR(CheckRegularFile(path));
  gzFile gz = gzopen(path.c_str(), "rb");  // reads plain files transparently
  if (gz == nullptr) return Status::IOError(path + ": cannot open");
  gzbuffer(gz, 1 << 20);
  auto close_with = [&](Status s) {
    gzclose(gz);
    return s;
  };
  uint8_t head[20];
  int got = gzread(gz, head, 4);
  if (got < 0) return close_with(Status::Corruption(path + ": gzip data is corrupt"));
  if (got < 4) return close_with(Status::Corruption(path + ": too short for an IDX header"));
  if (head[0] != 0 || head[1] != 0) {
    return close_with(Status::Corruption(
        path + ": bad IDX magic (first two bytes must be zero; is this an IDX file?)"));
  }
  const int ndims = head[3];
  size_t want = 4 + 4 * static_cast<size_t>(ndims >= 1 && ndims <= 4 ? ndims : 0);
  if (want > 4) {
    got = gzread(gz, head + 4, static_cast<unsigned>(want - 4));
    if (got != static_cast<int>(want - 4))
      return close_with(Status::Corruption(path + ": truncated IDX header"));
  }
  IdxArray a;
  size_t header = 0;
  uint64_t size = 0;
  Status s = ParseHeader(head, want, path, max_bytes, &a, &header, &size);
  if (!s.ok()) return close_with(s);
  a.data.resize(size);
  uint64_t done = 0;
  while (done < size) {
    unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(size - done, 1u << 30));
    int n = gzread(gz, a.data.data() + done, chunk);
    if (n < 0) return close_with(Status::Corruption(path + ": gzip data is corrupt"));
    if (n == 0) {
      return close_with(Status::Corruption(path + ": IDX header declares " + std::to_string(size) +
                                           " data bytes, file has " + std::to_string(done)));
    }
    done += static_cast<uint64_t>(n);
  }
  uint8_t extra;
  const int more = gzread(gz, &extra, 1);
  if (more > 0) {
    return close_with(Status::Corruption(path + ": data continues past the " +
                                         std::to_string(size) + " bytes the IDX header declares"));
  }
  // The end of the data must be the end of a whole gzip stream: a stream cut
  // short (its CRC and length trailer missing) has no checksum to catch a
  // damaged byte. zlib says so on this read, or on closing mid-stream.
  int err = Z_OK;
  if (more < 0) gzerror(gz, &err);
  const int closed = gzclose(gz);
  if (err == Z_DATA_ERROR) return Status::Corruption(path + ": gzip data is corrupt");
  if (more < 0 || closed != Z_OK) {
    return Status::Corruption(path +
                              ": gzip data is truncated (the stream ends before its CRC trailer)");
  }
  return a;
}

Result<IdxDataset> ReadIdxDataset(const std::string& images_path, const std::string& labels_path) {
  IdxDataset ds;
  SK_ASSIGN_OR_RETURN(ds.images, ReadIdxFile(images_path));
  SK_ASSIGN_OR_RETURN(ds.labels, ReadIdxFile(labels_path));
  const auto& d = ds.images.dims;
  if (d.size() != 3 && d.size() != 4) {
    return Status::InvalidArgument(
        images_path + ": image IDX must have 3 (N,H,W) or 4 (N,H,W,C) dimensions, has " +
        std::to_string(d.size()));
  }
  if (ds.labels.dims.size() != 1) {
    return Status::InvalidArgument(labels_path + ": label IDX must have 1 dimension, has " +
                                   std::to_string(ds.labels.dims.size()));
  }
  if (ds.labels.dims[0] != d[0]) {
    return Status::InvalidArgument("count mismatch: " + images_path + " holds " +
                                   std::to_string(d[0]) + " images, " + labels_path + " holds " +
                                   std::to_string(ds.labels.dims[0]) + " labels");
  }
  for (size_t k = 1; k < d.size(); ++k) {
    if (d[k] > 65536) {
      return Status::InvalidArgument(images_path + ": IDX dimension " + std::to_string(k) + " is " +
                                     std::to_string(d[k]) + " (at most 65536)");
    }
  }
  if (ds.images.item_size() > format::kMaxRecordSize) {
    return Status::InvalidArgument(images_path + ": an item of " +
                                   std::to_string(ds.images.item_size()) +
                                   " bytes is over the record size limit");
  }
  ds.height = static_cast<int>(d[1]);
  ds.width = static_cast<int>(d[2]);
  ds.channels = d.size() == 4 ? static_cast<int>(d[3]) : 1;
  return ds;
}

namespace {

class IdxSource : public SampleSource {
 public:
  IdxSource(std::string name, std::string labels_path, IdxDataset ds,
            std::vector<std::string> classes, std::vector<std::string> class_names)
      : name_(std::move(name)),
        labels_path_(std::move(labels_path)),
        ds_(std::move(ds)),
        classes_(std::move(classes)),
        class_names_(std::move(class_names)) {}
  std::string name() const override { return name_; }
  RecordSpec spec() const override {
    RecordSpec r;
    r.kind = format::RecordKind::kRawU8;
    r.shape = {ds_.height, ds_.width, ds_.channels};
    r.source_order = true;
    r.records = ds_.count();
    return r;
  }
  Status SetRange(uint64_t first, uint64_t end) override {
    if (first >= end || end > ds_.count()) {
      return Status::InvalidArgument(name_ + ": no items " + std::to_string(first) + ".." +
                                     std::to_string(end) + " (it holds " +
                                     std::to_string(ds_.count()) + ")");
    }
    first_ = first;
    end_ = end;
    return Status::OK();
  }
  Result<Listing> Scan(SampleSink* sink) override {
    const uint64_t n = end_ > 0 ? end_ : ds_.count(), item = ds_.images.item_size();
    char key[32];
    for (uint64_t i = first_; i < n; ++i) {
      std::snprintf(key, sizeof(key), "%08llu", static_cast<unsigned long long>(i));
      Sample s;
      s.key = key;
      s.name = name_ + "[" + std::to_string(i) + "]";
      s.label = ds_.labels.data[i];
      SK_RETURN_IF_ERROR(sink->Add(
          std::move(s),
          std::string(reinterpret_cast<const char*>(ds_.images.data.data() + i * item), item)));
      if ((i & 4095) == 0) sink->Read((i - first_) * item, (n - first_) * item);
    }
    Listing listing;
    listing.classes = classes_;
    return listing;
  }
  // Both files by content: they are read whole.
  Result<std::string> Settings() const override {
    SK_ASSIGN_OR_RETURN(nlohmann::json images, InputIdByContent(name_));
    SK_ASSIGN_OR_RETURN(nlohmann::json labels, InputIdByContent(labels_path_));
    return SettingsText({{"command", "idx"},
                         {"class_names", JoinList(class_names_)},
                         {"images", std::move(images)},
                         {"labels", std::move(labels)}});
  }

 private:
  std::string name_, labels_path_;  // name_: the images' path
  IdxDataset ds_;
  std::vector<std::string> classes_;
  std::vector<std::string> class_names_;  // as given (the classes' names, else none)
  uint64_t first_ = 0, end_ = 0;          // SetRange's; end 0: every item
};

}  // namespace

Result<std::unique_ptr<SampleSource>> OpenIdx(const std::string& images_path,
                                              const std::string& labels_path,
                                              const std::vector<std::string>& class_names) {
  SK_ASSIGN_OR_RETURN(IdxDataset ds, ReadIdxDataset(images_path, labels_path));
  uint8_t max_label = 0;
  for (uint8_t l : ds.labels.data) max_label = std::max(max_label, l);
  SK_ASSIGN_OR_RETURN(auto classes, ClassesFor(max_label, class_names, labels_path));
  return std::unique_ptr<SampleSource>(
      new IdxSource(images_path, labels_path, std::move(ds), std::move(classes), class_names));
}

}  // namespace shardkit
