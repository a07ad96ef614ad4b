// tandem_kv_bench: KV movement between two processes on one GPU (issue 24), for
// scripts/device/kv-transfer-check.sh. Uses the Device and the KV copy kernel directly (no
// model): a prefill-like process exports a pool filled with a known pattern, a decode-like
// process maps it and measures.
//
//   tandem_kv_bench export --shape 0.5b|8b --blocks N --handle FILE [--device cuda|simt]
//       allocates a bf16 pool of N blocks (block size 16), fills block b with pattern(b),
//       writes its export handle to FILE, and waits until FILE.done exists (or 120 s).
//   tandem_kv_bench import --shape 0.5b|8b --blocks N --handle FILE --json OUT [--device ...]
//       maps the peer pool; for 1, 16 and 256 blocks (shuffled ids): GB/s of the gather kernel
//       (kvCopyFromPeer's path) against one cudaMemcpyDtoD of the same bytes, and whether every
//       copied byte equals the pattern; then the staged halves on its own pool: the gather into
//       pinned host memory (kvReadBlocks) and back (kvWriteBlocks) against plain D2H / H2D
//       copies of the same bytes. Writes FILE.done when finished.
// Times: median of 5 synchronized repetitions after a warm-up; GB/s = bytes copied / s.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../../native/src/core/error.h"
#include "../../native/src/core/kv_copy_host.h"
#include "../../native/src/core/kv_layout.h"
#include "../../native/src/cuda/device.h"
#include "../../native/src/cuda/kv_copy.h"

using namespace tandem;

