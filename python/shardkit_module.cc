// _shardkit: the Python binding of the loader and the shard format. A thin
// layer: every byte is read, decoded and written by the C++ core; this file
// converts arguments, releases the GIL around the core's work, turns Status
// into exceptions, and hands batches to NumPy without copying (the array's
// base owns the batch's lease, so the loader never refills that memory while
// an array, or a torch tensor made from it, views it). The Python package
// (python/shardkit/__init__.py) builds the user-facing API on top.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "base/humanize.h"
#include "base/names.h"
#include "base/version.h"
#include "image/codec.h"
#include "image/prepare.h"
#include "loader/loader.h"
#include "loader/resolution_schedule.h"
#include "python/pinned_host.h"
#include "shard/dataset.h"
#include "shard/dataset_writer.h"
#include "shard/manifest.h"
#include "shard/record_reader.h"

namespace py = pybind11;
using namespace shardkit;

namespace {

PyObject* g_corruption_error = nullptr;

// Status -> the Python exception a user would expect. Messages may hold
// paths that are not UTF-8: their bad bytes are replaced, never a second error.
[[noreturn]] void Raise(const Status& s) {
  const std::string& m = s.message();
  PyObject* type = PyExc_RuntimeError;
  if (s.IsCorruption()) {
    type = g_corruption_error;
  } else if (s.IsInvalidArgument() || s.IsUnsupported()) {
    type = PyExc_ValueError;
  } else if (s.IsIOError() || s.IsNotFound()) {
    type = PyExc_OSError;
  }
  py::object text = py::reinterpret_steal<py::object>(
      PyUnicode_DecodeUTF8(m.data(), static_cast<Py_ssize_t>(m.size()), "replace"));
  PyErr_SetObject(type, text.ptr());
  throw py::error_already_set();
}

void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

template <typename T>
T Take(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(*r);
}

// f()'s result, computed with the GIL released (opening a dataset reads and
// checks files; a batch may take a while). Not a gil_scoped_release: at exit
// CPython ends a daemon thread inside PyEval_RestoreThread, by an unwind that
// must not leave a destructor (noexcept: std::terminate, SIGABRT). (Blocking
// Ctrl-C in the threads f starts was tried: a main thread waiting in
// Thread.join() then missed it more often, not less.)
template <typename F>
auto WithoutGil(F&& f) {
  PyThreadState* state = PyEval_SaveThread();
  auto back = [&] { PyEval_RestoreThread(state); };
  std::optional<decltype(f())> result;
  try {
    result.emplace(f());
  } catch (...) {
    back();
    throw;
  }
  back();  // outside the try: the exit's unwind passes through, not caught
  return std::move(*result);
}

// How long Next() waits for a batch between checks for signals.
constexpr uint64_t kSignalCheckNs = 50'000'000;

// f(cancel)'s result, computed on a thread of its own while this one waits,
// checking for signals every kSignalCheckNs (holding the GIL only for the
// check): Ctrl-C sets `cancel`, so that an open waiting on slow or dead
// object storage ends at once (Aborted), waits for f, and raises
// KeyboardInterrupt.
template <typename F>
auto Interruptibly(F&& f) {
  using R = decltype(f(static_cast<const Cancel*>(nullptr)));
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::optional<R> result;
    Cancel cancel{false};
  } shared;
  std::thread worker([&] {
    R r = f(&shared.cancel);
    std::lock_guard<std::mutex> lock(shared.mu);
    shared.result.emplace(std::move(r));
    shared.done = true;
    shared.cv.notify_all();
  });
  bool interrupted = false;
  for (;;) {
    const bool done = WithoutGil([&] {
      std::unique_lock<std::mutex> lock(shared.mu);
      return shared.cv.wait_for(lock, std::chrono::nanoseconds(kSignalCheckNs),
                                [&] { return shared.done; });
    });
    if (done) break;
    if (!interrupted && PyErr_CheckSignals() != 0) {
      interrupted = true;
      shared.cancel.store(true);
    }
  }
  worker.join();
  if (interrupted) throw py::error_already_set();
  return std::move(*shared.result);
}

// One loader keyword's value on its way into LoaderOptions: converted to
// the field's type, or a ValueError naming the keyword. Ranges are not
// checked here: ValidateLoaderOptions (Loader::Open) is the one place, and
// its InvalidArgument comes back as ValueError. So integers of any size
// become the field's type (beyond it: "name=N is out of range"), for the
// loader to check.
class Keyword {
 public:
  Keyword(const char* name, py::handle value) : name_(name), value_(value) {}

