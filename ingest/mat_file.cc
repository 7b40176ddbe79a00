// libmatio behind Status: its log captured per call, every file size-checked
// first (mat_check.h); the image source reads slabs of items and lays each
// out as H x W x C rows; the struct reader serves the devkit.
#include "ingest/mat_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "ingest/input_id.h"
#include "ingest/mat_check.h"
#include "ingest/text.h"
#include "shard/shard_format.h"
#include "storage/file_io.h"

#ifdef SHARDKIT_WITH_MATIO
#include <hdf5.h>
#include <matio.h>
#endif

namespace shardkit {
#ifdef SHARDKIT_WITH_MATIO
namespace {

// What libmatio logs during a call on this thread: its warnings ("read
// beyond EOF", then zero-filled data) and errors are failures of the call.
thread_local std::string* g_matio_log = nullptr;

void OnMatioLog(int level, char* message) {
  const int failures = MATIO_LOG_LEVEL_ERROR | MATIO_LOG_LEVEL_CRITICAL | MATIO_LOG_LEVEL_WARNING;
  if (g_matio_log != nullptr && g_matio_log->empty() && (level & failures) != 0)
    *g_matio_log = message != nullptr ? message : "an error";
}

// The innermost message of the last HDF5 error on this thread.
thread_local std::string g_hdf5_cause;

herr_t OnHdf5Error(hid_t stack, void*) {
  H5Ewalk2(
      stack, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void*) -> herr_t {
        if (e->desc != nullptr && e->desc[0] != '\0')
          g_hdf5_cause = std::string("HDF5: ") + e->desc;
        return 0;
      },
      nullptr);
  return 0;
}

// Captures libmatio's log for its lifetime; libmatio prints nothing.
class MatioCall {
 public:
  MatioCall() : outer_(g_matio_log) {
    static std::once_flag once;
    std::call_once(once, [] { Mat_LogInitFunc("shardkit", OnMatioLog); });
    // HDF5's errors (a 7.3 file's) are remembered, not printed (and not
    // failures by themselves: libmatio probes attributes that may not be).
    H5Eset_auto2(H5E_DEFAULT, OnHdf5Error, nullptr);
    g_hdf5_cause.clear();
    g_matio_log = &log_;
  }
  ~MatioCall() { g_matio_log = outer_; }
  MatioCall(const MatioCall&) = delete;
  // OK when the call returned `ok` and logged nothing.
  Status Check(bool ok, const std::string& where, const std::string& what) const {
    if (ok && log_.empty()) return Status::OK();
    std::string why = !log_.empty() ? log_ : g_hdf5_cause;
    if (why.empty()) why = "libmatio failed";
    std::replace(why.begin(), why.end(), '\n', ' ');
    return Status::Corruption(where + ": " + what + ": " + why);
  }

 private:
  std::string* outer_;
  std::string log_;
};

struct MatClose {
  void operator()(mat_t* m) const { Mat_Close(m); }
};
struct VarFree {
  void operator()(matvar_t* v) const { Mat_VarFree(v); }
};
using MatPtr = std::unique_ptr<mat_t, MatClose>;
using VarPtr = std::unique_ptr<matvar_t, VarFree>;

const char* ClassName(int cls) {
  static const char* const kNames[] = {
      "empty",  "cell",   "struct",          "object", "char",   "sparse", "double",
      "single", "int8",   "uint8",           "int16",  "uint16", "int32",  "uint32",
      "int64",  "uint64", "function handle", "opaque"};
  return cls >= 0 && cls <= MAT_C_OPAQUE ? kNames[cls] : "unknown";
}

bool IsNumeric(int cls) { return cls >= MAT_C_DOUBLE && cls <= MAT_C_UINT64; }

std::string DimsText(const matvar_t* v) {
  std::string s;
  for (int k = 0; k < v->rank; ++k) s += (k ? " x " : "") + std::to_string(v->dims[k]);
  return s;
}

uint64_t Numel(const matvar_t* v) {
  uint64_t n = 1;
  for (int k = 0; k < v->rank; ++k) n *= v->dims[k];  // bounded by CheckMatFile
  return n;
}

// A .mat file opened by libmatio after its sizes were checked.
struct MatHandle {
  std::string where;
  MatFileInfo info;
  MatPtr mat;

