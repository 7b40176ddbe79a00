// HDF5 import (a SampleSource reading hyperslabs) and export.
#include "ingest/hdf5.h"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "ingest/input_id.h"
#include "ingest/text.h"
#include "shard/shard.h"
#include "storage/output_file.h"

namespace shardkit {
namespace {

// Closes an HDF5 handle with the right function when it leaves scope.
struct H5Handle {
  hid_t id = -1;
  herr_t (*close)(hid_t) = nullptr;
  H5Handle(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  ~H5Handle() {
    if (id >= 0 && close) close(id);
  }
  H5Handle(const H5Handle&) = delete;
};

void QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

Status OpenDataset(hid_t file, const std::string& path, const std::string& name, hid_t* out) {
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0) {
    return Status::NotFound(path + ": no dataset '" + name + "'");
  }
  hid_t d = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  if (d < 0) return Status::InvalidArgument(path + ": '" + name + "' is not a dataset");
  if (Status s = CheckStoredInFile(d, path + ":" + name); !s.ok()) {
    H5Dclose(d);
    return s;
  }
  *out = d;
  return Status::OK();
}

}  // namespace

Status CheckStoredInFile(int64_t dataset, const std::string& where) {
  H5Handle plist(H5Dget_create_plist(dataset), H5Pclose);
  if (plist.id < 0) return Status::Corruption(where + ": its storage properties cannot be read");
  if (H5Pget_layout(plist.id) == H5D_VIRTUAL) {
    return Status::Unsupported(where +
                               ": a virtual dataset (its data lives in other files; not read: "
                               "h5repack it into one file)");
  }
  if (H5Pget_external_count(plist.id) != 0) {
    return Status::Unsupported(where +
                               ": stored in external raw files (not read: h5repack it into one "
                               "file)");
  }
  return Status::OK();
}

namespace {

// The file's arrays, opened and checked; items streamed in slabs of ~64 MiB.
class Hdf5Source : public SampleSource {
 public:
  explicit Hdf5Source(const Hdf5Options& o) : o_(o) {}
  Status Open();
  std::string name() const override { return o_.file; }
  RecordSpec spec() const override {
    RecordSpec r;
    r.kind = format::RecordKind::kRawU8;
    r.shape = {static_cast<int64_t>(dims_[1]), static_cast<int64_t>(dims_[2]),
               static_cast<int64_t>(dims_[3])};
    r.source_order = true;
    r.records = dims_[0];
    return r;
  }
  Status SetRange(uint64_t first, uint64_t end) override {
    if (first >= end || end > dims_[0]) {
      return Status::InvalidArgument(o_.file + ": no items " + std::to_string(first) + ".." +
                                     std::to_string(end) + " (it holds " +
                                     std::to_string(dims_[0]) + ")");
    }
    first_ = first;
    end_ = end;
    return Status::OK();
  }
  Result<Listing> Scan(SampleSink* sink) override;
  // The file by size and modification time: a part reads only its range.
  Result<std::string> Settings() const override {
    SK_ASSIGN_OR_RETURN(nlohmann::json file, InputIdByStat(o_.file));
    return SettingsText({{"command", "hdf5"},
                         {"class_names", JoinList(o_.class_names)},
                         {"file", std::move(file)},
                         {"images", o_.images},
                         {"labels", o_.labels}});
  }