  // operator.index(value) (ints, bools, NumPy and torch integers), or a
  // float that is an integer exactly (3.0); 2.99, a str or NaN is refused
  // (int() would truncate 2.99 to 2).
  py::int_ Integer() const {
    PyObject* n = PyNumber_Index(value_.ptr());
    if (n != nullptr) return py::reinterpret_steal<py::int_>(n);
    PyErr_Clear();
    PyObject* v = value_.ptr();
    if (!PyUnicode_Check(v) && !PyBytes_Check(v)) {
      const double d = PyFloat_AsDouble(v);
      if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
      } else if (std::isfinite(d) && d == std::floor(d)) {
        return py::reinterpret_steal<py::int_>(PyLong_FromDouble(d));
      }
    }
    throw py::value_error(std::string(name_) + " must be an integer, not " +
                          py::repr(value_).cast<std::string>());
  }
  int64_t Int64() const {
    const py::int_ n = Integer();
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(n.ptr(), &overflow);
    if (overflow != 0) OutOfRange(n);
    return v;
  }
  // Past the int range: out of range, naming the value given (saturated, the
  // loader's range message would name the clamped value instead).
  int Int() const {
    const int64_t v = Int64();
    if (v < INT32_MIN || v > INT32_MAX) OutOfRange(py::int_(v));
    return static_cast<int>(v);
  }
  uint64_t UInt64() const {
    const py::int_ n = Integer();
    const unsigned long long v = PyLong_AsUnsignedLongLong(n.ptr());
    if (PyErr_Occurred()) {
      PyErr_Clear();
      OutOfRange(n);
    }
    return v;
  }
  // An integer of bytes, or a size as the tools take it ("200G", "64MiB").
  uint64_t ByteSize() const {
    if (!PyUnicode_Check(value_.ptr()) && !PyBytes_Check(value_.ptr())) return UInt64();
    uint64_t v = 0;
    if (!ParseByteSize(Str(), &v)) {
      throw py::value_error(std::string(name_) +
                            " must be a number of bytes or a size such as "
                            "'200G', not " +
                            py::repr(value_).cast<std::string>());
    }
    return v;
  }
  bool Bool() const {  // bool(value)
    const int truth = PyObject_IsTrue(value_.ptr());
    if (truth < 0) throw py::error_already_set();
    return truth == 1;
  }
  // str(value); bytes as they are (a path that is not UTF-8).
  std::string Str() const {
    if (PyBytes_Check(value_.ptr())) return value_.cast<std::string>();
    return py::str(value_).cast<std::string>();
  }
  // One of the table's names: "name must be 'a', 'b' or 'c', not 'x'".
  template <typename E, size_t N>
  E Enum(const EnumName<E> (&table)[N]) const {
    const std::string s = Str();
    E e{};
    if (!ValueOf(table, s, &e))
      throw py::value_error(std::string(name_) + " must be " + NameList(table) + ", not '" + s +
                            "'");
    return e;
  }
  py::handle value() const { return value_; }

 private:
  [[noreturn]] void OutOfRange(const py::int_& n) const {
    throw py::value_error(std::string(name_) + "=" + py::str(py::handle(n)).cast<std::string>() +
                          " is out of range");
  }
  const char* name_;
  py::handle value_;
};

// `transform`: the plan shardkit.transforms compiles ({"kind": "train",
// "size": 224, "height": .., "scale": (lo, hi), "ratio": (lo, hi),
// "flip": p, "resize": .., "resize_hw": (h, w), and RandomCrop's "padding":
// [left, top, right, bottom], "fill": [v, ...], "padding_mode": name,
// "pad_if_needed": bool}); absent keys keep TransformParams' defaults.
// ("geometry" is the binding's own: see PyLoader.)
void SetTransform(const Keyword& k, TransformParams* t) {
  if (!py::isinstance<py::dict>(k.value()))
    throw py::value_error("transform must be a dict (shardkit.transforms.plan)");
  const py::dict plan = py::reinterpret_borrow<py::dict>(k.value());
  const py::object given =
      plan.contains("kind") ? py::object(plan["kind"]) : py::object(py::none());
  if (!TransformKindFromName(py::str(given).cast<std::string>(), &t->kind)) {
    std::string named;  // the names but "none", which Python spells None
    for (const EnumName<TransformKind>& e : kTransformKindNames) {
      if (e.value != TransformKind::kNone) named += "'" + std::string(e.name) + "', ";
    }
    throw py::value_error("transform must be " + named +
                          "None or torchvision-style transforms, not " +
                          py::repr(given).cast<std::string>());
  }
  auto get = [&](const char* key) -> py::object {
    return plan.contains(key) && !plan[key].is_none() ? py::object(plan[key]) : py::object();
  };
  if (py::object v = get("size")) t->size = Keyword("transform size", v).Int();
  if (py::object v = get("height")) t->height = Keyword("transform height", v).Int();
  if (py::object v = get("width")) t->width = Keyword("transform width", v).Int();
  if (py::object v = get("scale"))
    std::tie(t->min_scale, t->max_scale) = v.cast<std::pair<double, double>>();
  if (py::object v = get("ratio"))
    std::tie(t->min_ratio, t->max_ratio) = v.cast<std::pair<double, double>>();
  if (py::object v = get("flip")) t->flip_prob = v.cast<double>();
  if (py::object v = get("resize")) t->resize = Keyword("transform resize", v).Int();
  if (py::object v = get("resize_hw"))
    std::tie(t->resize_height, t->resize_width) = v.cast<std::pair<int, int>>();
  if (py::object v = get("padding")) {
    const auto pad = v.cast<std::vector<py::object>>();
    if (pad.size() != 4)
      throw py::value_error("transform padding must be [left, top, right, bottom]");
    int* sides[] = {&t->pad_left, &t->pad_top, &t->pad_right, &t->pad_bottom};
    for (size_t i = 0; i < 4; ++i) *sides[i] = Keyword("transform padding", pad[i]).Int();
  }
  if (py::object v = get("fill")) {
    const auto fill = v.cast<std::vector<py::object>>();
    if (fill.empty() || fill.size() > 4)
      throw py::value_error("RandomCrop fill must be a number or 1 to 4 numbers (one per channel)");
    for (size_t i = 0; i < fill.size(); ++i) {
      const int64_t f = Keyword("RandomCrop fill", fill[i]).Int64();
      if (f < 0 || f > 255)
        throw py::value_error("RandomCrop fill must be in 0..255 (uint8 pixels), not " +
                              std::to_string(f));
      t->fill[i] = static_cast<uint8_t>(f);
    }
    t->fill_channels = static_cast<int>(fill.size());
  }
  if (py::object v = get("padding_mode"))
    t->padding_mode = Keyword("RandomCrop padding_mode", v).Enum(kPaddingModeNames);
  if (py::object v = get("pad_if_needed")) t->pad_if_needed = Keyword("pad_if_needed", v).Bool();
}