  static Result<MatHandle> Open(const std::string& path, const std::string& where) {
    MatHandle h;
    h.where = where;
    SK_ASSIGN_OR_RETURN(h.info, CheckMatFile(path, where));
    MatioCall call;
    h.mat.reset(Mat_Open(path.c_str(), MAT_ACC_RDONLY));
    SK_RETURN_IF_ERROR(call.Check(h.mat != nullptr, where, "cannot open"));
    return h;
  }

  // A variable's header (class, dimensions), its data not read.
  Result<VarPtr> Info(const std::string& name) const {
    if (std::find(info.names.begin(), info.names.end(), name) == info.names.end()) {
      std::string names;
      for (const auto& n : info.names) names += (names.empty() ? "" : ", ") + n;
      return Status::NotFound(where + ": no variable '" + name + "' (it holds " +
                              (names.empty() ? "none" : names) + ")");
    }
    if (auto it = info.unreadable.find(name); it != info.unreadable.end()) {
      return Status::InvalidArgument(it->second);
    }
    MatioCall call;
    VarPtr v(Mat_VarReadInfo(mat.get(), name.c_str()));
    SK_RETURN_IF_ERROR(call.Check(v != nullptr, where + ":" + name, "cannot read its header"));
    return v;
  }

  // Elements of a numeric variable, as its class's type: a hyperslab
  // (start/edge per dimension), or `count` elements from `first` in
  // MATLAB's column-major order.
  Status Slab(matvar_t* v, std::vector<int> start, std::vector<int> edge, void* out) const {
    std::vector<int> stride(start.size(), 1);
    MatioCall call;
    const int rc = Mat_VarReadData(mat.get(), v, out, start.data(), stride.data(), edge.data());
    return call.Check(rc == 0, where + ":" + v->name, "read failed");
  }
  Status Linear(matvar_t* v, uint64_t first, uint64_t count, void* out) const {
    MatioCall call;
    const int rc = Mat_VarReadDataLinear(mat.get(), v, out, static_cast<int>(first), 1,
                                         static_cast<int>(count));
    return call.Check(rc == 0, where + ":" + v->name, "read failed");
  }
};

// A numeric array's values (of its class's type) as int64, each an integer.
Status IntegerValues(const std::vector<uint8_t>& raw, int cls, const std::string& where,
                     std::vector<int64_t>* out) {
  auto take = [&](auto zero) -> Status {
    using T = decltype(zero);
    const size_t n = raw.size() / sizeof(T);
    out->resize(n);
    for (size_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
      if constexpr (std::is_floating_point_v<T>) {
        if (!(v == std::floor(v)) || std::fabs(v) > 9.0e18) {
          return Status::InvalidArgument(where + ": label " + std::to_string(v) + " at index " +
                                         std::to_string(i) + " is not an integer");
        }
      } else if constexpr (std::is_same_v<T, uint64_t>) {
        if (v > uint64_t{INT64_MAX}) {
          return Status::InvalidArgument(where + ": label " + std::to_string(v) + " at index " +
                                         std::to_string(i) + " out of range");
        }
      }
      (*out)[i] = static_cast<int64_t>(v);
    }
    return Status::OK();
  };
  switch (cls) {
    case MAT_C_DOUBLE:
      return take(double());
    case MAT_C_SINGLE:
      return take(float());
    case MAT_C_INT8:
      return take(int8_t());
    case MAT_C_UINT8:
      return take(uint8_t());
    case MAT_C_INT16:
      return take(int16_t());
    case MAT_C_UINT16:
      return take(uint16_t());
    case MAT_C_INT32:
      return take(int32_t());
    case MAT_C_UINT32:
      return take(uint32_t());
    case MAT_C_INT64:
      return take(int64_t());
    case MAT_C_UINT64:
      return take(uint64_t());
    default:
      return Status::InvalidArgument(where + ": labels must be numbers");
  }
}

// The image array's items as raw_u8 records, streamed in slabs.
class MatSource : public SampleSource {
 public:
  explicit MatSource(const MatOptions& o) : o_(o) {}
  Status Open();
  std::string name() const override { return o_.file; }
  RecordSpec spec() const override {
    RecordSpec r;
    r.kind = format::RecordKind::kRawU8;
    r.shape = {static_cast<int64_t>(h_), static_cast<int64_t>(w_), static_cast<int64_t>(c_)};
    r.source_order = true;
    r.records = n_;
    return r;
  }
  Status SetRange(uint64_t first, uint64_t end) override {
    if (first >= end || end > n_) {
      return Status::InvalidArgument(o_.file + ": no items " + std::to_string(first) + ".." +
                                     std::to_string(end) + " (it holds " + std::to_string(n_) +
                                     ")");
    }
    first_ = first;
    end_ = end;
    return Status::OK();
  }
  Result<Listing> Scan(SampleSink* sink) override;
  Result<std::string> Settings() const override;

