// The dialect every kernel in kernels/ is written in. One source, two targets:
//   - nvcc (CUDA): TD_CUDA. The macros are CUDA's own keywords, warp collectives are the
//     intrinsics, and the tensor-core paths are inline PTX (cp.async, ldmatrix, mma.sync).
//   - any C++17 compiler (the SIMT harness, simt/harness.h): TD_SIMT. Kernels are host
//     functions run once per emulated thread; __syncthreads and every warp collective are
//     barriers between fibers; ldmatrix and mma.sync are computed from all lanes' operands
//     with the fragment layouts of the PTX ISA, so the tiling and indexing around them are
//     checked on the CPU and only the instructions themselves need a GPU.
// Rules for kernel code, so both targets mean the same thing:
//   - shared memory only through TD_SHARED / TD_SHARED_2D / TD_DYNAMIC_SHARED, declared at the
//     kernel's top level (the SIMT target hands out arena space in declaration order);
//   - 1-D blocks whose size is a multiple of 32; collectives with the full warp;
//   - no early return before a barrier; no dependence on blocks running concurrently, or in any
//     order (the harness shuffles them);
//   - in a kernel launched by td::launch_dependent, every thread calls td::grid_dependency_wait
//     before it exits (the harness checks);
//   - math through td:: (rsqrt, exp_fast) or <cmath> names valid on both (expf, logf, sqrtf);
//   - fences through td:: (threadfence_system before a flag the host or a peer polls).
// Each target puts the kernels in its own namespace (TD_NS) so both link into one binary.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "bf16.h"

#if defined(__CUDACC__) && !defined(TANDEM_SIMT)

#define TD_CUDA 1
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define TD_NS cuda_target
#define TD_GLOBAL __global__
#define TD_DEVICE __device__ __forceinline__
#define TD_LAUNCH_BOUNDS(n) __launch_bounds__(n)
#define TD_SHARED(T, name, n) __shared__ __align__(16) T name[n]
#define TD_SHARED_2D(T, name, n1, n2) __shared__ __align__(16) T name[n1][n2]
#define TD_DYNAMIC_SHARED(T, name)                                   \
  extern __shared__ __align__(16) unsigned char td_dynamic_smem_[]; \
  T* name = reinterpret_cast<T*>(td_dynamic_smem_)

namespace tandem::gpu::td {

struct alignas(16) vec16 {
  uint32_t x, y, z, w;
};

TD_DEVICE void sync_threads() { __syncthreads(); }
TD_DEVICE void sync_warp() { __syncwarp(); }
TD_DEVICE unsigned lane_id() { return threadIdx.x & 31u; }
template <typename T>
TD_DEVICE T shfl_xor(T v, int lane_mask) { return __shfl_xor_sync(0xffffffffu, v, lane_mask); }
template <typename T>
TD_DEVICE T shfl(T v, int src_lane) { return __shfl_sync(0xffffffffu, v, src_lane); }
TD_DEVICE float bits_to_float(uint32_t u) { return __uint_as_float(u); }
TD_DEVICE uint32_t float_to_bits(float f) { return __float_as_uint(f); }
TD_DEVICE float rsqrt(float x) { return rsqrtf(x); }
TD_DEVICE float exp_fast(float x) { return __expf(x); }
TD_DEVICE int atomic_add(int* p, int v) { return atomicAdd(p, v); }
// Orders this thread's earlier writes before its later ones for every observer: other GPUs
// (peer mappings) and the host (mapped pinned memory). Before a flag another agent polls.
TD_DEVICE void threadfence_system() { __threadfence_system(); }

// Programmatic dependent launch (sm_90+; td::launch_dependent): a kernel launched as a
// dependent of the one before it may start while that one still runs. grid_dependency_wait
// returns once the kernel before has finished and its writes are visible; nothing the kernel
// before writes may be read, and nothing it reads written, before it. It returns at once for
// a kernel launched the ordinary way. grid_dependents_launch lets the next dependent start.
TD_DEVICE void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
TD_DEVICE void grid_dependents_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::);
#endif
}
// Asks L2 for the 128-byte line holding p (read-only data the kernel reads soon).
TD_DEVICE void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

// Asynchronous 16-byte global -> shared copy; with pred false the destination is zeroed and
// nothing is read.
TD_DEVICE void cp_async16(void* smem, const void* gmem, bool pred) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
TD_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
TD_DEVICE void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// ldmatrix .x4: lanes 8i..8i+7 give the row addresses of matrix i (8 rows of 8 b16 each);
// lane l receives row l/4, columns 2(l%4) and 2(l%4)+1 of matrix i in r[i].
TD_DEVICE void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// ldmatrix .x4 .trans: the same row addresses, each 8x8 matrix transposed on the way: lane l
// receives elements (row 2(l%4), column l/4) and (row 2(l%4)+1, column l/4) of matrix i in r[i].
TD_DEVICE void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_row) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// D = A(16x16, row) * B(16x8, col) + C, bf16 inputs, f32 accumulators (PTX fragment layout).
TD_DEVICE void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

}  // namespace tandem::gpu::td

#else  // the SIMT harness

#define TD_SIMT 1
#include "simt/harness.h"

