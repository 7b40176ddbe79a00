// resample_ab: two commits' resamplers side by side, in the loader's own
// conditions (bench/resample_ab.sh builds the sides and runs this).
//
//   resample_ab OLD.so NEW.so DIR [--transform train|val] [--rounds 7]
//                                 [--samples 1024]
//
// For each of the first `samples` positions of epoch 0 of the JPEG dataset
// DIR, in order, it decodes the record as the loader does
// (SampleDecoder::DecodeRegion: the crop's rows and columns at the DCT
// scale the transform picks), then times one side's resample of that fresh
// decode into the 224x224 output; then decodes again and times the other
// side (the first side alternating), so both start from the cache state the
// loader's resample does. Per round: each side's microseconds per image;
// then the best and median round per side and the median of the rounds'
// new/old ratios, and whether both sides wrote the same bytes (exit 1 if
// not).
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "loader/sample_decoder.h"
#include "shard/dataset.h"

namespace shardkit {
namespace {

using SideFn = double (*)(const void*, double, double, double, double, int, int, int, uint8_t*);
using LayoutFn = size_t (*)();

struct Side {
  std::string path;
  SideFn resample = nullptr;
  std::vector<double> rounds;  // us per image
  std::vector<uint8_t> out;
  uint32_t digest = 2166136261u;
};

int Fail(const std::string& why) {
  std::fprintf(stderr, "resample_ab: error: %s\n", why.c_str());
  return 2;
}

bool Load(Side* s, std::string* error) {
  void* h = dlopen(s->path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return (*error = dlerror(), false);
  s->resample = reinterpret_cast<SideFn>(dlsym(h, "resample_side"));
  auto layout = reinterpret_cast<LayoutFn>(dlsym(h, "resample_side_image_layout"));
  if (s->resample == nullptr || layout == nullptr)
    return (*error = s->path + ": not a resample_ab side", false);
  const size_t mine =
      sizeof(Image) * 1000000 + offsetof(Image, pixels) * 1000 + offsetof(Image, channels);
  if (layout() != mine) return (*error = s->path + ": its Image is laid out otherwise", false);
  return true;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Run(int argc, char** argv) {
  if (argc < 4)
    return Fail(
        "usage: resample_ab OLD.so NEW.so DIR [--transform train|val] [--rounds N] "
        "[--samples N]");
  Side sides[2];
  sides[0].path = argv[1];
  sides[1].path = argv[2];
  const std::string dir = argv[3];
  TransformParams transform;
  transform.kind = TransformKind::kTrain;
  int rounds = 7;
  uint64_t samples = 1024;
  for (int i = 4; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], v = argv[i + 1];
    if (flag == "--transform") {
      if (!TransformKindFromName(v, &transform.kind) ||
          (transform.kind != TransformKind::kTrain && transform.kind != TransformKind::kVal))
        return Fail("--transform must be train or val");
    } else if (flag == "--rounds") {
      rounds = std::max(1, std::atoi(v.c_str()));
    } else if (flag == "--samples") {
      samples = std::max(1, std::atoi(v.c_str()));
    } else {
      return Fail("unknown flag " + flag);
    }
  }
  std::string error;
  for (Side& s : sides) {
    if (!Load(&s, &error)) return Fail(error);
  }
  auto ds = Dataset::Open(dir);
  if (!ds.ok()) return Fail(ds.status().ToString());
  auto decoder = SampleDecoder::Make((*ds)->manifest().record, transform, Layout::kNCHW, 0, dir);
  if (!decoder.ok()) return Fail(decoder.status().ToString());
  if (!decoder->jpeg()) return Fail(dir + ": not a JPEG dataset");
  std::vector<std::string> payloads;
  ReadScratch scratch;
  for (uint64_t r = 0; r < std::min(samples, (*ds)->num_records()); ++r) {
    const auto [shard, local] = (*ds)->Locate(r);
    std::string_view v;
    if (Status st = (*ds)->shard(shard).ReadRecord(local, &scratch, &v); !st.ok())
      return Fail(st.ToString());
    payloads.emplace_back(v);
  }
  SampleDecoder::State state;
  for (Side& s : sides) s.out.resize(decoder->sample_bytes());
  for (int round = 0; round <= rounds; ++round) {  // round 0 warms up, untimed
    double total[2] = {0, 0};
    for (uint64_t p = 0; p < payloads.size(); ++p) {
      for (int k = 0; k < 2; ++k) {
        Side& s = sides[(p + k) % 2];
        CropDecision crop;
        if (Status st = decoder->DecodeRegion(state, payloads[p], 0, p, &crop); !st.ok())
          return Fail(st.ToString());
        const RectF& c = state.region.crop;
        total[(p + k) % 2] += s.resample(&state.region.image, c.x, c.y, c.w, c.h, crop.flip,
                                         decoder->width(), decoder->height(), s.out.data());
        if (round == 0) {
          for (uint8_t b : s.out) s.digest = (s.digest ^ b) * 16777619u;
        }
      }
    }
    if (round == 0) continue;
    for (int k = 0; k < 2; ++k) sides[k].rounds.push_back(total[k] / payloads.size());
    std::printf("round %d: old %.1f us/img  new %.1f us/img\n", round, sides[0].rounds.back(),
                sides[1].rounds.back());
  }
  std::vector<double> ratio;
  for (int i = 0; i < rounds; ++i) ratio.push_back(sides[1].rounds[i] / sides[0].rounds[i]);
  const bool same = sides[0].digest == sides[1].digest;
  std::printf(
      "| %s, %zu images | old us/img (best / median) | new us/img (best / median) | "
      "new/old (median of rounds) | bytes |\n|---|---:|---:|---:|---|\n",
      transform.kind == TransformKind::kTrain ? "train" : "val", payloads.size());
  std::printf("| resample | %.1f / %.1f | %.1f / %.1f | %.3f | %s |\n",
              *std::min_element(sides[0].rounds.begin(), sides[0].rounds.end()),
              Median(sides[0].rounds),
              *std::min_element(sides[1].rounds.begin(), sides[1].rounds.end()),
              Median(sides[1].rounds), Median(ratio), same ? "the same" : "DIFFERENT");
  return same ? 0 : 1;
}

}  // namespace
}  // namespace shardkit

int main(int argc, char** argv) { return shardkit::Run(argc, argv); }