 private:
  Status CheckImages();
  Status ReadLabels(VarPtr labels);
  Status ReadItems(uint64_t first, uint64_t count, std::vector<uint8_t>* buf) const;

  MatOptions o_;
  MatHandle file_;
  VarPtr images_;
  bool n_last_ = true;
  uint64_t h_ = 0, w_ = 0, c_ = 1, n_ = 0;
  std::vector<int64_t> labels_;
  std::vector<std::string> classes_;
  uint64_t first_ = 0, end_ = 0;  // SetRange's; end 0: every item
};

Status MatSource::Open() {
  SK_ASSIGN_OR_RETURN(file_, MatHandle::Open(o_.file, o_.file));
  SK_ASSIGN_OR_RETURN(images_, file_.Info(o_.images));
  SK_ASSIGN_OR_RETURN(VarPtr labels, file_.Info(o_.labels));
  const std::string where_l = o_.file + ":" + o_.labels;
  if (!IsNumeric(labels->class_type) || labels->isComplex || labels->rank != 2 ||
      (labels->dims[0] != 1 && labels->dims[1] != 1)) {
    return Status::InvalidArgument(
        where_l + ": labels must be a vector of integers, not a " + DimsText(labels.get()) + " " +
        (labels->isComplex ? "complex " : "") + ClassName(labels->class_type) + " array");
  }
  n_ = Numel(labels.get());
  SK_RETURN_IF_ERROR(CheckImages());
  return ReadLabels(std::move(labels));
}

Status MatSource::CheckImages() {
  const matvar_t* v = images_.get();
  const std::string where_i = o_.file + ":" + o_.images;
  if (v->class_type != MAT_C_UINT8 || v->isComplex || v->isLogical) {
    return Status::InvalidArgument(where_i + ": images must be uint8, not " +
                                   (v->isComplex   ? "complex "
                                    : v->isLogical ? "logical "
                                                   : "") +
                                   ClassName(v->class_type));
  }
  if (v->rank != 3 && v->rank != 4) {
    return Status::InvalidArgument(
        where_i + ": images must have rank 3 or 4 (H x W [x C] x N, or N x H x W [x C]), not " +
        DimsText(v));
  }
  const uint64_t first = v->dims[0], last = v->dims[v->rank - 1];
  MatLayout layout = o_.layout;
  std::string implausible;  // a reading auto passed over for its channel count
  if (layout == MatLayout::kAuto) {
    // A reading fits where its image count is the labels' and, for rank 4,
    // its channel count one an image has (1 to 4): labels as many as the
    // rows by chance do not make 32 x 32 x 3 x 100 images 32 of 100 channels.
    auto fits = [&](MatLayout l) {
      const bool n_last = l == MatLayout::kHWCN;
      if ((n_last ? last : first) != n_) return false;
      const uint64_t c = v->rank == 4 ? v->dims[n_last ? 2 : 3] : 1;
      if (c >= 1 && c <= 4) return true;
      implausible = std::string(" (read as ") + (n_last ? "H x W x C x N" : "N x H x W x C") +
                    ", its images would have " + std::to_string(c) + " channels: pass --layout " +
                    (n_last ? "HWCN" : "NHWC") + " if so)";
      return false;
    };
    const bool hwcn = fits(MatLayout::kHWCN), nhwc = fits(MatLayout::kNHWC);
    if (hwcn && nhwc) {
      return Status::InvalidArgument(where_i + ": " + DimsText(v) + " images with " +
                                     std::to_string(n_) +
                                     " labels: which dimension is the image? pass --layout HWCN "
                                     "or --layout NHWC");
    }
    layout = hwcn ? MatLayout::kHWCN : nhwc ? MatLayout::kNHWC : MatLayout::kAuto;
  }
  if (layout == MatLayout::kAuto || (layout == MatLayout::kHWCN ? last : first) != n_) {
    return Status::InvalidArgument("length mismatch: " + where_i + " is " + DimsText(v) +
                                   " (images), " + o_.file + ":" + o_.labels + " holds " +
                                   std::to_string(n_) + " labels" + implausible);
  }
  n_last_ = layout == MatLayout::kHWCN;
  const size_t* d = v->dims + (n_last_ ? 0 : 1);
  h_ = d[0], w_ = d[1], c_ = v->rank == 4 ? d[2] : 1;
  const uint64_t item = h_ * w_ * c_;
  if (n_ == 0) return Status::InvalidArgument(where_i + ": no images");
  if (item == 0 || item > format::kMaxRecordSize || h_ > 65536 || w_ > 65536 || c_ > 65536)
    return Status::InvalidArgument(where_i + ": an image of " + DimsText(v) + " is out of range");
  // libmatio 1.5 indexes elements with int.
  if (item * n_ > uint64_t{INT_MAX}) {
    return Status::Unsupported(where_i + ": " + std::to_string(item * n_) +
                               " elements, over the 2^31 libmatio 1.5 reads; split the file");
  }
  return Status::OK();
}

Status MatSource::ReadLabels(VarPtr labels) {
  const std::string where_l = o_.file + ":" + o_.labels;
  std::vector<uint8_t> raw(n_ * Mat_SizeOfClass(labels->class_type));
  const int rows = static_cast<int>(labels->dims[0]), cols = static_cast<int>(labels->dims[1]);
  SK_RETURN_IF_ERROR(file_.Slab(labels.get(), {0, 0}, {rows, cols}, raw.data()));
  SK_RETURN_IF_ERROR(IntegerValues(raw, labels->class_type, where_l, &labels_));
  int64_t max_label = 0;
  for (uint64_t i = 0; i < n_; ++i) {
    if (o_.first_label <= o_.last_label &&
        (labels_[i] < o_.first_label || labels_[i] > o_.last_label)) {
      return Status::InvalidArgument(where_l + ": label " + std::to_string(labels_[i]) +
                                     " at index " + std::to_string(i) + " (MATLAB's " + o_.labels +
                                     "(" + std::to_string(i + 1) + ")) is outside " +
                                     o_.labels_meaning);
    }
    for (const auto& [from, to] : o_.label_map) {
      if (labels_[i] == from) {
        labels_[i] = to;
        break;
      }
    }
    const int64_t l = labels_[i];
    const bool named = !o_.class_names.empty();
    if (l < 0 || l > INT32_MAX || (named && l >= static_cast<int64_t>(o_.class_names.size()))) {
      return Status::InvalidArgument(
          where_l + ": label " + std::to_string(l) + " at index " + std::to_string(i) +
          (o_.label_map.empty() ? "" : " (after --label-map)") + " is outside the classes" +
          (named ? " 0.." + std::to_string(o_.class_names.size() - 1)
                 : " (0 to " + std::to_string(INT32_MAX) + ")"));
    }
    max_label = std::max(max_label, l);
  }
  SK_ASSIGN_OR_RETURN(classes_, ClassesFor(max_label, o_.class_names, where_l));
  return Status::OK();
}

// Items [first, first + count) in MATLAB's order: the images one after
// another when the item index is last (read as a run; level 5 inflates a
// compressed variable from its start for each read), else a hyperslab.
// libmatio 1.5.23's level 5 hyperslabs of rank 3 and more skip wrongly, so
// there an N-first array is read as the N x (H*W*C) matrix it also is.
Status MatSource::ReadItems(uint64_t first, uint64_t count, std::vector<uint8_t>* buf) const {
  const uint64_t item = h_ * w_ * c_;
  buf->resize(count * item);
  matvar_t* v = images_.get();
  const bool level5 = Mat_GetVersion(file_.mat.get()) != MAT_FT_MAT73;
  if (n_last_ && level5) return file_.Linear(v, first * item, count * item, buf->data());
  if (level5) {
    const int rank = v->rank;
    const size_t dim1 = v->dims[1];
    v->rank = 2;
    v->dims[1] = item;
    Status s = file_.Slab(v, {static_cast<int>(first), 0},
                          {static_cast<int>(count), static_cast<int>(item)}, buf->data());
    v->rank = rank;
    v->dims[1] = dim1;
    return s;
  }
  const int rank = v->rank;
  std::vector<int> start(rank, 0), edge(rank);
  for (int k = 0; k < rank; ++k) edge[k] = static_cast<int>(v->dims[k]);
  const int n_dim = n_last_ ? rank - 1 : 0;
  start[n_dim] = static_cast<int>(first);
  edge[n_dim] = static_cast<int>(count);
  return file_.Slab(v, start, edge, buf->data());
}

Result<Listing> MatSource::Scan(SampleSink* sink) {
  const uint64_t n = end_ > 0 ? end_ : n_, item = h_ * w_ * c_;
  // Big slabs for compressed level 5, which each read inflates from the start.
  const uint64_t target =
      images_->compression == MAT_COMPRESSION_ZLIB ? (256ull << 20) : (64ull << 20);
  const uint64_t slab = std::max<uint64_t>(1, target / item);
  std::vector<uint8_t> buf;
  std::string record(item, '\0');
  char key[32];
  for (uint64_t first = first_; first < n; first += slab) {
    SK_RETURN_IF_ERROR(sink->Interrupted());
    const uint64_t count = std::min(slab, n - first);
    SK_RETURN_IF_ERROR(ReadItems(first, count, &buf));
    // Element (h, w, c) of item j: column-major, the item index last or first.
    const uint64_t s_item = n_last_ ? item : 1, s_pix = n_last_ ? 1 : count;
    for (uint64_t j = 0; j < count; ++j) {
      const uint8_t* src = buf.data() + j * s_item;
      char* dst = record.data();
      for (uint64_t y = 0; y < h_; ++y)
        for (uint64_t x = 0; x < w_; ++x)
          for (uint64_t c = 0; c < c_; ++c) *dst++ = src[(y + h_ * (x + w_ * c)) * s_pix];
      std::snprintf(key, sizeof(key), "%08llu", static_cast<unsigned long long>(first + j));
      Sample s;
      s.key = key;
      s.name = o_.file + ":" + o_.images + "[" + std::to_string(first + j) + "]";
      s.label = static_cast<int32_t>(labels_[first + j]);
      SK_RETURN_IF_ERROR(sink->Add(std::move(s), record));
    }
    sink->Read((first + count - first_) * item, (n - first_) * item);
  }
  Listing listing;
  listing.classes = classes_;
  return listing;
}

// The file by size and modification time (a part reads only its range),
// and the options it is read by.
Result<std::string> MatSource::Settings() const {
  SK_ASSIGN_OR_RETURN(nlohmann::json file, InputIdByStat(o_.file));
  nlohmann::json map = nlohmann::json::array();
  for (const auto& [from, to] : o_.label_map) map.push_back({from, to});
  const char* layout = o_.layout == MatLayout::kHWCN   ? "HWCN"
                       : o_.layout == MatLayout::kNHWC ? "NHWC"
                                                       : "auto";
  return SettingsText({{"command", o_.reading},
                       {"class_names", o_.reading == "svhn" ? "" : JoinList(o_.class_names)},
                       {"classes", o_.class_names},
                       {"file", std::move(file)},
                       {"images", o_.images},
                       {"labels", o_.labels},
                       {"layout", layout},
                       {"label_map", std::move(map)}});
}

// A field's value: a row of text, or numbers.
Result<MatValue> ValueOf(const matvar_t* f, const std::string& where) {
  MatValue v;
  if (f == nullptr) return v;
  const uint64_t numel = Numel(f);
  if (f->class_type == MAT_C_CHAR) {
    v.is_text = true;
    if (numel == 0) return v;
    if (f->rank != 2 || f->dims[0] != 1 || f->data == nullptr)
      return Status::Corruption(where + ": a " + DimsText(f) + " char array, not one string");
    const auto* p = static_cast<const uint8_t*>(f->data);
    const bool wide =
        f->data_type == MAT_T_UINT16 || f->data_type == MAT_T_UTF16 || f->data_type == MAT_T_INT16;
    if (!wide) return MatValue{true, std::string(reinterpret_cast<const char*>(p), f->nbytes), {}};
    for (size_t i = 0; i + 1 < f->nbytes; i += 2) {
      const uint32_t u = p[i] | (p[i + 1] << 8);  // UTF-16 of the basic plane
      if (u < 0x80) {
        v.text += static_cast<char>(u);
      } else if (u < 0x800) {
        v.text += static_cast<char>(0xC0 | (u >> 6));
        v.text += static_cast<char>(0x80 | (u & 0x3F));
      } else {
        v.text += static_cast<char>(0xE0 | (u >> 12));
        v.text += static_cast<char>(0x80 | ((u >> 6) & 0x3F));
        v.text += static_cast<char>(0x80 | (u & 0x3F));
      }
    }
    return v;
  }
  if (!IsNumeric(f->class_type) || f->isComplex)
    return Status::Corruption(where + ": a " + ClassName(f->class_type) + " field, not numbers");
  if (numel == 0) return v;
  if (f->data == nullptr) return Status::Corruption(where + ": a field without data");
  std::vector<uint8_t> raw(static_cast<const uint8_t*>(f->data),
                           static_cast<const uint8_t*>(f->data) + numel * f->data_size);
  std::vector<int64_t> ints;
  if (f->class_type == MAT_C_DOUBLE || f->class_type == MAT_C_SINGLE) {
    for (uint64_t i = 0; i < numel; ++i) {
      if (f->class_type == MAT_C_DOUBLE) {
        double d;
        std::memcpy(&d, raw.data() + 8 * i, 8);
        v.numbers.push_back(d);
      } else {
        float x;
        std::memcpy(&x, raw.data() + 4 * i, 4);
        v.numbers.push_back(x);
      }
    }
    return v;
  }
  SK_RETURN_IF_ERROR(IntegerValues(raw, f->class_type, where, &ints));
  v.numbers.assign(ints.begin(), ints.end());
  return v;
}

}  // namespace
#endif  // SHARDKIT_WITH_MATIO