#define TD_NS simt_target
#define TD_GLOBAL
#define TD_DEVICE inline
#define TD_LAUNCH_BOUNDS(n)
#define threadIdx (::tandem::simt::current().thread_idx)
#define blockIdx (::tandem::simt::current().block_idx)
#define blockDim (::tandem::simt::current().block_dim)
#define gridDim (::tandem::simt::current().grid_dim)
#define TD_SHARED(T, name, n) T* name = static_cast<T*>(::tandem::simt::shared_alloc(sizeof(T) * (n), 16))
#define TD_SHARED_2D(T, name, n1, n2) \
  T(*name)[n2] = reinterpret_cast<T(*)[n2]>(::tandem::simt::shared_alloc(sizeof(T) * (n1) * (n2), 16))
#define TD_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::tandem::simt::dynamic_shared())

namespace tandem::gpu::td {

struct alignas(16) vec16 {
  uint32_t x, y, z, w;
};

inline void sync_threads() { ::tandem::simt::sync_threads(); }
inline void sync_warp() { ::tandem::simt::sync_warp(); }
inline unsigned lane_id() { return ::tandem::simt::current().lane; }
template <typename T>
inline T shfl_xor(T v, int lane_mask) {
  ::tandem::simt::WarpOp op(v);
  return op.get<T>(lane_id() ^ static_cast<unsigned>(lane_mask));
}
template <typename T>
inline T shfl(T v, int src_lane) {
  ::tandem::simt::WarpOp op(v);
  return op.get<T>(static_cast<unsigned>(src_lane) & 31u);
}
inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }
inline float exp_fast(float x) { return std::exp(x); }
inline int atomic_add(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
// The host's fence: fibers and the host threads that poll share one memory.
inline void threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
// Launches run one after another on the harness: nothing to wait for (the harness records the
// wait, to hold dependent launches to it), nothing to prefetch.
inline void grid_dependency_wait() { ::tandem::simt::grid_dependency_wait(); }
inline void grid_dependents_launch() {}
inline void prefetch_l2(const void*) {}

// cp.async lands at the wait_group that covers its group, as on the GPU (simt/harness.h).
inline void cp_async16(void* smem, const void* gmem, bool pred) { ::tandem::simt::cp_async_copy(smem, gmem, pred); }
inline void cp_async_commit() { ::tandem::simt::cp_async_commit(); }
template <int N>
inline void cp_async_wait() {
  ::tandem::simt::cp_async_wait(N);
}

inline void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
  ::tandem::simt::check_shared16(smem_row, 16, "ldmatrix");
  ::tandem::simt::WarpOp op(smem_row);
  const unsigned lane = lane_id();
  for (unsigned i = 0; i < 4; ++i) {
    const auto* row = static_cast<const unsigned char*>(op.get<const void*>(i * 8 + lane / 4));
    std::memcpy(&r[i], row + (lane % 4) * 4, 4);
  }
}

inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_row) {
  ::tandem::simt::check_shared16(smem_row, 16, "ldmatrix");
  ::tandem::simt::WarpOp op(smem_row);
  const unsigned lane = lane_id();
  for (unsigned i = 0; i < 4; ++i) {
    uint16_t lo, hi;
    const auto* row0 = static_cast<const unsigned char*>(op.get<const void*>(i * 8 + 2 * (lane % 4)));
    const auto* row1 = static_cast<const unsigned char*>(op.get<const void*>(i * 8 + 2 * (lane % 4) + 1));
    std::memcpy(&lo, row0 + (lane / 4) * 2, 2);
    std::memcpy(&hi, row1 + (lane / 4) * 2, 2);
    r[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
}

inline void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4]) {
  struct Frag {
    uint32_t a[4];
    uint32_t b[2];
  };
  Frag mine{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}};
  ::tandem::simt::WarpOp op(mine);
  Frag all[32];
  for (unsigned l = 0; l < 32; ++l) all[l] = op.get<Frag>(l);
  // A(row, k): lane (row%8)*4 + (k%8)/2, register (row>=8) + 2(k>=8), half k%2.
  // B(k, n):   lane n*4 + (k%8)/2, register (k>=8), half k%2.
  auto half = [](uint32_t w, int k) { return bits_to_float((k & 1) ? (w & 0xffff0000u) : (w << 16)); };
  const unsigned lane = lane_id();
  const int g = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0);
    const int col = 2 * t + (i & 1);
    float acc = c[i];
    for (int k = 0; k < 16; ++k) {
      const float av = half(all[(row % 8) * 4 + (k % 8) / 2].a[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k);
      const float bv = half(all[col * 4 + (k % 8) / 2].b[k >= 8 ? 1 : 0], k);
      acc += av * bv;
    }
    d[i] = acc;
  }
}

}  // namespace tandem::gpu::td

#endif

namespace tandem::gpu::td {

using bf16_bits = ::tandem::gpu::bf16_bits;

TD_DEVICE float bf16_to_float(bf16_bits b) { return ::tandem::gpu::bf16_bits_to_float(b); }
TD_DEVICE bf16_bits float_to_bf16(float f) { return ::tandem::gpu::float_to_bf16_bits(f); }
/** Low half of a packed pair is the element at the lower address. */
TD_DEVICE float bf16_lo(uint32_t pair) { return bits_to_float(pair << 16); }
TD_DEVICE float bf16_hi(uint32_t pair) { return bits_to_float(pair & 0xffff0000u); }
TD_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(float_to_bf16(lo)) | (static_cast<uint32_t>(float_to_bf16(hi)) << 16);
}
TD_DEVICE int imin(int a, int b) { return a < b ? a : b; }
TD_DEVICE int imax(int a, int b) { return a > b ? a : b; }

}  // namespace tandem::gpu::td