// The loader's keywords: how each Python keyword sets its LoaderOptions
// field. Adding an option is one row here (and its keyword in the package).
struct LoaderKeyword {
  const char* name;
  void (*set)(const Keyword& value, LoaderOptions& o);
};
constexpr LoaderKeyword kLoaderKeywords[] = {
    {"batch_size", [](const Keyword& v, LoaderOptions& o) { o.batch_size = v.Int(); }},
    {"workers", [](const Keyword& v, LoaderOptions& o) { o.workers = v.Int(); }},
    {"transform", [](const Keyword& v, LoaderOptions& o) { SetTransform(v, &o.transform); }},
    {"rank", [](const Keyword& v, LoaderOptions& o) { o.rank = v.Int(); }},
    {"world_size", [](const Keyword& v, LoaderOptions& o) { o.world_size = v.Int(); }},
    {"seed", [](const Keyword& v, LoaderOptions& o) { o.seed = v.UInt64(); }},
    // device="cuda:N": ring slots in memory pinned for that GPU (-1: none).
    {"pinned_device",
     [](const Keyword& v, LoaderOptions& o) {
       const int device = v.Int();
       if (device < 0) return;
       auto allocator = CudaPinnedAllocator(device);
       if (!allocator.ok()) throw py::value_error(allocator.status().message());
       o.allocator = std::move(*allocator);
     }},
    {"shuffle", [](const Keyword& v, LoaderOptions& o) { o.shuffle = v.Enum(kShuffleModeNames); }},
    // The orders come from the package (a sampler's indices: set_epoch_order).
    {"given_order",
     [](const Keyword& v, LoaderOptions& o) {
       if (v.Bool()) o.shuffle = ShuffleMode::kGiven;
     }},
    {"drop_last", [](const Keyword& v, LoaderOptions& o) { o.drop_last = v.Bool(); }},
    {"layout", [](const Keyword& v, LoaderOptions& o) { o.layout = v.Enum(kLayoutNames); }},
    {"prefetch", [](const Keyword& v, LoaderOptions& o) { o.prefetch = v.Int(); }},
    {"on_corrupt",
     [](const Keyword& v, LoaderOptions& o) { o.corrupt_policy = v.Enum(kCorruptPolicyNames); }},
    {"skip_budget",
     [](const Keyword& v, LoaderOptions& o) {
       const int64_t n = v.Int64();  // unsigned in C++, where no range check would see -1
       if (n < 0) throw py::value_error("skip_budget must be >= 0");
       o.skip_budget = static_cast<uint64_t>(n);
     }},
    {"read_depth", [](const Keyword& v, LoaderOptions& o) { o.read_depth = v.Int(); }},
    {"cache_dir", [](const Keyword& v, LoaderOptions& o) { o.cache_dir = v.Str(); }},
    {"cache_limit", [](const Keyword& v, LoaderOptions& o) { o.cache_limit = v.ByteSize(); }},
    {"read_ahead_bytes",
     [](const Keyword& v, LoaderOptions& o) {  // below 0: 0, which the loader refuses
       o.read_ahead_bytes = static_cast<uint64_t>(std::max<int64_t>(0, v.Int64()));
     }},
};

