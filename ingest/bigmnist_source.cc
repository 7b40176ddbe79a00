// bigMNIST's records, made in parallel blocks and handed to the sink in order.
#include "ingest/bigmnist_source.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "base/crc32c.h"
#include "base/openmp.h"
#include "ingest/input_id.h"
#include "shard/manifest.h"  // Crc32cHex
#include "storage/file_io.h"

namespace shardkit {

Result<IdxDataset> ReadBigMnistImages(const std::string& dir) {
  auto find = [&](const std::string& stem) -> std::string {
    for (const char* ext : {"", ".gz"}) {
      if (Env::Default()->FileExists(JoinPath(dir, stem + ext))) return JoinPath(dir, stem + ext);
    }
    return "";
  };
  const std::string images = find("train-images-idx3-ubyte"),
                    labels = find("train-labels-idx1-ubyte");
  if (images.empty() || labels.empty()) {
    return Status::NotFound(dir +
                            ": no train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz]");
  }
  SK_ASSIGN_OR_RETURN(IdxDataset ds, ReadIdxDataset(images, labels));
  if (ds.channels != 1)
    return Status::InvalidArgument(images + ": bigMNIST needs single-channel images");
  return ds;
}

BigMnistSource::BigMnistSource(std::string name, IdxDataset src, const Plan& plan, int threads)
    : name_(std::move(name)),
      src_(std::move(src)),
      plan_(plan),
      threads_(threads > 0 ? threads : omp_get_max_threads()),
      order_(plan_) {}

RecordSpec BigMnistSource::spec() const {
  RecordSpec r;
  r.kind = format::RecordKind::kRawU8;
  r.shape = {plan_.h, plan_.w, 1};
  r.source_order = true;
  r.records = plan_.total();
  return r;
}

namespace {

// The ranges the recipe draws from.
nlohmann::json TransformsJson(const AugmentParams& p) {
  if (p.recipe == Recipe::kRcc) {
    return {{"views", {"original", "rotation", "translation", "scale", "hflip", "elastic"}},
            {"rotation_deg", kRcc.rotation_deg},
            {"translate_frac", kRcc.translate_frac},
            {"scale", {kRcc.scale_min, kRcc.scale_max}},
            {"elastic_alpha", kRcc.elastic_alpha},
            {"elastic_sigma", kRcc.elastic_sigma},
            {"elastic", "torchvision"},
            {"resampling", p.interpolation == Interpolation::kNearest
                               ? "nearest (rotation, scale), bilinear (elastic)"
                               : "bilinear"}};
  }
  return {{"rotation_deg", p.rotation_deg},
          {"shear", p.shear},
          {"translate_px", p.translate_px},
          {"scale", {p.scale_min, p.scale_max}},
          {"flip_prob", p.flip_prob},
          {"elastic_alpha", p.elastic_alpha},
          {"elastic_sigma", p.elastic_sigma},
          {"resampling", NameOf(kInterpolationNames, p.interpolation)}};
}

}  // namespace

// The images used by content (the CRC32C of their pixels and labels, not
// the files' path), the counts, the seed, the recipe and its ranges, the
// copies' mode; the records as shards.
Result<std::string> BigMnistSource::Settings() const {
  const Plan& p = plan_;
  const uint32_t pixels_crc = crc32c::Value(src_.images.data.data(), p.n * p.item()),
                 labels_crc = crc32c::Value(src_.labels.data.data(), p.n);
  return SettingsText({{"tool", "shardkit-augment bigmnist"},
                       {"source",
                        {{"images", p.n},
                         {"height", p.h},
                         {"width", p.w},
                         {"pixels_crc32c", Crc32cHex(pixels_crc)},
                         {"labels_crc32c", Crc32cHex(labels_crc)}}},
                       {"versions", p.versions},
                       {"copies", p.copies},
                       {"seed", p.seed},
                       {"recipe", NameOf(kRecipeNames, p.params.recipe)},
                       {"transforms", TransformsJson(p.params)},
                       {"distinct_copies", p.distinct_copies},
                       {"format", "shards"}});
}

Status BigMnistSource::SetRange(uint64_t first, uint64_t end) {
  if (first >= end || end > plan_.total()) {
    return Status::InvalidArgument(name_ + ": no records " + std::to_string(first) + ".." +
                                   std::to_string(end) + " (it makes " +
                                   std::to_string(plan_.total()) + ")");
  }
  first_ = first;
  end_ = end;
  return Status::OK();
}

std::vector<std::string> BigMnistSource::classes() const {
  uint8_t max_label = 0;
  for (uint8_t l : src_.labels.data) max_label = std::max(max_label, l);
  std::vector<std::string> names;
  for (int c = 0; c <= max_label; ++c) names.push_back(std::to_string(c));
  return names;
}

void BigMnistSource::AugmentTable(
    const std::function<void(uint64_t done, uint64_t total)>& progress) {
  if (plan_.distinct_copies || table_ready_) return;
  const uint64_t count = plan_.n * plan_.versions;
  const size_t item = plan_.item();
  table_.assign(count * item, 0);
  std::atomic<uint64_t> done{0};
#pragma omp parallel num_threads(threads_)
  {
    AugmentScratch scratch;
#pragma omp for schedule(dynamic, 256)
    for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) {
      const uint64_t index = static_cast<uint64_t>(k) / plan_.versions,
                     version = static_cast<uint64_t>(k) % plan_.versions;
      const SampleTransform t =
          DrawTransform(plan_.params, plan_.Key(index, version, 0), plan_.w, plan_.h);
      ApplyTransform(src_.images.data.data() + index * item, plan_.w, plan_.h, t,
                     table_.data() + k * item, &scratch);
      const uint64_t d = done.fetch_add(1) + 1;
      if ((d & 4095) == 0 && progress && omp_get_thread_num() == 0) progress(d, count);
    }
  }
  if (progress) progress(count, count);
  table_ready_ = true;
}

