// Counter-based random numbers and keyed permutations. A stream is keyed by a
// tuple of integers (seed, epoch, sample...), so a value depends only on its
// key, never on which thread drew it or in what order: each draw is
// SplitMix64(key, counter).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace shardkit {

inline uint64_t Mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A reproducible stream of random numbers for one key.
class KeyedRng {
 public:
  KeyedRng(uint64_t a, uint64_t b = 0, uint64_t c = 0, uint64_t d = 0)
      : key_(Mix64(Mix64(Mix64(Mix64(a) ^ b) ^ c) ^ d)) {}
  uint64_t Next() { return Mix64(key_ + 0x632BE59BD9B4E019ull * ++counter_); }
  // Uniform in [0, 1).
  double Uniform() { return (Next() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift, unbiased enough for n < 2^32).
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

// Fisher-Yates shuffle driven by a KeyedRng: the same key gives the same order on every platform.
template <typename T>
void KeyedShuffle(std::vector<T>* v, KeyedRng rng) {
  for (size_t i = v->size(); i > 1; --i) {
    size_t j = static_cast<size_t>(rng.Below(i));
    std::swap((*v)[i - 1], (*v)[j]);
  }
}

// A bijection on [0, n) keyed by (key0, key1), evaluated in O(1) without
// materialising it: a balanced Feistel network on the smallest even number of
// bits that covers n, with cycle walking back into [0, n). Full shuffles of any
// size cost no memory; the same key gives the same permutation everywhere.
class KeyedPermutation {
 public:
  KeyedPermutation() = default;
  KeyedPermutation(uint64_t n, uint64_t key0, uint64_t key1) : n_(n) {
    int bits = 2;
    while (bits < 64 && (uint64_t{1} << bits) < n) bits += 2;
    half_bits_ = bits / 2;
    half_mask_ = (uint64_t{1} << half_bits_) - 1;
    KeyedRng rng(key0, key1, 0xFE15E1);
    for (auto& k : keys_) k = rng.Next();
  }
  // The image of i, for i < size().
  uint64_t operator()(uint64_t i) const {
    if (n_ <= 1) return i;
    uint64_t x = i;
    do {
      uint64_t l = x >> half_bits_, r = x & half_mask_;
      for (int round = 0; round < 4; ++round) {
        const uint64_t next = l ^ (Mix64(r ^ keys_[round]) & half_mask_);
        l = r;
        r = next;
      }
      x = (l << half_bits_) | r;
    } while (x >= n_);
    return x;
  }
  uint64_t size() const { return n_; }

 private:
  uint64_t n_ = 0;
  int half_bits_ = 0;
  uint64_t half_mask_ = 0;
  uint64_t keys_[4] = {0, 0, 0, 0};
};

}  // namespace shardkit