class PyLoader {
 public:
  // `options`: keywords of kLoaderKeywords, each optional (LoaderOptions'
  // defaults); any other is a TypeError.
  PyLoader(const std::string& path, const py::dict& options) {
    for (const auto& [key, value] : options) {
      const std::string name = py::str(key).cast<std::string>();
      const LoaderKeyword* row = nullptr;
      for (const LoaderKeyword& k : kLoaderKeywords) {
        if (name == k.name) row = &k;
      }
      if (row == nullptr)
        throw py::type_error("_Loader got an unexpected keyword argument '" + name + "'");
      row->set(Keyword(row->name, value), options_);
    }
    auto opened = Interruptibly([&](const Cancel* cancel) {
      LoaderOptions o = options_;
      o.cancel_open = cancel;
      return Loader::Open(path, o);
    });
    const TransformParams& t = options_.transform;
    if (!opened.ok() && opened.status().IsInvalidArgument()) {
      // The core refuses a transform its rule (TransformApplies) says cannot
      // apply to the records; said again in Python's terms.
      auto manifest = WithoutGil([&] { return ReadManifest(path); });
      if (manifest.ok() && !TransformApplies(manifest->record.kind, t.kind)) {
        const RecordFormat& record = manifest->record;
        const std::string kind = TransformKindName(t.kind);
        std::string shape;
        for (int64_t d : record.shape) shape += (shape.empty() ? "" : "x") + std::to_string(d);
        throw py::value_error(
            "transform '" + kind + "'" + (kind == "train" ? " (the default)" : "") +
            " resizes JPEG records; " + path + " holds raw " + shape +
            " records, which the loader returns as stored or cropped: pass transform=None, or "
            "RandomCrop(size, padding=...) with or without RandomHorizontalFlip, and resize or "
            "augment the batch tensor after the loader if you need to");
      }
    }
    loader_ = Take(std::move(opened));
    const RecordFormat& record = loader_->manifest().record;
    // The plan's "geometry": false for transforms of no geometry at all (only
    // ToTensor and the like), where raw records come as stored.
    bool geometry = true;
    if (options.contains("transform") && py::isinstance<py::dict>(options["transform"])) {
      const py::dict plan = options["transform"];
      if (plan.contains("geometry")) geometry = plan["geometry"].cast<bool>();
    }
    if (record.kind == format::RecordKind::kJpeg && !geometry) {
      throw py::value_error("transform: no geometry (only ToTensor and the like), but " + path +
                            " holds JPEGs, whose sizes differ, and a batch needs one size: add "
                            "RandomResizedCrop(n), Resize(n) + CenterCrop(n) or Resize((h, w))");
    }
  }

  // With the GIL held: no thread of the loader's takes it, and at exit a
  // daemon thread that released it here would be ended inside this noexcept
  // destructor when taking it back (std::terminate). Joining the producer
  // waits for the batch in progress at most.
  ~PyLoader() { loader_.reset(); }

  void BeginPass() {
    // Stopping the last pass's producer may wait for a batch.
    Check(WithoutGil([&] { return loader_->BeginPass(); }));
  }

  void StartEpoch(uint64_t epoch, uint64_t start_batch) {
    Check(WithoutGil([&] { return loader_->StartEpoch(epoch, start_batch); }));
  }

  // A sampler's indices for `epoch` (any integer sequence or array; the
  // core checks that each is a record of the dataset).
  void SetEpochOrder(uint64_t epoch, const py::handle& indices) {
    const auto a = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(indices);
    if (!a || a.ndim() != 1)
      throw py::value_error("a sampler's indices must be a sequence of integers");
    std::vector<uint64_t> order(static_cast<size_t>(a.size()));
    const int64_t* v = a.data();
    for (size_t i = 0; i < order.size(); ++i) {
      if (v[i] < 0) {
        throw py::value_error("epoch " + std::to_string(epoch) + "'s order: index " +
                              std::to_string(v[i]) + " (at position " + std::to_string(i) +
                              ") is not a record of the dataset");
      }
      order[i] = static_cast<uint64_t>(v[i]);
    }
    Check(loader_->SetEpochOrder(epoch, std::move(order)));
  }