const uint8_t* BigMnistSource::Make(uint64_t pos, BigMnistScratch* s, int32_t* label) const {
  uint64_t index, version, copy;
  order_.At(pos, &index, &version, &copy);
  std::snprintf(s->key, sizeof(s->key), "%llu/%llu/%llu", (unsigned long long)index,
                (unsigned long long)version, (unsigned long long)copy);
  *label = src_.labels.data[index];
  const size_t item = plan_.item();
  if (!plan_.distinct_copies) return table_.data() + (index * plan_.versions + version) * item;
  const SampleTransform t =
      DrawTransform(plan_.params, plan_.Key(index, version, copy), plan_.w, plan_.h);
  s->pixels.resize(item);
  ApplyTransform(src_.images.data.data() + index * item, plan_.w, plan_.h, t, s->pixels.data(),
                 &s->augment);
  return s->pixels.data();
}

Result<Listing> BigMnistSource::Scan(SampleSink* sink) {
  const size_t item = plan_.item();
  AugmentTable([&](uint64_t done, uint64_t total) { sink->Read(done * item, total * item); });
  const uint64_t end = end_ > 0 ? end_ : plan_.total();
  const uint64_t block = 256 * static_cast<uint64_t>(threads_);
  std::vector<uint8_t> pixels(block * item);
  std::vector<int32_t> labels(block);
  std::vector<std::array<char, sizeof(BigMnistScratch::key)>> keys(block);
  std::vector<BigMnistScratch> scratch(threads_);
  for (uint64_t first = first_; first < end; first += block) {
    SK_RETURN_IF_ERROR(sink->Interrupted());
    const int64_t n = static_cast<int64_t>(std::min(block, end - first));
#pragma omp parallel for num_threads(threads_) if (threads_ > 1)
    for (int64_t k = 0; k < n; ++k) {
      BigMnistScratch& s = scratch[omp_get_thread_num()];
      std::memcpy(pixels.data() + k * item, Make(first + k, &s, &labels[k]), item);
      std::memcpy(keys[k].data(), s.key, sizeof(s.key));
    }
    for (int64_t k = 0; k < n; ++k) {
      Sample sample;
      sample.key = keys[k].data();
      sample.name = name_ + "[" + sample.key + "]";
      sample.label = labels[k];
      SK_RETURN_IF_ERROR(
          sink->Add(std::move(sample),
                    std::string(reinterpret_cast<const char*>(pixels.data() + k * item), item)));
    }
    sink->Read((first + n - first_) * item, (end - first_) * item);
  }
  Listing listing;
  listing.classes = classes();
  return listing;
}

}  // namespace shardkit