 private:
  Hdf5Options o_;
  std::unique_ptr<H5Handle> file_, img_;
  int rank_ = 0;
  hsize_t dims_[4] = {0, 0, 0, 1};
  std::vector<int64_t> labels_;
  std::vector<std::string> classes_;
  uint64_t first_ = 0, end_ = 0;  // SetRange's; end 0: every item
};

Status Hdf5Source::Open() {
  QuietHdf5();
  SK_RETURN_IF_ERROR(CheckRegularFile(o_.file));
  if (::access(o_.file.c_str(), R_OK) != 0) {
    return Status::IOError(o_.file + ": cannot open: " + std::strerror(errno));
  }
  if (H5Fis_hdf5(o_.file.c_str()) <= 0)
    return Status::InvalidArgument(o_.file + ": not an HDF5 file");
  file_ =
      std::make_unique<H5Handle>(H5Fopen(o_.file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (file_->id < 0) return Status::IOError(o_.file + ": cannot open as HDF5");
  hid_t img_id = -1, lab_id = -1;
  SK_RETURN_IF_ERROR(OpenDataset(file_->id, o_.file, o_.images, &img_id));
  img_ = std::make_unique<H5Handle>(img_id, H5Dclose);
  SK_RETURN_IF_ERROR(OpenDataset(file_->id, o_.file, o_.labels, &lab_id));
  H5Handle lab(lab_id, H5Dclose);

  const std::string where_i = o_.file + ":" + o_.images, where_l = o_.file + ":" + o_.labels;
  H5Handle itype(H5Dget_type(img_->id), H5Tclose);
  if (H5Tget_class(itype.id) != H5T_INTEGER || H5Tget_size(itype.id) != 1 ||
      H5Tget_sign(itype.id) != H5T_SGN_NONE) {
    return Status::InvalidArgument(where_i + ": images must be uint8");
  }
  H5Handle ltype(H5Dget_type(lab.id), H5Tclose);
  if (H5Tget_class(ltype.id) != H5T_INTEGER)
    return Status::InvalidArgument(where_l + ": labels must be integers");
  H5Handle ispace(H5Dget_space(img_->id), H5Sclose);
  rank_ = H5Sget_simple_extent_ndims(ispace.id);
  if (rank_ != 3 && rank_ != 4) {
    return Status::InvalidArgument(where_i +
                                   ": images must have rank 3 (N,H,W) or 4 (N,H,W,C), has rank " +
                                   std::to_string(rank_));
  }
  H5Sget_simple_extent_dims(ispace.id, dims_, nullptr);
  H5Handle lspace(H5Dget_space(lab.id), H5Sclose);
  if (H5Sget_simple_extent_ndims(lspace.id) != 1)
    return Status::InvalidArgument(where_l + ": labels must have rank 1");
  hsize_t nlab = 0;
  H5Sget_simple_extent_dims(lspace.id, &nlab, nullptr);
  if (nlab != dims_[0]) {
    return Status::InvalidArgument("length mismatch: " + where_i + " has " +
                                   std::to_string(dims_[0]) + " items, " + where_l + " has " +
                                   std::to_string(nlab));
  }
  const uint64_t n = dims_[0];
  const uint64_t item = dims_[1] * dims_[2] * dims_[3];
  if (n == 0) return Status::InvalidArgument(where_i + ": no items");
  if (item == 0 || item > format::kMaxRecordSize || dims_[1] > 65536 || dims_[2] > 65536 ||
      dims_[3] > 65536) {
    return Status::InvalidArgument(where_i + ": item shape out of range");
  }
  // Labels are small (N ints): read them whole, converted by HDF5 to int64.
  labels_.resize(n);
  if (H5Dread(lab.id, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels_.data()) < 0) {
    return Status::Corruption(where_l + ": read failed");
  }
  int64_t max_label = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if (labels_[i] < 0 || labels_[i] > INT32_MAX) {
      return Status::InvalidArgument(where_l + ": label " + std::to_string(labels_[i]) +
                                     " at index " + std::to_string(i) + " out of range");
    }
    max_label = std::max(max_label, labels_[i]);
  }
  SK_ASSIGN_OR_RETURN(classes_, ClassesFor(max_label, o_.class_names, where_l));
  return Status::OK();
}

Result<Listing> Hdf5Source::Scan(SampleSink* sink) {
  const std::string where_i = o_.file + ":" + o_.images;
  const uint64_t n = end_ > 0 ? end_ : dims_[0], item = dims_[1] * dims_[2] * dims_[3];
  const uint64_t slab = std::max<uint64_t>(1, (64ull << 20) / item);
  std::vector<uint8_t> buf(std::min(slab, n - first_) * item);
  char key[32];
  for (uint64_t first = first_; first < n; first += slab) {
    const uint64_t count = std::min(slab, n - first);
    hsize_t start[4] = {first, 0, 0, 0};
    hsize_t cnt[4] = {count, dims_[1], dims_[2], dims_[3]};
    H5Handle fspace(H5Dget_space(img_->id), H5Sclose);
    H5Sselect_hyperslab(fspace.id, H5S_SELECT_SET, start, nullptr, cnt, nullptr);
    H5Handle mspace(H5Screate_simple(rank_, cnt, nullptr), H5Sclose);
    if (H5Dread(img_->id, H5T_NATIVE_UINT8, mspace.id, fspace.id, H5P_DEFAULT, buf.data()) < 0) {
      return Status::Corruption(where_i + ": read of items " + std::to_string(first) + ".." +
                                std::to_string(first + count) + " failed");
    }
    for (uint64_t i = 0; i < count; ++i) {
      std::snprintf(key, sizeof(key), "%08llu", static_cast<unsigned long long>(first + i));
      Sample s;
      s.key = key;
      s.name = where_i + "[" + std::to_string(first + i) + "]";
      s.label = static_cast<int32_t>(labels_[first + i]);
      SK_RETURN_IF_ERROR(sink->Add(
          std::move(s), std::string(reinterpret_cast<const char*>(buf.data() + i * item), item)));
    }
    sink->Read((first + count - first_) * item, (n - first_) * item);
  }
  Listing listing;
  listing.classes = classes_;
  return listing;
}

}  // namespace

Result<std::unique_ptr<SampleSource>> OpenHdf5(const Hdf5Options& options) {
  auto source = std::make_unique<Hdf5Source>(options);
  SK_RETURN_IF_ERROR(source->Open());
  return std::unique_ptr<SampleSource>(std::move(source));
}

Result<std::unique_ptr<Hdf5ImageWriter>> Hdf5ImageWriter::Create(const std::string& path,
                                                                 uint64_t count, int height,
                                                                 int width) {
  QuietHdf5();
  SK_ASSIGN_OR_RETURN(const std::string target, ResolveRegularOutput(path));
  auto w = std::unique_ptr<Hdf5ImageWriter>(new Hdf5ImageWriter());
  w->path_ = target;
  w->height_ = height;
  w->width_ = width;
  const std::string tmp = target + ".tmp";
  // A stale temporary goes first: H5F_ACC_TRUNC would follow a link (or a
  // hard link) into whatever file it names.
  SK_RETURN_IF_ERROR(Env::Default()->RemoveFile(tmp));
  w->file_ = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (w->file_ < 0) return Status::IOError(tmp + ": cannot create HDF5 file");
  hsize_t idims[3] = {count, hsize_t(height), hsize_t(width)};
  hsize_t ichunk[3] = {std::min<hsize_t>(std::max<hsize_t>(count, 1), 1024), hsize_t(height),
                       hsize_t(width)};
  H5Handle ispace(H5Screate_simple(3, idims, nullptr), H5Sclose);
  H5Handle iprops(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_chunk(iprops.id, 3, ichunk);
  H5Pset_deflate(iprops.id, 4);
  w->images_ =
      H5Dcreate2(w->file_, "/images", H5T_STD_U8LE, ispace.id, H5P_DEFAULT, iprops.id, H5P_DEFAULT);
  hsize_t ldims[1] = {count};
  hsize_t lchunk[1] = {std::min<hsize_t>(std::max<hsize_t>(count, 1), 65536)};
  H5Handle lspace(H5Screate_simple(1, ldims, nullptr), H5Sclose);
  H5Handle lprops(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_chunk(lprops.id, 1, lchunk);
  H5Pset_deflate(lprops.id, 4);
  w->labels_ = H5Dcreate2(w->file_, "/labels", H5T_STD_I32LE, lspace.id, H5P_DEFAULT, lprops.id,
                          H5P_DEFAULT);
  if (w->images_ < 0 || w->labels_ < 0) return Status::IOError(tmp + ": cannot create datasets");
  return w;
}

Hdf5ImageWriter::~Hdf5ImageWriter() {
  if (images_ >= 0) H5Dclose(images_);
  if (labels_ >= 0) H5Dclose(labels_);
  if (file_ >= 0) {
    H5Fclose(file_);
    Env::Default()->RemoveFile(path_ + ".tmp").IgnoreError();  // not closed: incomplete
  }
}

Status Hdf5ImageWriter::Write(uint64_t first, uint64_t n, const uint8_t* images,
                              const int32_t* labels) {
  hsize_t start[3] = {first, 0, 0};
  hsize_t cnt[3] = {n, hsize_t(height_), hsize_t(width_)};
  H5Handle fspace(H5Dget_space(images_), H5Sclose);
  H5Sselect_hyperslab(fspace.id, H5S_SELECT_SET, start, nullptr, cnt, nullptr);
  H5Handle mspace(H5Screate_simple(3, cnt, nullptr), H5Sclose);
  if (H5Dwrite(images_, H5T_NATIVE_UINT8, mspace.id, fspace.id, H5P_DEFAULT, images) < 0) {
    return Status::IOError(path_ + ".tmp: writing images failed");
  }
  H5Handle lfspace(H5Dget_space(labels_), H5Sclose);
  H5Sselect_hyperslab(lfspace.id, H5S_SELECT_SET, start, nullptr, cnt, nullptr);
  H5Handle lmspace(H5Screate_simple(1, cnt, nullptr), H5Sclose);
  if (H5Dwrite(labels_, H5T_NATIVE_INT32, lmspace.id, lfspace.id, H5P_DEFAULT, labels) < 0) {
    return Status::IOError(path_ + ".tmp: writing labels failed");
  }
  return Status::OK();
}

Status Hdf5ImageWriter::Close() {
  H5Dclose(images_);
  H5Dclose(labels_);
  images_ = labels_ = -1;
  herr_t rc = H5Fclose(file_);
  file_ = -1;
  if (rc < 0) {
    Env::Default()->RemoveFile(path_ + ".tmp").IgnoreError();
    return Status::IOError(path_ + ".tmp: closing the HDF5 file failed");
  }
  return Env::Default()->RenameFile(path_ + ".tmp", path_);
}

}  // namespace shardkit
