// FlatMap: an open-addressing hash map from a 64-bit key to an int32 value, for the drafters'
// hot indexes (n-gram end positions, suffix-tree edges). Linear probing over two flat arrays,
// doubled at half load, no erase (the drafters only add, or drop a whole index). Key 0 is kept
// free to mark empty slots, so keys are stored as key + 1 (a key of 2^64 - 1 would wrap: the
// callers' keys never use the top bit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem::spec {

class FlatMap {
 public:
  explicit FlatMap(std::size_t initial_capacity = 64) { reset(initial_capacity); }

  /** Value for `key`, or `missing` when absent. */
  int32_t get(uint64_t key, int32_t missing = -1) const {
    const uint64_t k = key + 1;
    for (std::size_t i = slot(k);; i = (i + 1) & mask_) {
      if (keys_[i] == k) return vals_[i];
      if (keys_[i] == 0) return missing;
    }
  }

  /** Sets key's value (insert or overwrite). */
  void put(uint64_t key, int32_t value) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    const uint64_t k = key + 1;
    for (std::size_t i = slot(k);; i = (i + 1) & mask_) {
      if (keys_[i] == k) {
        vals_[i] = value;
        return;
      }
      if (keys_[i] == 0) {
        keys_[i] = k;
        vals_[i] = value;
        ++size_;
        return;
      }
    }
  }

  std::size_t size() const { return size_; }
  std::size_t bytes() const { return keys_.capacity() * sizeof(uint64_t) + vals_.capacity() * sizeof(int32_t); }

  void reset(std::size_t capacity) {
    std::size_t c = 16;
    while (c < capacity) c *= 2;
    keys_.assign(c, 0);
    vals_.assign(c, 0);
    mask_ = c - 1;
    size_ = 0;
  }

  /** A well-mixed 64-bit hash (splitmix64's finalizer), for building keys. */
  static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }

 private:
  std::size_t slot(uint64_t k) const { return static_cast<std::size_t>(mix(k)) & mask_; }

  void grow() {
    std::vector<uint64_t> keys;
    std::vector<int32_t> vals;
    keys.swap(keys_);
    vals.swap(vals_);
    reset(keys.size() * 2);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] != 0) put(keys[i] - 1, vals[i]);
    }
  }

  std::vector<uint64_t> keys_;
  std::vector<int32_t> vals_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace tandem::spec