  // (images, labels, sample_ids, real_size), or None at the epoch's end.
  // Waits in slices, checking for signals between them, so Ctrl-C raises
  // KeyboardInterrupt within a slice however long the batch takes.
  py::object Next() {
    std::shared_ptr<const Batch> lease;
    for (;;) {
      bool ready = false;
      Check(WithoutGil([&] { return loader_->Next(&lease, kSignalCheckNs, &ready); }));
      if (ready) break;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
    if (!lease) return py::none();
    const Batch& b = *lease;
    // The capsule owns a copy of the lease: the memory lives while the array does.
    auto* owner = new std::shared_ptr<const Batch>(lease);
    py::capsule base(owner, [](void* p) { delete static_cast<std::shared_ptr<const Batch>*>(p); });
    const py::ssize_t n = b.size, c = b.channels, h = b.height, w = b.width;
    std::vector<py::ssize_t> shape = {n, c, h, w}, strides;
    if (b.layout == Layout::kNCHW) {
      strides = {c * h * w, h * w, w, 1};
    } else {  // NHWC memory, viewed as NCHW with channels-last strides
      strides = {h * w * c, 1, w * c, c};
    }
    py::array_t<uint8_t> images(shape, strides, b.data, base);
    py::array_t<int64_t> labels(n), ids(n);
    auto lv = labels.mutable_unchecked<1>();
    auto iv = ids.mutable_unchecked<1>();
    for (py::ssize_t i = 0; i < n; ++i) {
      lv(i) = b.labels[i];
      iv(i) = static_cast<int64_t>(b.sample_ids[i]);
    }
    return py::make_tuple(images, labels, ids, b.real_size);
  }

  py::dict Stats() const {
    const LoaderStats s = loader_->stats();
    py::dict d;
    d["read_s"] = s.read_s;
    d["decompress_s"] = s.decompress_s;
    d["decode_s"] = s.decode_s;
    d["transform_s"] = s.transform_s;
    d["wait_s"] = s.wait_s;
    d["samples"] = s.samples;
    d["batches"] = s.batches;
    d["bytes_read"] = s.bytes_read;
    d["corrupt_records"] = s.corrupt_records;
    d["samples_replaced"] = s.samples_replaced;
    // The old name: the samples skipped, each replaced by another.
    d["corrupt_skipped"] = s.samples_replaced;
    d["corrupt_units"] = s.corrupt_units;
    d["queued_reads"] = s.queued_reads;
    d["mean_reads_in_flight"] = s.mean_reads_in_flight;
    d["peak_reads_in_flight"] = s.peak_reads_in_flight;
    d["mean_read_latency_s"] = s.mean_read_latency_s;
    d["peak_read_ahead_bytes"] = s.peak_read_ahead_bytes;
    d["corrupt_messages"] = s.corrupt_messages;
    d["fills_alone"] = s.fills_alone;
    d["fills_shared"] = s.fills_shared;
    d["fill_settled"] = s.fill_settled;
    d["storage_requests"] = s.storage_requests;
    d["storage_bytes"] = s.storage_bytes;
    d["storage_retries"] = s.storage_retries;
    d["cache_hits"] = s.cache_hits;
    d["cache_misses"] = s.cache_misses;
    return d;
  }

  Loader& loader() { return *loader_; }
  const LoaderOptions& options() const { return options_; }

  std::string State() const { return LoaderStateToJson(loader_->state()); }

  // Validated by the loader (LoaderStateFromJson, Loader::Restore): a state
  // that does not continue exactly is a ValueError saying what differs.
  void Restore(const std::string& json) {
    LoaderState saved = Take(LoaderStateFromJson(json));
    Check(WithoutGil([&] { return loader_->Restore(saved); }));
  }

 private:
  LoaderOptions options_;
  std::unique_ptr<Loader> loader_;
};

class PyDataset {
 public:
  PyDataset(const std::string& path, int64_t block_cache_bytes) {
    if (block_cache_bytes < 0) throw py::value_error("block_cache_bytes must be >= 0");
    ds_ = Take(
        Interruptibly([&](const Cancel* cancel) { return Dataset::Open(path, nullptr, cancel); }));
    reader_ = std::make_unique<RecordReader>(ds_.get(), static_cast<uint64_t>(block_cache_bytes));
  }
  uint64_t size() const { return ds_->num_records(); }
  const Manifest& manifest() const { return ds_->manifest(); }
  uint64_t blocks_decompressed() const { return reader_->blocks_decompressed(); }

  // (payload, label): bytes for JPEG and bytes records, a uint8 array of the
  // record's shape for raw ones, checked (RecordReader: a record costs a
  // record, sliced from a cached block, the GIL given up only around reads
  // of storage). `index`: anything Python indexes a sequence with (int,
  // NumPy integer, 0-d tensor), from the end if negative.
  py::tuple Item(py::handle index) const {
    const uint64_t i = Index(index);
    RecordReader::Record rec;
    if (!reader_->ReadCached(i, &rec)) {
      Check(WithoutGil([&] { return reader_->Read(i, &rec); }));
    }
    const auto [shard, local] = ds_->Locate(i);
    const ShardReader& r = ds_->shard(shard);
    const RecordFormat& f = ds_->manifest().record;
    if (f.kind != format::RecordKind::kRawU8)
      return py::make_tuple(py::bytes(rec.payload.data(), rec.payload.size()), r.label(local));
    if (rec.payload.size() != f.raw_record_size()) {
      Raise(Status::Corruption(r.Where(local) + ": " + std::to_string(rec.payload.size()) +
                               " bytes, the record shape needs " +
                               std::to_string(f.raw_record_size())));
    }
    py::array_t<uint8_t> a(std::vector<py::ssize_t>(f.shape.begin(), f.shape.end()));
    std::memcpy(a.mutable_data(), rec.payload.data(), rec.payload.size());
    return py::make_tuple(std::move(a), r.label(local));
  }

  // Item's (payload, label) and the record's key (bytes, decoded by the package).
  py::tuple Get(py::handle index) const {
    const py::tuple item = Item(index);
    const auto [shard, local] = ds_->Locate(Index(index));
    return py::make_tuple(item[0], item[1], py::bytes(std::string(ds_->shard(shard).key(local))));
  }

