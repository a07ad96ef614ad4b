// SimtDevice: host memory as device memory, copies done at once (or recorded while a graph is
// being captured), kernels through the SIMT harness. Copies that involve pinned host memory keep
// CUDA's asynchrony where the host can see it (cudaMemcpyAsync returns before they are done):
//   - a download into pinned memory lands at the next point where CUDA guarantees it has (a
//     synchronize, a download into pageable memory, a free); until then the destination holds
//     poison, so host code that reads it too early fails here as it would read stale bytes there;
//   - an upload from pinned memory may read its source any time until then, so a source the host
//     changes before that point is refused at it, naming the bytes;
//   - the side stream (KV copies) defers: its uploads and kernels run at synchronize_side() or a
//     free, the latest a GPU may run them, never at synchronize() (the main stream's).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

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
    simt::defer_stream(&side_, true);
  }
  ~SimtDevice() override { simt::defer_stream(&side_, false); }
  const DeviceInfo& info() const override { return info_; }
  const char* kind() const override { return "simt"; }
  void* alloc(size_t bytes) override {
    refuse_in_capture("alloc");
    // 256-byte alignment like cudaMalloc, so alignment assumptions are tested too.
    void* p = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
    if (p == nullptr) {
      throw NativeError(ErrorCode::kResourceExhausted, "simt device: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    // Garbage, not zeros: code that reads memory nothing wrote must not pass by luck.
    std::memset(p, 0xA5, bytes);
    return p;
  }
  void free(void* p) noexcept override {
    note_in_capture("free");
    complete_noexcept();  // cudaFree waits for the device
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = shared_.find(p);
      if (it != shared_.end()) {
        munmap(p, it->second.bytes);
        close(it->second.fd);
        shared_.erase(it);
        return;
      }
    }
    std::free(p);
  }
  void* alloc_pinned(size_t bytes) override {
    refuse_in_capture("alloc_pinned");
    void* p = alloc(bytes);
    std::lock_guard<std::mutex> lock(copies_mu_);
    pinned_[static_cast<const unsigned char*>(p)] = bytes;
    return p;
  }
  void free_pinned(void* p) noexcept override {
    note_in_capture("free_pinned");
    complete_noexcept();  // cudaFreeHost waits for the device
    {
      std::lock_guard<std::mutex> lock(copies_mu_);
      pinned_.erase(static_cast<const unsigned char*>(p));
    }
    std::free(p);
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    now_or_captured([this, dst, src, bytes] { upload_now(dst, src, bytes); });
  }
  void download(void* dst, const void* src, size_t bytes) override {
    now_or_captured([this, dst, src, bytes] { download_now(dst, src, bytes); });
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    now_or_captured([dst, src, bytes] { if (bytes > 0) std::memcpy(dst, src, bytes); });
  }
  void fill(void* dst, int byte, size_t bytes) override {
    now_or_captured([dst, byte, bytes] { std::memset(dst, byte, bytes); });
  }
  void synchronize() override {
    refuse_in_capture("synchronize");
    complete();
  }
  void* stream() override { return nullptr; }
  // The side stream defers (simt::defer_stream): its copies and kernels run at
  // synchronize_side(), or where CUDA waits for the whole device (a free). A GPU may run them
  // any time before; running them last is the schedule that shows a host that reads the staging
  // early, refills it too soon, or waits for the side stream with synchronize().
  void* side_stream() override { return &side_; }
  void synchronize_side() override {
    refuse_in_capture("synchronize_side");
    simt::run_stream(&side_);
  }
  void upload_side(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    simt::enqueue_on(&side_, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }

  // CUDA IPC, emulated honestly: exported memory is an anonymous shared-memory file
  // (memfd) that a peer process maps through /proc/<pid>/fd/<fd>, so two worker processes on
  // --device simt run the same export/map/copy path a GPU pair does. Nothing is named in
  // /dev/shm, so nothing leaks when the exporter is killed with -9; a peer that mapped the
  // pool keeps the memory until it unmaps it.
  void* make_exportable(void* p, size_t bytes) override {
    const int fd = memfd_create("tandem-simt-kv", MFD_CLOEXEC);
    if (fd < 0) throw NativeError(ErrorCode::kInternal, std::string("simt device: memfd_create: ") + std::strerror(errno));
    void* q = MAP_FAILED;
    if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) q = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (q == MAP_FAILED) {
      const int err = errno;
      close(fd);
      throw NativeError(ErrorCode::kResourceExhausted, "simt device: cannot map " + std::to_string(bytes) + " bytes of shared memory (" +
                                                           std::strerror(err) + ")");
    }
    std::memcpy(q, p, bytes);
    free(p);
    std::lock_guard<std::mutex> lock(mu_);
    shared_[q] = {"/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd), bytes, fd};
    return q;
  }
  std::string export_handle(void* p, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = shared_.find(p);
    if (it == shared_.end() || it->second.bytes != bytes) {
      throw NativeError(ErrorCode::kInternal, "simt device: export_handle of memory that make_exportable did not return");
    }
    return ipc_handle_header(kind(), bytes) + it->second.name;
  }
  void* open_ipc(const std::string& handle, size_t bytes) override {
    const std::string name = ipc_handle_payload(handle, kind(), bytes);
    const int fd = open(name.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      throw NativeError(ErrorCode::kUnavailable, "simt device: the peer's pool " + name + " cannot be opened (" + std::strerror(errno) +
                                                     "; has the peer exited?)");
    }
    struct stat st {};
    void* q = MAP_FAILED;
    if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= bytes) {
      q = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    close(fd);
    if (q == MAP_FAILED) throw NativeError(ErrorCode::kUnavailable, "simt device: cannot map the peer's pool " + name);
    std::lock_guard<std::mutex> lock(mu_);
    opened_[q] = bytes;
    return q;
  }
  void close_ipc(void* p) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = opened_.find(p);
    if (it == opened_.end()) return;
    munmap(p, it->second);
    opened_.erase(it);
  }
  size_t free_bytes() override { return info_.total_bytes; }
  std::unique_ptr<Graph> capture(const std::function<void()>& record) override {
    simt::Capture c;
    simt::set_capture(&c);
    t_capture_violation.clear();
    try {
      record();
    } catch (...) {
      simt::set_capture(nullptr);
      throw;
    }
    simt::set_capture(nullptr);
    if (!t_capture_violation.empty()) refuse(t_capture_violation);  // as cudaStreamEndCapture would
    return std::make_unique<SimtGraph>(std::move(c));
  }

 private:
  // CUDA refuses what may synchronize or allocate while the thread captures a graph (capture
  // mode ThreadLocal: cudaErrorStreamCaptureUnsupported, and the capture is invalidated), so
  // the harness does too, rather than record it into a graph that the GPU could never make.
  static inline thread_local std::string t_capture_violation;
  [[noreturn]] static void refuse(const std::string& what) {
    throw NativeError(ErrorCode::kInternal, "simt device: " + what +
                                                " while a graph is being captured (CUDA refuses it: "
                                                "cudaErrorStreamCaptureUnsupported)");
  }
  static void refuse_in_capture(const char* what) {
    if (simt::active_capture() != nullptr) refuse(what);
  }
  /** For the noexcept calls: the capture fails when it ends, as CUDA's does. */
  static void note_in_capture(const char* what) noexcept {
    if (simt::active_capture() != nullptr && t_capture_violation.empty()) t_capture_violation = what;
  }
  /** A stream operation: run now, or recorded into the graph being captured (replayed in order). */
  template <typename Op>
  static void now_or_captured(Op op) {
    if (simt::Capture* c = simt::active_capture()) {
      c->ops.push_back(std::move(op));
      return;
    }
    op();
  }
  // ---- pinned copies in flight (see the header)
  bool pinned(const void* p, size_t bytes) {
    const auto* q = static_cast<const unsigned char*>(p);
    std::lock_guard<std::mutex> lock(copies_mu_);
    auto it = pinned_.upper_bound(q);
    if (it == pinned_.begin()) return false;
    --it;
    return q + bytes <= it->first + it->second;
  }
  void upload_now(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    std::memcpy(dst, src, bytes);
    if (!pinned(src, bytes)) return;  // pageable: staged before cudaMemcpyAsync returns
    const auto* b = static_cast<const unsigned char*>(src);
    std::lock_guard<std::mutex> lock(copies_mu_);
    uploads_.push_back({src, std::vector<unsigned char>(b, b + bytes)});
  }
  void download_now(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    if (!pinned(dst, bytes)) {
      complete();  // into pageable memory cudaMemcpyAsync returns once the stream has run to it
      std::memcpy(dst, src, bytes);
      return;
    }
    const auto* b = static_cast<const unsigned char*>(src);
    std::vector<unsigned char> landed(b, b + bytes);  // what the stream copies, in its order
    std::memset(dst, kPinnedPoison, bytes);
    std::lock_guard<std::mutex> lock(copies_mu_);
    downloads_.push_back({dst, std::move(landed)});
  }
  /** Everything in flight is done: downloads land, upload sources are checked unchanged. */
  void complete() {
    std::vector<InFlight> downloads, uploads;
    std::string violation;
    {
      std::lock_guard<std::mutex> lock(copies_mu_);
      downloads.swap(downloads_);
      uploads.swap(uploads_);
      violation.swap(late_violation_);
    }
    for (InFlight& d : downloads) std::memcpy(const_cast<void*>(d.at), d.bytes.data(), d.bytes.size());
    for (const InFlight& u : uploads) {
      if (!violation.empty() || std::memcmp(u.at, u.bytes.data(), u.bytes.size()) == 0) continue;
      size_t i = 0;
      while (static_cast<const unsigned char*>(u.at)[i] == u.bytes[i]) ++i;
      violation = "simt device: the pinned host memory an upload of " + std::to_string(u.bytes.size()) +
                  " bytes reads changed (byte " + std::to_string(i) +
                  ") before the device was synchronized: on a GPU the copy may read the new bytes";
    }
    if (!violation.empty()) throw NativeError(ErrorCode::kInternal, violation);
  }
  /** Both streams done (cudaFree, cudaFreeHost) where nothing may throw: a violation is reported by the next synchronize. */
  void complete_noexcept() noexcept {
    try {
      simt::run_stream(&side_);
      complete();
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(copies_mu_);
      if (late_violation_.empty()) late_violation_ = e.what();
    } catch (...) {
    }
  }
  // 0xA5, as alloc() fills device memory: a read before the copy has landed sees garbage.
  static constexpr int kPinnedPoison = 0xA5;
  struct InFlight {
    const void* at;  // a download's destination, an upload's source
    std::vector<unsigned char> bytes;  // what lands there, or what the source held
  };
  char side_ = 0;  // the side stream's handle (its address)
  std::mutex copies_mu_;
  std::map<const unsigned char*, size_t> pinned_;
  std::vector<InFlight> downloads_, uploads_;
  std::string late_violation_;

  DeviceInfo info_;
  struct Shared {
    std::string name;  // what a peer opens: /proc/<pid>/fd/<fd>
    size_t bytes = 0;
    int fd = -1;
  };
  std::mutex mu_;
  std::map<void*, Shared> shared_;   // exported by this process
  std::map<void*, size_t> opened_;   // peers' memory mapped here
};

}  // namespace

std::unique_ptr<Device> make_simt_device() { return std::make_unique<SimtDevice>(); }

}  // namespace tandem::gpu
