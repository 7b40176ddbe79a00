// HDF5 import (chunked reads with hyperslabs) and export.
#include "tools/pack/hdf5_pack.h"

#include <hdf5.h>

#include <algorithm>
#include <memory>

#include "shard/shard.h"
#include "tools/common/progress.h"

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
  *out = d;
  return Status::OK();
}

}  // namespace

Status PackHdf5(const Hdf5PackOptions& o) {
  QuietHdf5();
  if (!FileExists(o.file)) return Status::NotFound(o.file + ": no such file");
  SK_RETURN_IF_ERROR(CheckRegularFile(o.file));
  if (H5Fis_hdf5(o.file.c_str()) <= 0)
    return Status::InvalidArgument(o.file + ": not an HDF5 file");
  H5Handle file(H5Fopen(o.file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (file.id < 0) return Status::IOError(o.file + ": cannot open as HDF5");
  hid_t img_id = -1, lab_id = -1;
  SK_RETURN_IF_ERROR(OpenDataset(file.id, o.file, o.images, &img_id));
  H5Handle img(img_id, H5Dclose);
  SK_RETURN_IF_ERROR(OpenDataset(file.id, o.file, o.labels, &lab_id));
  H5Handle lab(lab_id, H5Dclose);

  const std::string where_i = o.file + ":" + o.images, where_l = o.file + ":" + o.labels;
  H5Handle itype(H5Dget_type(img.id), H5Tclose);
  if (H5Tget_class(itype.id) != H5T_INTEGER || H5Tget_size(itype.id) != 1 ||
      H5Tget_sign(itype.id) != H5T_SGN_NONE) {
    return Status::InvalidArgument(where_i + ": images must be uint8");
  }
  H5Handle ltype(H5Dget_type(lab.id), H5Tclose);
  if (H5Tget_class(ltype.id) != H5T_INTEGER)
    return Status::InvalidArgument(where_l + ": labels must be integers");
  H5Handle ispace(H5Dget_space(img.id), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(ispace.id);
  if (rank != 3 && rank != 4) {
    return Status::InvalidArgument(where_i +
                                   ": images must have rank 3 (N,H,W) or 4 (N,H,W,C), has rank " +
                                   std::to_string(rank));
  }
  hsize_t dims[4] = {0, 0, 0, 1};
  H5Sget_simple_extent_dims(ispace.id, dims, nullptr);
  H5Handle lspace(H5Dget_space(lab.id), H5Sclose);
  if (H5Sget_simple_extent_ndims(lspace.id) != 1)
    return Status::InvalidArgument(where_l + ": labels must have rank 1");
  hsize_t nlab = 0;
  H5Sget_simple_extent_dims(lspace.id, &nlab, nullptr);
  if (nlab != dims[0]) {
    return Status::InvalidArgument("length mismatch: " + where_i + " has " +
                                   std::to_string(dims[0]) + " items, " + where_l + " has " +
                                   std::to_string(nlab));
  }
  const uint64_t n = dims[0];
  const uint64_t item = dims[1] * dims[2] * dims[3];
  if (n == 0) return Status::InvalidArgument(where_i + ": no items");
  if (item == 0 || item > format::kMaxRecordSize || dims[1] > 65536 || dims[2] > 65536 ||
      dims[3] > 65536) {
    return Status::InvalidArgument(where_i + ": item shape out of range");
  }
  // Labels are small (N ints): read them whole, converted by HDF5 to int64.
  std::vector<int64_t> labels(n);
  if (H5Dread(lab.id, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()) < 0) {
    return Status::Corruption(where_l + ": read failed");
  }
  int64_t max_label = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] > INT32_MAX) {
      return Status::InvalidArgument(where_l + ": label " + std::to_string(labels[i]) +
                                     " at index " + std::to_string(i) + " out of range");
    }
    max_label = std::max(max_label, labels[i]);
  }
  std::vector<std::string> classes = o.class_names;
  if (!classes.empty() && static_cast<int64_t>(classes.size()) <= max_label) {
    return Status::InvalidArgument("--class-names lists " + std::to_string(classes.size()) +
                                   " classes but labels go up to " + std::to_string(max_label));
  }
  if (classes.empty()) {
    // Class names default to the label numbers; refuse to invent millions.
    constexpr int64_t kMaxDefaultClasses = 1 << 20;
    if (max_label >= kMaxDefaultClasses) {
      return Status::InvalidArgument(where_l + ": labels go up to " + std::to_string(max_label) +
                                     "; pass --class-names, or relabel to 0..classes-1");
    }
    for (int64_t c = 0; c <= max_label; ++c) classes.push_back(std::to_string(c));
  }

  DatasetWriterOptions wo;
  wo.shard_size = o.shard_size;
  wo.overwrite = o.force;
  wo.shard.compression = CompressionMode::kZstd;
  wo.shard.kind = format::RecordKind::kRawU8;
  wo.num_classes = classes.size();
  wo.raw_record_size = item;
  SK_ASSIGN_OR_RETURN(auto writer, DatasetWriter::Create(o.out, wo));
  // Slabs of about 64 MiB.
  const uint64_t slab = std::max<uint64_t>(1, (64ull << 20) / item);
  std::vector<uint8_t> buf(std::min(slab, n) * item);
  Progress progress("pack hdf5", n, "records");
  char key[32];
  for (uint64_t first = 0; first < n; first += slab) {
    const uint64_t count = std::min(slab, n - first);
    hsize_t start[4] = {first, 0, 0, 0};
    hsize_t cnt[4] = {count, dims[1], dims[2], dims[3]};
    H5Handle fspace(H5Dget_space(img.id), H5Sclose);
    H5Sselect_hyperslab(fspace.id, H5S_SELECT_SET, start, nullptr, cnt, nullptr);
    H5Handle mspace(H5Screate_simple(rank, cnt, nullptr), H5Sclose);
    if (H5Dread(img.id, H5T_NATIVE_UINT8, mspace.id, fspace.id, H5P_DEFAULT, buf.data()) < 0) {
      return Status::Corruption(where_i + ": read of items " + std::to_string(first) + ".." +
                                std::to_string(first + count) + " failed");
    }
    for (uint64_t i = 0; i < count; ++i) {
      std::snprintf(key, sizeof(key), "%08llu", static_cast<unsigned long long>(first + i));
      SK_RETURN_IF_ERROR(
          writer->Add(std::string_view(reinterpret_cast<const char*>(buf.data() + i * item), item),
                      static_cast<int32_t>(labels[first + i]), key));
    }
    if (!o.quiet) progress.Update(first + count, (first + count) * item);
  }
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {static_cast<int64_t>(dims[1]), static_cast<int64_t>(dims[2]),
                    static_cast<int64_t>(dims[3])};
  m.classes = classes;
  m.created_by = o.created_by.empty() ? "{}" : o.created_by;
  SK_RETURN_IF_ERROR(writer->Finish(m));
  if (!o.quiet) {
    progress.Finish();
    std::printf("packed %llu records (%llux%llux%llu) from %s into %s\n", (unsigned long long)n,
                (unsigned long long)dims[1], (unsigned long long)dims[2],
                (unsigned long long)dims[3], o.file.c_str(), o.out.c_str());
  }
  return Status::OK();
}

Result<std::unique_ptr<Hdf5ImageWriter>> Hdf5ImageWriter::Create(const std::string& path,
                                                                 uint64_t count, int height,
                                                                 int width) {
  QuietHdf5();
  auto w = std::unique_ptr<Hdf5ImageWriter>(new Hdf5ImageWriter());
  w->path_ = path;
  w->height_ = height;
  w->width_ = width;
  const std::string tmp = path + ".tmp";
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
    RemoveFile(path_ + ".tmp").IgnoreError();  // not closed: incomplete
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
    RemoveFile(path_ + ".tmp").IgnoreError();
    return Status::IOError(path_ + ".tmp: closing the HDF5 file failed");
  }
  return RenameFile(path_ + ".tmp", path_);
}

}  // namespace shardkit