Result<MatLayout> ParseMatLayout(const std::string& name) {
  if (name == "auto") return MatLayout::kAuto;
  if (name == "HWCN" || name == "hwcn" || name == "HWN") return MatLayout::kHWCN;
  if (name == "NHWC" || name == "nhwc" || name == "NHW") return MatLayout::kNHWC;
  return Status::InvalidArgument("--layout '" + name + "': auto, HWCN or NHWC");
}

Result<std::vector<std::pair<int64_t, int64_t>>> ParseLabelMap(const std::string& text) {
  std::vector<std::pair<int64_t, int64_t>> map;
  for (const std::string& pair : SplitList(text)) {
    const size_t colon = pair.find(':');
    long long from = 0, to = 0;
    int used = 0;
    if (colon == std::string::npos ||
        std::sscanf(pair.c_str(), "%lld:%lld%n", &from, &to, &used) != 2 ||
        used != static_cast<int>(pair.size())) {
      return Status::InvalidArgument("--label-map '" + pair + "': pairs FROM:TO of integers");
    }
    for (const auto& m : map) {
      if (m.first == from)
        return Status::InvalidArgument("--label-map maps " + std::to_string(from) + " twice");
    }
    map.emplace_back(from, to);
  }
  if (map.empty()) return Status::InvalidArgument("--label-map: no FROM:TO pairs");
  return map;
}

