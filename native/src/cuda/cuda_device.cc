// CudaDevice: the CUDA runtime, linked statically (cudart_static dlopens libcuda.so.1 on first
// use), so the addon loads on machines without a driver and cuda_status() explains why the
// backend is unavailable there. Built only where nvcc was found (TANDEM_WITH_CUDA).
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "../core/error.h"
#include "device.h"

namespace tandem::gpu {
namespace {

constexpr int kMinComputeMajor = 8;  // cp.async, ldmatrix and bf16 mma.sync: sm_80 and newer

std::string describe(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

[[noreturn]] void fail(cudaError_t e, const std::string& what) {
  throw NativeError(ErrorCode::kInternal, "cuda: " + what + " failed (" + describe(e) + ")");
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(e, what);
}

/** Why device `ordinal` cannot be used, or "" when it can. */
std::string unusable(int ordinal, int* count_out, std::string* name_out) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (count_out != nullptr) *count_out = e == cudaSuccess ? count : 0;
  if (e == cudaErrorInsufficientDriver) {
    return "no usable CUDA driver (libcuda.so.1 is missing or older than the CUDA " +
           std::to_string(CUDART_VERSION / 1000) + " runtime this addon was built with)";
  }
  if (e == cudaErrorNoDevice) return "the CUDA driver found no GPU";
  if (e != cudaSuccess) return "the CUDA driver could not be initialised (" + describe(e) + ")";
  if (count == 0) return "the CUDA driver found no GPU";
  if (ordinal < 0 || ordinal >= count) {
    return "cuda:" + std::to_string(ordinal) + " does not exist (" + std::to_string(count) + " GPU" +
           (count == 1 ? "" : "s") + " visible)";
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess) return "cannot read the properties of cuda:" + std::to_string(ordinal);
  if (name_out != nullptr) *name_out = prop.name;
  if (prop.major < kMinComputeMajor) {
    return std::string(prop.name) + " has compute capability " + std::to_string(prop.major) + "." +
           std::to_string(prop.minor) + "; the CUDA backend needs 8.0 or newer";
  }
  return "";
}

class CudaGraph final : public Graph {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  void launch() override { check(cudaGraphLaunch(exec_, stream_), "cudaGraphLaunch"); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {
    std::string name;
    const std::string why = unusable(ordinal, nullptr, &name);
    if (!why.empty()) throw NativeError(ErrorCode::kUnavailable, "device 'cuda:" + std::to_string(ordinal) + "': " + why);
    bind();
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
    info_.name = prop.name;
    info_.ordinal = ordinal;
    info_.sm_count = prop.multiProcessorCount;
    info_.cc_major = prop.major;
    info_.cc_minor = prop.minor;
    info_.total_bytes = prop.totalGlobalMem;
    info_.max_shared_per_block = prop.sharedMemPerBlockOptin;
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "cudaStreamCreate (side)");
  }
  ~CudaDevice() override {
    bind();
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    cudaStreamSynchronize(side_);
    cudaStreamDestroy(side_);
  }
  const DeviceInfo& info() const override { return info_; }
  const char* kind() const override { return "cuda"; }