 private:
  // `index` as a record number, or IndexError / TypeError.
  uint64_t Index(py::handle index) const {
    py::object n = py::reinterpret_steal<py::object>(PyNumber_Index(index.ptr()));
    if (!n) throw py::error_already_set();
    const int64_t size = static_cast<int64_t>(ds_->num_records());
    int overflow = 0;
    int64_t i = PyLong_AsLongLongAndOverflow(n.ptr(), &overflow);
    if (overflow == 0 && i < 0) i += size;
    if (overflow != 0 || i < 0 || i >= size) {
      throw py::index_error("record index " + py::str(n).cast<std::string>() + " out of range (" +
                            std::to_string(size) + " records)");
    }
    return static_cast<uint64_t>(i);
  }

  std::unique_ptr<Dataset> ds_;
  std::unique_ptr<RecordReader> reader_;  // declared after ds_: destroyed before it
};

class PyWriter {
 public:
  PyWriter(const std::string& path, const std::string& kind, std::vector<int64_t> shape,
           std::vector<std::string> classes, int64_t shard_size, const std::string& compression,
           bool overwrite, const std::string& created_by)
      : path_(path) {
    // "raw": the Writer's first name for raw_u8, still taken.
    const std::string name = kind == "raw" ? "raw_u8" : kind;
    if (!ValueOf(format::kRecordKindNames, name, &manifest_.record.kind)) {
      throw py::value_error("kind must be " + NameList(format::kRecordKindNames) + ", not '" +
                            kind + "'");
    }
    manifest_.record.shape = std::move(shape);
    // Checked as WriteManifest checks it, before any record is written.
    Check(CheckRecordFormat(manifest_.record).WithContext(path));
    rule_.jpeg = manifest_.record.kind == format::RecordKind::kJpeg;
    rule_.raw_size = manifest_.record.raw_record_size();  // re-encoded: kDefaultJpegQuality
    CompressionMode mode;
    if (!ValueOf(kCompressionModeNames, compression, &mode))
      throw py::value_error("compression must be " + NameList(kCompressionModeNames));
    // The rules every writer of datasets follows (shardkit-pack, bigMNIST):
    // "auto" takes their compression (JPEGs stored, raw records zstd), the
    // others replace it.
    DatasetWriterOptions o = DatasetRules(
        manifest_.record.kind,
        manifest_.record.kind == format::RecordKind::kRawU8 ? manifest_.record.raw_record_size()
                                                            : 0,
        static_cast<uint64_t>(std::max<int64_t>(0, shard_size)));  // checked by Create
    if (mode != CompressionMode::kAuto) o.shard.compression = mode;
    o.overwrite = overwrite;
    Check(CheckClassNames(classes).WithContext(path));
    manifest_.classes = std::move(classes);
    manifest_.created_by = created_by;
    o.num_classes = manifest_.classes.size();
    writer_ = Take(WithoutGil([&] { return DatasetWriter::Create(path, o); }));
  }

  void Add(py::buffer data, int64_t label, py::object key) {
    if (!writer_) throw py::value_error(path_ + ": the writer is closed");
    Py_buffer view;
    if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
      PyErr_Clear();
      throw py::value_error(path_ + ": record data must be a C-contiguous bytes-like object");
    }
    std::unique_ptr<Py_buffer, void (*)(Py_buffer*)> held(&view, PyBuffer_Release);
    const std::string_view payload(static_cast<const char*>(view.buf),
                                   static_cast<size_t>(view.len));
    // Keys arrive as bytes (the package encodes str keys): any bytes a file name holds.
    std::string k = key.is_none() ? std::to_string(writer_->records()) : key.cast<std::string>();
    const std::string where = path_ + ": record '" + Printable(k) + "' (number " +
                              std::to_string(writer_->records()) + ")";
    // Only what int32 cannot hold is refused here; the writer checks the
    // label against the classes and the size against the shape. Without
    // class names, labels are class numbers, named at close().
    if (label < INT32_MIN || label > INT32_MAX)
      throw py::value_error(where + ": label " + std::to_string(label) + " out of range");
    if (manifest_.classes.empty() && label >= kMaxNumberedClasses) {
      throw py::value_error(where + ": label " + std::to_string(label) +
                            " with no classes given (labels are then class numbers, below " +
                            std::to_string(kMaxNumberedClasses) +
                            "); pass classes=[...], or relabel to 0..classes-1");
    }
    CheckShape(view, where);
    // What shardkit-pack does to each sample: an image recognised by
    // content, validated, PNG and CMYK converted to an RGB JPEG; a raw
    // record checked against the shape's size.
    PreparedImage record;
    const Status s =
        WithoutGil([&] { return PrepareRecord(std::string(payload), rule_, &record); });
    if (!s.ok()) {
      throw py::value_error(where + (rule_.jpeg ? ": not an image the loader can decode: " : ": ") +
                            s.message());
    }
    Check(WithoutGil([&] { return writer_->Add(record.jpeg, static_cast<int32_t>(label), k); }));
    conversions_.Count(record.change);
    max_label_ = std::max<int64_t>(max_label_, label);
  }