MatOptions SvhnOptions(const std::string& file) {
  MatOptions o;
  o.file = file;
  o.images = "X";
  o.labels = "y";
  o.layout = MatLayout::kHWCN;
  o.first_label = 1;
  o.last_label = 10;
  o.labels_meaning =
      "SVHN's labels 1..10 (10 being the digit 0), so the file is not in SVHN's convention (one "
      "labelled 0..9 packs with 'shardkit-pack mat " +
      file + " OUT --images X --labels y --layout HWCN --class-names 0,1,2,3,4,5,6,7,8,9')";
  o.label_map = {{10, 0}};
  for (int c = 0; c < 10; ++c) o.class_names.push_back(std::to_string(c));
  o.reading = "svhn";
  return o;
}

#ifndef SHARDKIT_WITH_MATIO
namespace {
Status NoMatio(const std::string& where) {
  return Status::Unsupported(where +
                             ": this shardkit was built without libmatio (libmatio-dev): MATLAB "
                             "files are not read");
}
}  // namespace

Result<std::unique_ptr<SampleSource>> OpenMat(const MatOptions& options) {
  return NoMatio(options.file);
}

Result<std::vector<std::vector<MatValue>>> ReadMatStructFields(const std::string&,
                                                               const std::string& where,
                                                               const std::string&,
                                                               const std::vector<std::string>&) {
  return NoMatio(where);
}
#else
Result<std::unique_ptr<SampleSource>> OpenMat(const MatOptions& options) {
  auto source = std::make_unique<MatSource>(options);
  SK_RETURN_IF_ERROR(source->Open());
  return std::unique_ptr<SampleSource>(std::move(source));
}

