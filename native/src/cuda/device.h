// Device: what the GPU backend needs from a device, behind one interface with two
// implementations:
//   CudaDevice  the CUDA runtime (linked statically, so the addon loads without libcuda): device
//               memory, pinned host memory, one stream, async copies, graph capture;
//   SimtDevice  host memory standing in for device memory, copies done at once except where the
//               host could tell (pinned memory: as asynchronous as CUDA's, simt_device.cc),
//               kernels run by the SIMT harness, graph capture as a recorded list of launches.
// Copies are stream-ordered: a host buffer handed to upload() must stay untouched until
// synchronize() (the backend stages through pinned buffers it owns).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace tandem::gpu {

/** A size for messages: whole MiB, or KiB / bytes below one MiB (a tiny model's scratch is not "0 MiB"). */
inline std::string mib(long long bytes) {
  if (bytes >= (1LL << 20) || bytes <= -(1LL << 20)) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

struct DeviceInfo {
  std::string name;        // e.g. "NVIDIA H100 80GB HBM3", or "SIMT harness (host)"
  int ordinal = 0;
  int sm_count = 1;
  int cc_major = 0, cc_minor = 0;
  size_t total_bytes = 0;
  size_t max_shared_per_block = 0;  // opt-in limit
};

/** A captured sequence of launches, replayed with its arguments fixed at capture time. */
class Graph {
 public:
  virtual ~Graph() = default;
  virtual void launch() = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceInfo& info() const = 0;
  /** "cuda" or "simt". */
  virtual const char* kind() const = 0;
  /** Device memory; NativeError(resource_exhausted) naming the size when it does not fit. */
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* p) noexcept = 0;
  /** Page-locked host memory for staging copies. */
  virtual void* alloc_pinned(size_t bytes) = 0;
  virtual void free_pinned(void* p) noexcept = 0;
  virtual void upload(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* device_src, size_t bytes) = 0;
  virtual void copy(void* device_dst, const void* device_src, size_t bytes) = 0;
  virtual void fill(void* device_dst, int byte, size_t bytes) = 0;
  /** Waits for everything queued; raises a kernel's error as NativeError(internal). */
  virtual void synchronize() = 0;
  /** The stream kernels are launched on (cudaStream_t; unused by SIMT). */
  virtual void* stream() = 0;
  /** Free device memory now. */
  virtual size_t free_bytes() = 0;
  /** Records what `record` launches on stream() into a graph instead of running it. */
  virtual std::unique_ptr<Graph> capture(const std::function<void()>& record) = 0;

  // KV movement between workers (issue 24). Defaults: not supported by this device.
  /** A second stream for copies that run beside the forward on stream() (KV import/export). */
  virtual void* side_stream() { return stream(); }
  /** Waits for everything queued on side_stream(). */
  virtual void synchronize_side() { synchronize(); }
  /** upload() on side_stream() (the source stays untouched until synchronize_side()). */
  virtual void upload_side(void* device_dst, const void* host_src, size_t bytes) { upload(device_dst, host_src, bytes); }
  /**
   * Makes the alloc() `p` of `bytes` mappable by other processes and returns its address then:
   * the same on CUDA (cudaMalloc memory exports as it is), a named shared-memory copy on SIMT
   * (the old allocation is freed; whatever pointed at it must be repointed).
   */
  virtual void* make_exportable(void* p, size_t bytes);
  /** Opaque bytes naming exportable memory for open_ipc in another process. */
  virtual std::string export_handle(void* p, size_t bytes);
  /** Maps a peer's export_handle; `bytes` is what the caller expects it to hold (checked). */
  virtual void* open_ipc(const std::string& handle, size_t bytes);
  virtual void close_ipc(void* p) noexcept;
};

/** The first line of every export_handle: "tandem-kv-ipc/1 <kind> <bytes>\n", then the kind's payload. */
std::string ipc_handle_header(const char* kind, size_t bytes);
/** Checks a handle's header against the device kind and size; returns its payload. */
std::string ipc_handle_payload(const std::string& handle, const char* kind, size_t bytes);

/** Why `cuda` is or is not usable here (driver and device checked, nothing allocated). */
struct CudaStatus {
  bool available = false;
  std::string reason;  // set when not available
  int device_count = 0;
  std::string device_name;  // of device 0, when available
  int cc_major = 0, cc_minor = 0;  // its compute capability, when available (FP8 tensor cores: 8.9+)
};

/** True when this binary was built with nvcc (the CUDA target exists). */
bool cuda_built();
CudaStatus cuda_status();

/** The CUDA device `ordinal`; NativeError(unavailable) with the reason when it cannot be used. */
std::unique_ptr<Device> make_cuda_device(int ordinal);
std::unique_ptr<Device> make_simt_device();

}  // namespace tandem::gpu