  void Close() {
    if (!writer_) return;
    Manifest m = manifest_;
    if (m.classes.empty()) {  // labels are class numbers: "0" up to the largest (none: unlabelled)
      m.classes = Take(NumberedClasses(max_label_, path_, "pass classes=[...]"));
    }
    // Finish refuses a dataset of no record, as for shardkit-pack, and
    // leaves a dataset being replaced whole; the writer goes either way.
    Check(WithoutGil([&] {
      Status s = writer_->Finish(m);
      writer_.reset();
      return s;
    }));
  }

  // Without close(): the unfinished shard is deleted and no manifest is
  // written, so the directory never looks complete.
  void Abort() {
    WithoutGil([&] {
      writer_.reset();
      return 0;
    });
  }

  uint64_t records() const { return writer_ ? writer_->records() : 0; }
  uint64_t converted() const { return conversions_.converted(); }

 private:
  // An array (a buffer of more than one dimension) has a layout: for raw_u8
  // records its shape must be the declared (H, W, C), or (H, W) when C is 1,
  // or its bytes would be stored in another order than the loader reads
  // them (a CHW array for an HWC shape: the same byte count, scrambled
  // pixels). A flat buffer (bytes) is taken as H*W*C bytes in H, W, C order.
  void CheckShape(const Py_buffer& view, const std::string& where) const {
    if (manifest_.record.kind != format::RecordKind::kRawU8 || view.ndim < 2) return;
    const std::vector<int64_t>& want = manifest_.record.shape;
    std::vector<int64_t> got(view.shape, view.shape + view.ndim);
    const bool same = got == want || (want.size() == 3 && want[2] == 1 && got.size() == 2 &&
                                      got[0] == want[0] && got[1] == want[1]);
    if (same) return;
    auto text = [](const std::vector<int64_t>& v) {
      std::string t = "(";
      for (size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + std::to_string(v[i]);
      return t + (v.size() == 1 ? ",)" : ")");
    };
    std::string hint;
    if (want.size() == 3 && got.size() == 3 && got[0] == want[2] && got[1] == want[0] &&
        got[2] == want[1]) {
      hint = " (a CHW array: pass a.transpose(1, 2, 0))";
    }
    throw py::value_error(where + ": an array of shape " + text(got) +
                          ", but the writer's shape is " + text(want) + " (H, W, C)" + hint);
  }

  std::string path_;
  Manifest manifest_;
  RecordRule rule_;               // how an added sample becomes its record
  ConversionCounts conversions_;  // of the records written
  int64_t max_label_ = -1;        // the largest label added
  std::unique_ptr<DatasetWriter> writer_;
};

// FFCV's training-resolution ramp (loader/resolution_schedule.h): the
// package's ResolutionSchedule is this class.
void BindResolutionSchedule(py::module_& m) {
  py::class_<ResolutionSchedule>(m, "ResolutionSchedule",
                                 "The training side of each epoch: min_size until start_epoch, "
                                 "max_size from end_epoch, between them a straight line rounded "
                                 "to a multiple of 32 (FFCV's get_resolution). Give it as a "
                                 "Loader's size= and each epoch is read at its side.")
      .def(py::init([](long min_size, long max_size, long start_epoch, long end_epoch) {
             auto made = MakeResolutionSchedule(min_size, max_size, start_epoch, end_epoch);
             if (!made.ok()) {
               throw py::value_error("ResolutionSchedule(" + std::to_string(min_size) + ", " +
                                     std::to_string(max_size) + ", " + std::to_string(start_epoch) +
                                     ", " + std::to_string(end_epoch) +
                                     "): " + made.status().message());
             }
             return *made;
           }),
           py::arg("min_size"), py::arg("max_size"), py::arg("start_epoch"), py::arg("end_epoch"))
      .def(
          "__call__",
          [](const ResolutionSchedule& r, long epoch) {
            if (epoch < 0)
              throw py::value_error("epoch must be >= 0, not " + std::to_string(epoch));
            return r.SizeAt(static_cast<int>(std::min<long>(epoch, INT_MAX)));
          },
          py::arg("epoch"))
      .def_readonly("min_size", &ResolutionSchedule::min_size)
      .def_readonly("max_size", &ResolutionSchedule::max_size)
      .def_readonly("start_epoch", &ResolutionSchedule::start_epoch)
      .def_readonly("end_epoch", &ResolutionSchedule::end_epoch)
      .def("__repr__", [](const ResolutionSchedule& r) {
        return "ResolutionSchedule(" + std::to_string(r.min_size) + ", " +
               std::to_string(r.max_size) + ", " + std::to_string(r.start_epoch) + ", " +
               std::to_string(r.end_epoch) + ")";
      });
}

}  // namespace

