// GpuBackend's KV movement (issue 24): pool <-> host buffers through pinned staging, and
// pool <- a peer's pool mapped over CUDA IPC (SIMT: POSIX shared memory). Every copy is the
// kernel of kernels/kv_copy.cuh on the device's side stream, so it runs beside a forward on
// the main stream; the Engine serializes these calls among themselves, and they return once
// the side stream has finished, so a step queued after them sees the data.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "../core/error.h"
#include "../core/kv_copy_host.h"
#include "gpu_backend.h"

namespace tandem {

namespace {

constexpr size_t kKvStagingHalfBytes = size_t{32} << 20;  // per half: chunks of host <-> pool copies

size_t align16(size_t n) { return (n + 15) / 16 * 16; }

}  // namespace

// Allocated once, with the pool. KV copies run under the Engine's kv_mu_ while a forward runs
// on the main stream, and cudaFree / cudaFreeHost synchronize the whole device: freeing (or
// regrowing) here stalled the step until the forward finished. The staged paths size their
// chunks to these halves; the id buffer holds two chunks' tables or a peer table of four
// pools' worth of blocks.
void GpuBackend::allocate_kv_staging() {
  kv_staging_ = device_->alloc_pinned(2 * kKvStagingHalfBytes);
  kv_staging_bytes_ = 2 * kKvStagingHalfBytes;
  const size_t chunk_ids = kKvStagingHalfBytes / layout_.bytes_per_block() + 2;
  const size_t ids = std::max<size_t>({1024, 2 * chunk_ids, 4 * static_cast<size_t>(layout_.num_blocks)});
  kv_ids_ = static_cast<int32_t*>(device_->alloc(ids * 4));
  kv_ids_count_ = ids;
}

// Larger than preallocated: only a block bigger than a staging half, or a peer table longer
// than the id buffer. The old buffer is retired, not freed (a free would wait for the forward);
// retired buffers go with the backend.
void* GpuBackend::kv_staging(size_t bytes) {
  if (bytes > kv_staging_bytes_) {
    void* grown = device_->alloc_pinned(bytes);
    kv_retired_pinned_.push_back(kv_staging_);
    kv_staging_ = grown;
    kv_staging_bytes_ = bytes;
  }
  return kv_staging_;
}

int32_t* GpuBackend::kv_ids(size_t count) {
  if (count > kv_ids_count_) {
    auto* grown = static_cast<int32_t*>(device_->alloc(count * 4));
    kv_retired_device_.push_back(kv_ids_);
    kv_ids_ = grown;
    kv_ids_count_ = count;
  }
  return kv_ids_;
}

// Chunks of whole blocks go pool -> pinned (the kernel writes the mapped pinned memory; no
// conversion) -> dst. Two halves: the kernel fills one while the host drains the other.
void GpuBackend::kv_read_blocks(const int32_t* ids, int32_t n, void* dst, int l0, int l1) {
  if (n <= 0 || l1 <= l0) return;
  const size_t bb = layout_.bytes_per_block();
  const size_t layer_bytes = static_cast<size_t>(layout_.layer_stride()) * layout_.elem_bytes;
  // Whole blocks and their ids per half, as many as fit the preallocated half.
  const int32_t chunk = static_cast<int32_t>(std::max<size_t>(1, (kv_staging_bytes_ / 2 - 32) / (bb + 4)));
  const size_t half = align16(static_cast<size_t>(chunk) * bb) + align16(static_cast<size_t>(chunk) * 4);
  auto* base = static_cast<unsigned char*>(kv_staging(2 * half));
  int32_t* table = kv_ids(2 * static_cast<size_t>(chunk));
  void* side = device_->side_stream();
  auto launch = [&](int32_t first, int h) {
    const int32_t m = std::min(chunk, n - first);
    unsigned char* data = base + h * half;
    auto* host_ids = reinterpret_cast<int32_t*>(data + align16(static_cast<size_t>(chunk) * bb));
    std::memcpy(host_ids, ids + first, static_cast<size_t>(m) * 4);
    int32_t* dev_ids = table + h * chunk;
    device_->upload_side(dev_ids, host_ids, static_cast<size_t>(m) * 4);
    gpu::KvCopyArgs a;
    a.src = kv_view(layout_, kv_, dev_ids);
    a.dst = kv_view(layout_, data, nullptr);
    a.num_tokens = static_cast<int64_t>(m) * layout_.block_size;
    a.layer_begin = l0;
    a.layer_end = l1;
    a.scales = kv_scales_;
    kv_copy_->copy(a, side);
  };
  auto drain = [&](int32_t first, int h) {
    const int32_t m = std::min(chunk, n - first);
    const unsigned char* data = base + h * half;
    auto* out = static_cast<unsigned char*>(dst) + static_cast<size_t>(first) * bb;
    if (l0 == 0 && l1 == layout_.num_layers) {
      std::memcpy(out, data, static_cast<size_t>(m) * bb);
      return;
    }
    for (int32_t i = 0; i < m; ++i) {
      const size_t off = static_cast<size_t>(i) * bb + static_cast<size_t>(l0) * layer_bytes;
      std::memcpy(out + off, data + off, static_cast<size_t>(l1 - l0) * layer_bytes);
    }
  };
  launch(0, 0);
  device_->synchronize_side();
  for (int32_t first = 0, h = 0; first < n; first += chunk, h ^= 1) {
    if (first + chunk < n) launch(first + chunk, h ^ 1);
    drain(first, h);
    device_->synchronize_side();
  }
}

// Chunks of tokens (a multiple of both block sizes) go src -> pinned -> the kernel, which
// converts block size and dtype on the way into the pool. The host fills one half while the
// kernel reads the other. A chunk's source blocks start at the block holding its first token.
void GpuBackend::kv_write_blocks(const int32_t* ids, int32_t n, const void* src, const KvLayout& s, int64_t src_blocks, int l0,
                                 int l1, int64_t src_first) {
  const int64_t tokens = kv_copy_tokens(src_blocks, s.block_size, n, layout_.block_size, src_first);
  if (tokens <= 0 || l1 <= l0) return;
  const size_t sbb = s.bytes_per_block();
  const size_t layer_bytes = static_cast<size_t>(s.layer_stride()) * s.elem_bytes;
  const int64_t unit = std::lcm(s.block_size, layout_.block_size);
  const int64_t unit_bytes = static_cast<int64_t>(sbb) * (unit / s.block_size);
  // Units per half, as many as fit the preallocated half with the extra source block of a
  // mid-block start and the destination ids.
  const int64_t unit_ids = unit / layout_.block_size;
  const int64_t room = static_cast<int64_t>(kv_staging_bytes_ / 2) - static_cast<int64_t>(sbb) - 64;
  const int64_t chunk_tokens = unit * std::max<int64_t>(1, room / (unit_bytes + 4 * unit_ids));
  const size_t data_bytes = align16(static_cast<size_t>(chunk_tokens / s.block_size + 1) * sbb);
  const size_t half = data_bytes + align16(static_cast<size_t>(chunk_tokens / layout_.block_size + 1) * 4);
  auto* base = static_cast<unsigned char*>(kv_staging(2 * half));
  const size_t max_ids = static_cast<size_t>(chunk_tokens / layout_.block_size + 1);
  int32_t* table = kv_ids(2 * max_ids);
  void* side = device_->side_stream();
  auto first_block = [&](int64_t t0) { return (src_first + t0) / s.block_size; };
  auto fill = [&](int64_t t0, int h) {
    const int64_t t1 = std::min(tokens, t0 + chunk_tokens);
    unsigned char* data = base + h * half;
    const int64_t b0 = first_block(t0), b1 = (src_first + t1 + s.block_size - 1) / s.block_size;
    const auto* in = static_cast<const unsigned char*>(src) + static_cast<size_t>(b0) * sbb;
    if (l0 == 0 && l1 == s.num_layers) {
      std::memcpy(data, in, static_cast<size_t>(b1 - b0) * sbb);
    } else {
      for (int64_t i = 0; i < b1 - b0; ++i) {
        const size_t off = static_cast<size_t>(i) * sbb + static_cast<size_t>(l0) * layer_bytes;
        std::memcpy(data + off, in + off, static_cast<size_t>(l1 - l0) * layer_bytes);
      }
    }
    const int64_t d0 = t0 / layout_.block_size, d1 = (t1 + layout_.block_size - 1) / layout_.block_size;
    std::memcpy(data + data_bytes, ids + d0, static_cast<size_t>(d1 - d0) * 4);
  };
  auto launch = [&](int64_t t0, int h) {
    unsigned char* data = base + h * half;
    const int64_t t1 = std::min(tokens, t0 + chunk_tokens);
    const int64_t d0 = t0 / layout_.block_size, d1 = (t1 + layout_.block_size - 1) / layout_.block_size;
    int32_t* dev_ids = table + static_cast<size_t>(h) * max_ids;
    device_->upload_side(dev_ids, data + data_bytes, static_cast<size_t>(d1 - d0) * 4);
    gpu::KvCopyArgs a;
    a.src = kv_view(s, data, nullptr);
    a.dst = kv_view(layout_, kv_, dev_ids);
    a.num_tokens = std::min(tokens, t0 + chunk_tokens) - t0;
    a.src_first = src_first + t0 - first_block(t0) * s.block_size;
    a.layer_begin = l0;
    a.layer_end = l1;
    a.scales = kv_scales_;
    kv_copy_->copy(a, side);
  };
  fill(0, 0);
  for (int64_t t0 = 0, h = 0; t0 < tokens; t0 += chunk_tokens, h ^= 1) {
    launch(t0, static_cast<int>(h));
    if (t0 + chunk_tokens < tokens) fill(t0 + chunk_tokens, static_cast<int>(h ^ 1));
    device_->synchronize_side();
  }
}

// Once: the pool becomes exportable (on SIMT it moves into shared memory, so graphs captured
// with the old address are dropped). Called between steps (the Engine holds the step lock).
std::string GpuBackend::kv_export_handle() {
  const size_t bytes = layout_.bytes_per_block() * static_cast<size_t>(layout_.num_blocks);
  if (!kv_exported_) {
    device_->synchronize();
    void* p = device_->make_exportable(kv_, bytes);
    if (p != kv_) {
      std::replace(allocations_.begin(), allocations_.end(), static_cast<void*>(kv_), p);
      graphs_.clear();
      kv_ = static_cast<gpu::bf16_bits*>(p);
    }
    kv_exported_ = true;
  }
  return device_->export_handle(kv_, bytes);
}

// Our own handle (a decode worker copying between blocks of its own pool: layer-wise prefetch
// staging -> a sequence's blocks) is our pool: CUDA cannot open a process's own IPC handle.
void* GpuBackend::kv_open_peer(const std::string& handle, size_t bytes) {
  if (kv_exported_ && handle == device_->export_handle(kv_, layout_.bytes_per_block() * static_cast<size_t>(layout_.num_blocks))) return kv_;
  return device_->open_ipc(handle, bytes);
}

void GpuBackend::kv_close_peer(void* base) {
  if (base == kv_) return;  // our own pool, opened by handle: nothing was mapped
  device_->close_ipc(base);
}

// One launch for the whole table: the kernel reads the mapped peer pool and writes ours.
void GpuBackend::kv_copy_from_peer(void* peer_base, const KvLayout& peer, const int32_t* src_ids, int32_t ns,
                                   const int32_t* dst_ids, int32_t nd, int l0, int l1, int64_t src_first) {
  const int64_t tokens = kv_copy_tokens(ns, peer.block_size, nd, layout_.block_size, src_first);
  if (tokens <= 0 || l1 <= l0) return;
  auto* staged = static_cast<int32_t*>(kv_staging(static_cast<size_t>(ns + nd) * 4));
  std::memcpy(staged, src_ids, static_cast<size_t>(ns) * 4);
  std::memcpy(staged + ns, dst_ids, static_cast<size_t>(nd) * 4);
  int32_t* ids = kv_ids(static_cast<size_t>(ns + nd));
  device_->upload_side(ids, staged, static_cast<size_t>(ns + nd) * 4);
  gpu::KvCopyArgs a;
  a.src = kv_view(peer, peer_base, ids);
  a.dst = kv_view(layout_, kv_, ids + ns);
  a.num_tokens = tokens;
  a.src_first = src_first;
  a.layer_begin = l0;
  a.layer_end = l1;
  a.scales = kv_scales_;
  kv_copy_->copy(a, device_->side_stream());
  device_->synchronize_side();
}

}  // namespace tandem
