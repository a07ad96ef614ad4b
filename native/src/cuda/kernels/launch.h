// td::launch(kernel, grid, block, shared_bytes, stream, args...): one call shape for both
// targets. CUDA: cudaLaunchKernel with the arguments converted to the kernel's exact
// parameter types (raising the dynamic shared-memory limit once per kernel when a launch
// needs more than 48 KB). SIMT: the harness runs the kernel once per emulated thread.
// td::launch_dependent(overlap, ...): the same, and with overlap on a device of compute
// capability 9.0+ a programmatic dependent launch (cudaLaunchKernelEx with programmatic stream
// serialization; CUDA graphs keep it as a programmatic edge): the kernel may start while the
// one before it runs, and must call td::grid_dependency_wait before it touches anything that
// kernel reads or writes (kernel_lang.h). On the SIMT target it is td::launch, with every
// thread held to that wait. SIMT launches on a deferring stream (the SIMT device's side stream)
// wait in its queue until the host synchronizes that stream (simt::launch_on).
#pragma once

#include <algorithm>
#include <tuple>
#include <utility>

#include "../kernel_lang.h"

#if TD_CUDA
#include <mutex>
#include <string>
#include <unordered_map>

#include "../../core/error.h"
#endif

namespace tandem::gpu::td {

struct Grid {
  unsigned x = 1, y = 1, z = 1;
};

// The launch templates differ by target but are instantiated with the same types (the kernels'
// argument structs) in the CUDA and the SIMT objects of one binary: in a namespace of their
// target, so the linker cannot take one target's instantiation for the other's calls (an ODR
// clash that inlining hid: a SIMT call once reached cudaLaunchKernel).
inline namespace TD_NS {

#if TD_CUDA

inline void raise_shared_limit(const void* kernel, size_t bytes) {
  static std::mutex mu;
  static std::unordered_map<const void*, size_t> raised;
  std::lock_guard<std::mutex> lock(mu);
  size_t& have = raised[kernel];
  if (bytes <= have) return;
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) {
    throw NativeError(ErrorCode::kInternal, std::string("cuda: a kernel needs ") + std::to_string(bytes) +
                                                " bytes of shared memory: " + cudaGetErrorString(e));
  }
  have = bytes;
}

/** Whether the current device takes programmatic dependent launches (compute capability 9.0+). */
inline bool programmatic_launch_supported() {
  static const bool supported = [] {
    int device = 0, major = 0;
    return cudaGetDevice(&device) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 9;
  }();
  return supported;
}

template <typename... P, typename... A>
void launch_dependent(bool overlap, void (*kernel)(P...), Grid grid, unsigned block, size_t shared_bytes, void* stream,
                      A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "argument count");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  if (shared_bytes > 48 * 1024) raise_shared_limit(reinterpret_cast<const void*>(kernel), shared_bytes);
  std::tuple<std::decay_t<P>...> values(static_cast<std::decay_t<P>>(std::forward<A>(args))...);
  std::apply(
      [&](auto&... v) {
        void* ptrs[] = {static_cast<void*>(&v)...};
        cudaError_t e;
        if (overlap && programmatic_launch_supported()) {
          cudaLaunchAttribute attr[1];
          attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
          attr[0].val.programmaticStreamSerializationAllowed = 1;
          cudaLaunchConfig_t config = {};
          config.gridDim = dim3(grid.x, grid.y, grid.z);
          config.blockDim = dim3(block);
          config.dynamicSmemBytes = shared_bytes;
          config.stream = static_cast<cudaStream_t>(stream);
          config.attrs = attr;
          config.numAttrs = 1;
          e = cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(kernel), ptrs);
        } else {
          e = cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(grid.x, grid.y, grid.z), dim3(block), ptrs,
                               shared_bytes, static_cast<cudaStream_t>(stream));
        }
        if (e != cudaSuccess) {
          throw NativeError(ErrorCode::kInternal, std::string("cuda: kernel launch failed (") + cudaGetErrorName(e) +
                                                      ": " + cudaGetErrorString(e) + ")");
        }
      },
      values);
}

template <typename... P, typename... A>
void launch(void (*kernel)(P...), Grid grid, unsigned block, size_t shared_bytes, void* stream, A&&... args) {
  launch_dependent(false, kernel, grid, block, shared_bytes, stream, std::forward<A>(args)...);
}

#else

// With overlap the harness holds every thread of the kernel to calling td::grid_dependency_wait,
// whatever the device the launch stands for (simt/harness.h).
template <typename... P, typename... A>
void launch_dependent(bool overlap, void (*kernel)(P...), Grid grid, unsigned block, size_t shared_bytes, void* stream,
                      A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "argument count");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  std::tuple<std::decay_t<P>...> values(static_cast<std::decay_t<P>>(std::forward<A>(args))...);
  ::tandem::simt::launch_on(stream, ::tandem::simt::Dim3(grid.x, grid.y, grid.z), ::tandem::simt::Dim3(block), shared_bytes,
                            [kernel, values]() { std::apply(kernel, values); }, overlap);
}

template <typename... P, typename... A>
void launch(void (*kernel)(P...), Grid grid, unsigned block, size_t shared_bytes, void* stream, A&&... args) {
  launch_dependent(false, kernel, grid, block, shared_bytes, stream, std::forward<A>(args)...);
}

#endif

}  // namespace TD_NS

inline unsigned ceil_div(long long a, long long b) { return static_cast<unsigned>((a + b - 1) / b); }

}  // namespace tandem::gpu::td