PYBIND11_MODULE(_shardkit, m) {
  m.doc() = "shardkit's C++ core; use the `shardkit` package";
  m.attr("__version__") = shardkit::kVersion;
  static py::exception<std::runtime_error> corruption(m, "CorruptionError", PyExc_RuntimeError);
  g_corruption_error = corruption.ptr();

  // The loader's bound on `prefetch`, for the package's prefetch_factor,
  // which DataLoader scripts set per worker and which is capped, not refused.
  m.attr("_MAX_PREFETCH") = kMaxPrefetch;
  m.attr("_DEFAULT_SHARD_SIZE") = DatasetWriterOptions().shard_size;

  py::class_<PyLoader>(m, "_Loader")
      .def(py::init([](const std::string& path, const py::kwargs& options) {
             return std::make_unique<PyLoader>(path, options);
           }),
           py::arg("path"))
      .def("start_epoch", &PyLoader::StartEpoch, py::arg("epoch"), py::arg("start_batch") = 0)
      .def(
          "set_epoch", [](PyLoader& l, uint64_t epoch) { l.loader().SetEpoch(epoch); },
          py::arg("epoch"))
      .def("begin_pass", &PyLoader::BeginPass)
      .def(
          "set_size",
          [](PyLoader& l, int size) {
            Check(WithoutGil([&] { return l.loader().SetSize(size); }));
          },
          py::arg("size"))
      .def("set_epoch_order", &PyLoader::SetEpochOrder, py::arg("epoch"), py::arg("indices"))
      .def_property_readonly("pass_resumes", [](PyLoader& l) { return l.loader().PassResumes(); })
      .def("end_pass", [](PyLoader& l) { l.loader().EndPass(); })
      .def_property_readonly("pass_epoch", [](PyLoader& l) { return l.loader().pass_epoch(); })
      .def("next", &PyLoader::Next)
      .def("stats", &PyLoader::Stats)
      .def("state", &PyLoader::State)
      .def("restore", &PyLoader::Restore, py::arg("state_json"))
      .def("reset_stats", [](PyLoader& l) { l.loader().ResetStats(); })
      .def_property_readonly("pass_samples", [](PyLoader& l) { return l.loader().PassSamples(); })
      .def("pass_records",
           [](PyLoader& l) {
             std::vector<uint64_t> ids = l.loader().PassRecords();
             return py::array_t<int64_t>(static_cast<py::ssize_t>(ids.size()),
                                         reinterpret_cast<const int64_t*>(ids.data()));
           })
      .def_property_readonly("batch_size", [](PyLoader& l) { return l.options().batch_size; })
      .def_property_readonly("seed", [](PyLoader& l) { return l.options().seed; })
      .def_property_readonly("rank", [](PyLoader& l) { return l.options().rank; })
      .def_property_readonly("world_size", [](PyLoader& l) { return l.options().world_size; })
      .def_property_readonly("epoch", [](PyLoader& l) { return l.loader().epoch(); })
      .def_property_readonly("next_batch", [](PyLoader& l) { return l.loader().next_batch(); })
      .def_property_readonly("batches_per_epoch",
                             [](PyLoader& l) { return l.loader().batches_per_epoch(); })
      .def_property_readonly("samples_per_epoch",
                             [](PyLoader& l) { return l.loader().samples_per_epoch(); })
      .def_property_readonly("dataset_records",
                             [](PyLoader& l) { return l.loader().dataset_records(); })
      .def_property_readonly("shape",
                             [](PyLoader& l) {
                               return py::make_tuple(l.loader().channels(), l.loader().height(),
                                                     l.loader().width());
                             })
      .def_property_readonly("shuffle_mode",
                             [](PyLoader& l) { return ShuffleModeName(l.loader().shuffle_mode()); })
      .def_property_readonly("shuffle_reason",
                             [](PyLoader& l) { return l.loader().shuffle_reason(); });

  BindResolutionSchedule(m);

  py::class_<PyDataset>(m, "_Dataset")
      .def(py::init<const std::string&, int64_t>(), py::arg("path"),
           py::arg("block_cache_bytes") = static_cast<int64_t>(RecordReader::kDefaultCacheBytes))
      .def("__len__", &PyDataset::size)
      .def("item", &PyDataset::Item, py::arg("index"))
      .def("get", &PyDataset::Get, py::arg("index"))
      .def_property_readonly("blocks_decompressed", &PyDataset::blocks_decompressed)
      .def_property_readonly("classes", [](PyDataset& d) { return d.manifest().classes; })
      .def_property_readonly("kind",
                             [](PyDataset& d) { return RecordKindName(d.manifest().record.kind); })
      .def_property_readonly("shape", [](PyDataset& d) { return d.manifest().record.shape; })
      .def_property_readonly("manifest_json",
                             [](PyDataset& d) { return ManifestToJson(d.manifest()); });

  py::class_<PyWriter>(m, "_Writer")
      .def(py::init<const std::string&, const std::string&, std::vector<int64_t>,
                    std::vector<std::string>, int64_t, const std::string&, bool,
                    const std::string&>(),
           py::arg("path"), py::arg("kind"), py::arg("shape"), py::arg("classes"),
           py::arg("shard_size"), py::arg("compression"), py::arg("overwrite"),
           py::arg("created_by"))
      .def("add", &PyWriter::Add, py::arg("data"), py::arg("label"), py::arg("key") = py::none())
      .def("close", &PyWriter::Close)
      .def("abort", &PyWriter::Abort)
      .def_property_readonly("records", &PyWriter::records)
      .def_property_readonly("converted", &PyWriter::converted);
}