namespace {

struct Args {
  std::string mode, shape = "0.5b", handle, json, device = "cuda";
  int blocks = 300;
};

KvLayout layout_for(const std::string& shape, int blocks) {
  KvLayout kv;
  kv.num_blocks = blocks;
  kv.block_size = 16;
  kv.elem_bytes = 2;
  if (shape == "0.5b") {  // Qwen2-0.5B: 24 layers, 2 KV heads x 64
    kv.num_layers = 24;
    kv.num_kv_heads = 2;
    kv.head_dim = 64;
  } else if (shape == "8b") {  // Llama-3.1-8B: 32 layers, 8 KV heads x 128
    kv.num_layers = 32;
    kv.num_kv_heads = 8;
    kv.head_dim = 128;
  } else {
    throw NativeError(ErrorCode::kInvalidArgument, "--shape 0.5b or 8b");
  }
  return kv;
}

/** Block b's bytes: a cheap hash of (b, word index), so a misplaced block shows. */
void pattern(std::vector<uint32_t>& words, int64_t block) {
  for (size_t i = 0; i < words.size(); ++i) {
    uint32_t x = static_cast<uint32_t>(block * 2654435761u) ^ static_cast<uint32_t>(i * 40503u + 0x9e3779b9u);
    x ^= x >> 15;
    x *= 0x2c1b3c6du;
    x ^= x >> 12;
    // Keep bf16 halves finite (exponent never all ones), so the bytes survive any path.
    words[i] = x & 0xbfffbfffu;
  }
}

std::unique_ptr<gpu::Device> open_device(const std::string& d) {
  return d == "simt" ? gpu::make_simt_device() : gpu::make_cuda_device(0);
}
std::unique_ptr<gpu::KvCopyApi> open_copy(const std::string& d) {
  return d == "simt" ? gpu::make_simt_kv_copy() : gpu::make_cuda_kv_copy();
}

double median_seconds(const std::function<void()>& run) {
  run();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[2];
}

bool exists(const std::string& path) { return std::ifstream(path).good(); }

int run_export(const Args& a) {
  const KvLayout kv = layout_for(a.shape, a.blocks);
  auto dev = open_device(a.device);
  const size_t bb = kv.bytes_per_block(), bytes = bb * static_cast<size_t>(kv.num_blocks);
  void* pool = dev->make_exportable(dev->alloc(bytes), bytes);
  std::vector<uint32_t> words(bb / 4);
  for (int64_t b = 0; b < kv.num_blocks; ++b) {
    pattern(words, b);
    dev->upload(static_cast<char*>(pool) + b * bb, words.data(), bb);
    dev->synchronize();
  }
  const std::string h = dev->export_handle(pool, bytes);
  std::ofstream(a.handle + ".tmp", std::ios::binary).write(h.data(), static_cast<std::streamsize>(h.size()));
  std::rename((a.handle + ".tmp").c_str(), a.handle.c_str());
  std::printf("exported %zu bytes (%lld blocks of %zu)\n", bytes, static_cast<long long>(kv.num_blocks), bb);
  std::fflush(stdout);
  for (int i = 0; i < 1200 && !exists(a.handle + ".done"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  dev->free(pool);
  return 0;
}

int run_import(const Args& a) {
  const KvLayout kv = layout_for(a.shape, a.blocks);
  auto dev = open_device(a.device);
  auto copy = open_copy(a.device);
  const size_t bb = kv.bytes_per_block(), bytes = bb * static_cast<size_t>(kv.num_blocks);
  for (int i = 0; i < 600 && !exists(a.handle); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::ifstream in(a.handle, std::ios::binary);
  const std::string h((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  void* peer = dev->open_ipc(h, bytes);
  void* pool = dev->alloc(bytes);
  void* flat = dev->alloc(bytes);  // the plain-copy baseline's destination
  const int max_n = std::min(256, a.blocks);
  auto* pinned = static_cast<unsigned char*>(dev->alloc_pinned(static_cast<size_t>(max_n) * bb + 2 * max_n * 4));
  auto* ids = reinterpret_cast<int32_t*>(pinned + static_cast<size_t>(max_n) * bb);
  // As the engine does: tables staged in pinned memory, uploaded on the side stream with each copy.
  auto* dev_ids = static_cast<int32_t*>(dev->alloc(static_cast<size_t>(2 * max_n) * 4));
  std::mt19937 rng(7);
  std::ostringstream js;
  js << "{\n  \"shape\": \"" << a.shape << "\", \"device\": \"" << dev->info().name << "\", \"block_bytes\": " << bb << ",\n  \"ipc\": [";
  bool all_equal = true;
  std::vector<uint32_t> want(bb / 4), got(bb / 4);
  for (int n : {1, 16, 256}) {
    if (n > a.blocks) continue;
    std::vector<int32_t> src(static_cast<size_t>(a.blocks)), dst(static_cast<size_t>(a.blocks));
    std::iota(src.begin(), src.end(), 0);
    std::iota(dst.begin(), dst.end(), 0);
    std::shuffle(src.begin(), src.end(), rng);
    std::shuffle(dst.begin(), dst.end(), rng);
    std::memcpy(ids, src.data(), static_cast<size_t>(n) * 4);
    std::memcpy(ids + n, dst.data(), static_cast<size_t>(n) * 4);
    gpu::KvCopyArgs c;
    c.src = kv_view(kv, peer, dev_ids);
    c.dst = kv_view(kv, pool, dev_ids + n);
    c.num_tokens = static_cast<int64_t>(n) * kv.block_size;
    c.layer_end = static_cast<int32_t>(kv.num_layers);
    const double t_kernel = median_seconds([&] {
      dev->upload_side(dev_ids, ids, static_cast<size_t>(2 * n) * 4);
      copy->copy(c, dev->side_stream());
      dev->synchronize_side();
    });
    const size_t moved = static_cast<size_t>(n) * bb;
    const double t_memcpy = median_seconds([&] {
      dev->copy(flat, peer, moved);
      dev->synchronize();
    });
    bool equal = true;
    for (int i = 0; i < n; ++i) {
      pattern(want, src[static_cast<size_t>(i)]);
      dev->download(got.data(), static_cast<char*>(pool) + static_cast<size_t>(dst[static_cast<size_t>(i)]) * bb, bb);
      dev->synchronize();
      equal &= std::memcmp(want.data(), got.data(), bb) == 0;
    }
    all_equal &= equal;
    js << (n == 1 ? "" : ",") << "\n    {\"blocks\": " << n << ", \"bytes\": " << moved << ", \"gather_gbps\": " << moved / t_kernel / 1e9
       << ", \"memcpy_dtod_gbps\": " << moved / t_memcpy / 1e9 << ", \"ratio\": " << t_memcpy / t_kernel
       << ", \"bytes_equal\": " << (equal ? "true" : "false") << "}";
    std::printf("ipc %3d blocks: gather %.1f GB/s, memcpy DtoD %.1f GB/s, bytes %s\n", n, moved / t_kernel / 1e9, moved / t_memcpy / 1e9,
                equal ? "equal" : "DIFFER");
  }
  // Staged halves on this pool: gather into pinned (kvReadBlocks) and back (kvWriteBlocks),
  // against cudaMemcpy D2H / H2D of the same bytes.
  const int n = max_n;
  const size_t moved = static_cast<size_t>(n) * bb;
  std::vector<int32_t> order(static_cast<size_t>(a.blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::memcpy(ids, order.data(), static_cast<size_t>(n) * 4);
  gpu::KvCopyArgs d2h;
  d2h.src = kv_view(kv, pool, dev_ids);
  d2h.dst = kv_view(kv, pinned, nullptr);
  d2h.num_tokens = static_cast<int64_t>(n) * kv.block_size;
  d2h.layer_end = static_cast<int32_t>(kv.num_layers);
  gpu::KvCopyArgs h2d = d2h;
  h2d.src = d2h.dst;
  h2d.dst = d2h.src;
  const double t_gather = median_seconds([&] {
    dev->upload_side(dev_ids, ids, static_cast<size_t>(n) * 4);
    copy->copy(d2h, dev->side_stream());
    dev->synchronize_side();
  });
  const double t_scatter = median_seconds([&] {
    dev->upload_side(dev_ids, ids, static_cast<size_t>(n) * 4);
    copy->copy(h2d, dev->side_stream());
    dev->synchronize_side();
  });
  const double t_d2h = median_seconds([&] {
    dev->download(pinned, pool, moved);
    dev->synchronize();
  });
  const double t_h2d = median_seconds([&] {
    dev->upload(pool, pinned, moved);
    dev->synchronize();
  });
  js << "\n  ],\n  \"staged\": {\"blocks\": " << n << ", \"bytes\": " << moved << ", \"gather_to_pinned_gbps\": " << moved / t_gather / 1e9
     << ", \"memcpy_d2h_gbps\": " << moved / t_d2h / 1e9 << ", \"scatter_from_pinned_gbps\": " << moved / t_scatter / 1e9
     << ", \"memcpy_h2d_gbps\": " << moved / t_h2d / 1e9 << "},\n  \"bytes_equal\": " << (all_equal ? "true" : "false") << "\n}\n";
  std::printf("staged %d blocks: gather to pinned %.1f GB/s (D2H memcpy %.1f), scatter from pinned %.1f GB/s (H2D memcpy %.1f)\n", n,
              moved / t_gather / 1e9, moved / t_d2h / 1e9, moved / t_scatter / 1e9, moved / t_h2d / 1e9);
  if (!a.json.empty()) std::ofstream(a.json) << js.str();
  std::ofstream(a.handle + ".done") << "done\n";
  dev->close_ipc(peer);
  dev->free(pool);
  dev->free(flat);
  dev->free(dev_ids);
  dev->free_pinned(pinned);
  return all_equal ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (argc < 2) {
    std::fprintf(stderr, "usage: tandem_kv_bench export|import --shape 0.5b|8b --blocks N --handle FILE [--json OUT] [--device cuda|simt]\n");
    return 2;
  }
  a.mode = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--shape") a.shape = v;
    else if (k == "--blocks") a.blocks = std::stoi(v);
    else if (k == "--handle") a.handle = v;
    else if (k == "--json") a.json = v;
    else if (k == "--device") a.device = v;
  }
  try {
    if (a.mode == "export") return run_export(a);
    if (a.mode == "import") return run_import(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem_kv_bench: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "unknown mode %s\n", a.mode.c_str());
  return 2;
}
