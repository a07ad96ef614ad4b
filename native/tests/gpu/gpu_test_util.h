// What the GPU kernel checks share: the device under test (the SIMT harness unless
// TANDEM_TEST_DEVICE=cuda), typed device arrays, seeded random data that is exactly
// representable in bf16, and error measures.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../../src/cuda/bf16.h"
#include "../../src/cuda/device.h"
#include "../../src/cuda/kernel_api.h"
#include "../check.h"

namespace tandem_test::gpu {

using tandem::gpu::bf16_bits;

/** The device and kernels under test. */
struct Gpu {
  std::unique_ptr<tandem::gpu::Device> device;
  std::unique_ptr<tandem::gpu::KernelApi> kernels;
  std::string name;  // "simt" or "cuda"

  static Gpu open() {
    const char* env = std::getenv("TANDEM_TEST_DEVICE");
    const std::string want = env != nullptr && std::string(env).rfind("cuda", 0) == 0 ? "cuda" : "simt";
    Gpu g;
    g.name = want;
    if (want == "cuda") {
      g.device = tandem::gpu::make_cuda_device(0);
      g.kernels = tandem::gpu::make_cuda_kernels();
    } else {
      g.device = tandem::gpu::make_simt_device();
      g.kernels = tandem::gpu::make_simt_kernels();
    }
    return g;
  }
  void* stream() { return device->stream(); }
};

/** A device array that frees itself. */
template <typename T>
class DeviceArray {
 public:
  DeviceArray(tandem::gpu::Device& d, size_t n) : dev_(&d), n_(n), p_(static_cast<T*>(d.alloc(n * sizeof(T)))) {}
  DeviceArray(tandem::gpu::Device& d, const std::vector<T>& host) : DeviceArray(d, host.size()) { upload(host); }
  ~DeviceArray() { dev_->free(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    dev_->upload(p_, host.data(), host.size() * sizeof(T));
    dev_->synchronize();
  }
  std::vector<T> download() const {
    std::vector<T> out(n_);
    dev_->download(out.data(), p_, n_ * sizeof(T));
    dev_->synchronize();
    return out;
  }
  /** Fills every byte with `byte` (0xFF: NaN in f32 and bf16, so unwritten outputs show). */
  void poison(int byte = 0xFF) {
    dev_->fill(p_, byte, n_ * sizeof(T));
    dev_->synchronize();
  }

 private:
  tandem::gpu::Device* dev_;
  size_t n_;
  T* p_;
};

/** Elements whose bits differ between two float (or bf16) arrays; NaN patterns must match too. */
template <typename T>
inline size_t count_bit_diffs(const std::vector<T>& a, const std::vector<T>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return n + (a.size() != b.size());
}

/** Seeded normal floats rounded to bf16, so the CPU reference sees exactly what the device reads. */
inline std::vector<float> random_bf16_floats(std::mt19937& rng, size_t n, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = tandem::gpu::round_to_bf16(dist(rng));
  return v;
}

inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<bf16_bits> to_bf16(const std::vector<float>& v) {
  std::vector<bf16_bits> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = tandem::gpu::float_to_bf16_bits(v[i]);
  return out;
}

inline std::vector<float> from_bf16(const std::vector<bf16_bits>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = tandem::gpu::bf16_bits_to_float(v[i]);
  return out;
}

/** max |a - b| / max(1, |b|) over the elements; NaN anywhere gives +inf. */
inline double max_rel_error(const float* got, const float* want, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) return INFINITY;
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]) / std::max(1.0, std::fabs(static_cast<double>(want[i])));
    worst = std::max(worst, e);
  }
  return worst;
}

/**
 * A "far" KV pool: block ids raised by far_pool_blocks(block_stride), so that every element
 * offset a kernel computes passes 2^32, and the pool's base moved back by as many elements
 * (far_pool_base), so the same memory is addressed. A KV offset computed in 32 bits lands
 * elsewhere and fails the check, as it would on a GPU whose pool passes 2^31 elements (an 8B
 * model's bf16 pool at 64 x 8k tokens is 2^35). Host addresses only (the SIMT device): they sit
 * far enough above zero for the base to move back by 2^33 bytes.
 */
inline int64_t far_pool_blocks(int64_t block_stride) { return (int64_t{1} << 32) / block_stride + 3; }
template <typename T>
inline T* far_pool_base(T* pool, int64_t elements, size_t elem_bytes = sizeof(T)) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(pool) - static_cast<uintptr_t>(elements) * elem_bytes);
}

/** One bf16 rounding of a value of magnitude <= 1: 2^-8 relative, doubled for margin. */
inline constexpr double kBf16Tolerance = 1.0 / 128;

}  // namespace tandem_test::gpu
