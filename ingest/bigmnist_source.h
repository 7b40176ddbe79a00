// bigMNIST as a SampleSource: an MNIST-format training set, each image
// distorted into versions (ingest/bigmnist_distort.h) and replicated into copies, in
// the seeded order of ingest/bigmnist_plan.h, as raw_u8 records keyed
// "index/version/copy". The Packer writes it as it writes any source.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "ingest/bigmnist_distort.h"
#include "ingest/bigmnist_plan.h"
#include "ingest/idx_file.h"
#include "ingest/source.h"

namespace shardkit {

// train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz] in `dir`,
// single-channel.
Result<IdxDataset> ReadBigMnistImages(const std::string& dir);

// One thread's buffers for BigMnistSource::Make.
struct BigMnistScratch {
  AugmentScratch augment;
  std::vector<uint8_t> pixels;
  char key[64];
};

// Not thread-safe, except Make.
class BigMnistSource : public SampleSource {
 public:
  // The first plan.n images of `src` (plan.h x plan.w, as src's); `threads`
  // compute records (0: all cores); the bytes do not depend on them.
  BigMnistSource(std::string name, IdxDataset src, const Plan& plan, int threads);

  std::string name() const override { return name_; }
  RecordSpec spec() const override;
  Status SetRange(uint64_t first, uint64_t end) override;
  Result<std::string> Settings() const override;
  // Augments the table first (identical copies, once), then adds records
  // [first, end) of the output in order.
  Result<Listing> Scan(SampleSink* sink) override;

  // Identical copies: every (source, version) augmented once, held in
  // memory (plan.n x versions images), before Make or Scan; `progress` gets
  // images done of total. Distinct copies hold nothing: a no-op.
  void AugmentTable(const std::function<void(uint64_t done, uint64_t total)>& progress);
  // Record `pos` of the output: its label in *label, its key in s->key, and
  // its pixels (plan.item() bytes, valid until s is used again).
  // Thread-safe once AugmentTable has run.
  const uint8_t* Make(uint64_t pos, BigMnistScratch* s, int32_t* label) const;

  const IdxDataset& images() const { return src_; }
  const Plan& plan() const { return plan_; }
  // "0" up to the largest label of the images used.
  std::vector<std::string> classes() const;

 private:
  std::string name_;
  IdxDataset src_;
  Plan plan_;
  int threads_;
  Order order_;
  std::vector<uint8_t> table_;  // AugmentTable's, identical copies only
  bool table_ready_ = false;
  uint64_t first_ = 0, end_ = 0;  // SetRange's; end 0: every record
};

}  // namespace shardkit
