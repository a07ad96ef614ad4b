// SimtDevice: host memory as device memory, copies done at once (or recorded while a graph is
// being captured), kernels through the SIMT harness.
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "../core/error.h"
#include "device.h"
#include "simt/harness.h"

namespace tandem::gpu {
namespace {

class SimtGraph final : public Graph {
 public:
  explicit SimtGraph(simt::Capture capture) : capture_(std::move(capture)) {}
  void launch() override { capture_.replay(); }

 private:
  simt::Capture capture_;
};

class SimtDevice final : public Device {
 public:
  SimtDevice() {
    info_.name = "SIMT harness (host)";
    info_.sm_count = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    info_.cc_major = 8;
    info_.cc_minor = 0;
    info_.total_bytes = size_t{1} << 34;
    info_.max_shared_per_block = simt::kMaxShared;
  }
  const DeviceInfo& info() const override { return info_; }
  const char* kind() const override { return "simt"; }
  void* alloc(size_t bytes) override {
    // 256-byte alignment like cudaMalloc, so alignment assumptions are tested too.
    void* p = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
    if (p == nullptr) {
      throw NativeError(ErrorCode::kResourceExhausted, "simt device: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    // Garbage, not zeros: code that reads memory nothing wrote must not pass by luck.
    std::memset(p, 0xA5, bytes);
    return p;
  }
  void free(void* p) noexcept override { std::free(p); }
  void* alloc_pinned(size_t bytes) override { return alloc(bytes); }
  void free_pinned(void* p) noexcept override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override { copy_now(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { copy_now(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { copy_now(dst, src, bytes); }
  void fill(void* dst, int byte, size_t bytes) override {
    if (simt::Capture* c = simt::active_capture()) {
      c->ops.push_back([dst, byte, bytes] { std::memset(dst, byte, bytes); });
      return;
    }
    std::memset(dst, byte, bytes);
  }
  void synchronize() override {}
  void* stream() override { return nullptr; }
  size_t free_bytes() override { return info_.total_bytes; }
  std::unique_ptr<Graph> capture(const std::function<void()>& record) override {
    simt::Capture c;
    simt::set_capture(&c);
    try {
      record();
    } catch (...) {
      simt::set_capture(nullptr);
      throw;
    }
    simt::set_capture(nullptr);
    return std::make_unique<SimtGraph>(std::move(c));
  }

 private:
  static void copy_now(void* dst, const void* src, size_t bytes) {
    if (simt::Capture* c = simt::active_capture()) {
      c->ops.push_back([dst, src, bytes] { std::memcpy(dst, src, bytes); });
      return;
    }
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  DeviceInfo info_;
};

}  // namespace

std::unique_ptr<Device> make_simt_device() { return std::make_unique<SimtDevice>(); }

}  // namespace tandem::gpu