Result<std::vector<std::vector<MatValue>>> ReadMatStructFields(
    const std::string& path, const std::string& where, const std::string& variable,
    const std::vector<std::string>& fields) {
  SK_ASSIGN_OR_RETURN(MatHandle file, MatHandle::Open(path, where));
  SK_RETURN_IF_ERROR(file.Info(variable).status());  // names it if missing
  const std::string where_v = where + ":" + variable;
  MatioCall call;
  VarPtr v(Mat_VarRead(file.mat.get(), variable.c_str()));
  SK_RETURN_IF_ERROR(call.Check(v != nullptr, where_v, "read failed"));
  if (v->class_type != MAT_C_STRUCT)
    return Status::Corruption(where_v + ": a " + ClassName(v->class_type) + " array, not a struct");
  char* const* names = Mat_VarGetStructFieldnames(v.get());
  const unsigned nfields = Mat_VarGetNumberOfFields(v.get());
  for (const auto& f : fields) {
    bool found = false;
    for (unsigned k = 0; k < nfields && !found; ++k) found = names[k] != nullptr && f == names[k];
    if (!found) return Status::Corruption(where_v + ": no field " + f);
  }
  std::vector<std::vector<MatValue>> rows;
  const uint64_t numel = Numel(v.get());
  for (uint64_t i = 0; i < numel; ++i) {
    std::vector<MatValue> row;
    for (const auto& f : fields) {
      const matvar_t* value = Mat_VarGetStructFieldByName(v.get(), f.c_str(), i);
      SK_ASSIGN_OR_RETURN(MatValue m,
                          ValueOf(value, where_v + "(" + std::to_string(i + 1) + ")." + f));
      row.push_back(std::move(m));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}
#endif  // SHARDKIT_WITH_MATIO

Result<std::vector<std::vector<MatValue>>> ReadMatStructFieldsFromBytes(
    const std::string& bytes, const std::string& where, const std::string& variable,
    const std::vector<std::string>& fields) {
  // libmatio reads files by name: an anonymous in-memory file has one.
  const int fd = ::memfd_create("shardkit-mat", MFD_CLOEXEC);
  if (fd < 0) return Status::IOError(where + ": memfd_create: " + std::strerror(errno));
  std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* p) {
    ::close(*p);
    delete p;
  });
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return Status::IOError(where + ": cannot hold it in memory: " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return ReadMatStructFields("/proc/self/fd/" + std::to_string(fd), where, variable, fields);
}

}  // namespace shardkit