  void* alloc(size_t bytes) override {
    bind();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      throw NativeError(ErrorCode::kResourceExhausted, "cuda:" + std::to_string(ordinal_) + ": cannot allocate " + mib(bytes) +
                                                           " of device memory (" + mib(free) + " free of " + mib(total) + ")");
    }
    check(e, "cudaMalloc");
    return p;
  }
  void free(void* p) noexcept override {
    if (p == nullptr) return;
    bind();
    cudaFree(p);
  }
  void* alloc_pinned(size_t bytes) override {
    bind();
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw NativeError(ErrorCode::kResourceExhausted, "cuda: cannot allocate " + mib(bytes) + " of pinned host memory");
    }
    check(e, "cudaHostAlloc");
    return p;
  }
  void free_pinned(void* p) noexcept override {
    if (p != nullptr) cudaFreeHost(p);
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    bind();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (host to device)");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    bind();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (device to host)");
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    bind();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync (device to device)");
  }
  void fill(void* dst, int byte, size_t bytes) override {
    if (bytes == 0) return;
    bind();
    check(cudaMemsetAsync(dst, byte, bytes, stream_), "cudaMemsetAsync");
  }
  void synchronize() override {
    bind();
    const cudaError_t e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess) {
      throw NativeError(ErrorCode::kInternal, "cuda:" + std::to_string(ordinal_) + ": a kernel failed (" + describe(e) +
                                                  "); the device may be unusable until the worker restarts");
    }
  }
  void* stream() override {
    bind();
    return stream_;
  }
  size_t free_bytes() override {
    bind();
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return free;
  }
  void* side_stream() override {
    bind();
    return side_;
  }
  void synchronize_side() override {
    bind();
    const cudaError_t e = cudaStreamSynchronize(side_);
    if (e != cudaSuccess) {
      throw NativeError(ErrorCode::kInternal, "cuda:" + std::to_string(ordinal_) + ": a KV copy failed (" + describe(e) + ")");
    }
  }
  void upload_side(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    bind();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, side_), "cudaMemcpyAsync (host to device, side)");
  }
  // cudaMalloc memory exports as it is: the peer maps the whole allocation (the pool is one).
  void* make_exportable(void* p, size_t) override { return p; }
  std::string export_handle(void* p, size_t bytes) override {
    bind();
    cudaIpcMemHandle_t h{};
    check(cudaIpcGetMemHandle(&h, p), "cudaIpcGetMemHandle");
    return ipc_handle_header(kind(), bytes) + std::string(reinterpret_cast<const char*>(&h), sizeof(h));
  }
  void* open_ipc(const std::string& handle, size_t bytes) override {
    const std::string payload = ipc_handle_payload(handle, kind(), bytes);
    if (payload.size() != sizeof(cudaIpcMemHandle_t)) throw NativeError(ErrorCode::kInvalidArgument, "kvOpenPeer: a CUDA IPC handle is 64 bytes");
    bind();
    cudaIpcMemHandle_t h{};
    std::memcpy(&h, payload.data(), sizeof(h));
    void* p = nullptr;
    const cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw NativeError(ErrorCode::kUnavailable, "cuda:" + std::to_string(ordinal_) + ": cannot map the peer's KV pool (" + describe(e) + ")");
    }
    return p;
  }
  void close_ipc(void* p) noexcept override {
    if (p == nullptr) return;
    bind();
    cudaIpcCloseMemHandle(p);
  }

  std::unique_ptr<Graph> capture(const std::function<void()>& record) override {
    bind();
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      record();
    } catch (...) {
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(stream_, &g);
      if (g != nullptr) cudaGraphDestroy(g);
      throw;
    }
    cudaGraph_t g = nullptr;
    check(cudaStreamEndCapture(stream_, &g), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    check(e, "cudaGraphInstantiate");
    return std::make_unique<CudaGraph>(exec, stream_);
  }

 private:
  // The runtime's current device is per host thread, and steps run on whichever libuv thread
  // picks them up: bind before touching the device.
  void bind() {
    thread_local int bound = -1;
    if (bound != ordinal_) {
      check(cudaSetDevice(ordinal_), "cudaSetDevice");
      bound = ordinal_;
    }
  }

  int ordinal_;
  DeviceInfo info_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t side_ = nullptr;  // KV copies beside the forward
};

}  // namespace

bool cuda_built() { return true; }

CudaStatus cuda_status() {
  CudaStatus s;
  s.reason = unusable(0, &s.device_count, &s.device_name);
  s.available = s.reason.empty();
  cudaDeviceProp prop{};
  if (s.available && cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    s.cc_major = prop.major;
    s.cc_minor = prop.minor;
  }
  return s;
}

std::unique_ptr<Device> make_cuda_device(int ordinal) { return std::make_unique<CudaDevice>(ordinal); }

}  // namespace tandem::gpu
