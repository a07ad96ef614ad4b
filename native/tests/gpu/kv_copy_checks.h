// The KV block copy kernel (kernels/kv_copy.cuh) against the host copy (core/kv_copy_host.h):
// every pair of source/destination block size (16, 32) and dtype (f32, bf16, fp8 e4m3 with
// per-layer K / V scales), whole and
// partial layer ranges, shuffled block tables and a packed (identity) side, a token count that
// ends mid-block, a source that starts mid-block (src_first). The destination starts as garbage, and every byte of it is compared, so a
// write outside the copied rows fails as much as a wrong value.
#pragma once

#include <algorithm>
#include <numeric>

#include "../../src/core/kv_copy_host.h"
#include "../../src/cuda/kv_copy.h"
#include "gpu_test_util.h"

namespace tandem_test::gpu {

inline std::unique_ptr<tandem::gpu::KvCopyApi> open_kv_copy(const Gpu& g) {
  return g.name == "cuda" ? tandem::gpu::make_cuda_kv_copy() : tandem::gpu::make_simt_kv_copy();
}

inline void test_kv_copy(Gpu& g) {
  using tandem::gpu::KvCopyArgs;
  using tandem::gpu::KvPoolView;
  auto api = open_kv_copy(g);
  std::mt19937 rng(2024);
  const int layers = 4;
  const int64_t tokens = 75;                           // ends mid-block for 16 and 32
  const int pool_blocks = 12;
  // e4m3 sides: K / V scales per layer, [layer][k, v] (a V scale below 1 so f32 -> e4m3 saturates some values).
  const std::vector<float> kv_scales = {0.5f, 0.02f, 1.0f, 0.001f, 0.125f, 0.3f, 2.0f, 0.05f};
  DeviceArray<float> d_kv_scales(*g.device, kv_scales);
  int cases = 0, far_cases = 0;
  // One copy (a case): the device result against kv_copy_host's, byte for byte.
  auto check_copy = [&](int width, int src_bs, int dst_bs, int src_eb, int dst_eb, std::pair<int, int> range, bool packed_src, bool far) {
    KvPoolView src, dst;
    src.block_size = src_bs;
    src.elem_bytes = src_eb;
    src.num_layers = layers;
    src.token_stride = width;
    dst = src;
    dst.block_size = dst_bs;
    dst.elem_bytes = dst_eb;
    // A pool source starts mid-block (src_first 7: a copy after a prefix hit at another block size).
    const int64_t src_first = packed_src ? 0 : 7;
    const int64_t src_blocks = (src_first + tokens + src_bs - 1) / src_bs, dst_blocks = (tokens + dst_bs - 1) / dst_bs;
    // Tables: distinct ids in a shuffled order (a packed side has none: block i is i).
    std::vector<int32_t> src_ids(pool_blocks), dst_ids(pool_blocks);
    std::iota(src_ids.begin(), src_ids.end(), 0);
    std::iota(dst_ids.begin(), dst_ids.end(), 0);
    std::shuffle(src_ids.begin(), src_ids.end(), rng);
    std::shuffle(dst_ids.begin(), dst_ids.end(), rng);
    src_ids.resize(static_cast<size_t>(src_blocks));
    dst_ids.resize(static_cast<size_t>(dst_blocks));
    const size_t src_bytes = static_cast<size_t>((packed_src ? src_blocks : pool_blocks) * src.block_stride() * src_eb);
    const size_t dst_bytes = static_cast<size_t>(pool_blocks * dst.block_stride() * dst_eb);
    std::vector<uint8_t> src_host(src_bytes), dst_init(dst_bytes);
    // Values exact in bf16 (so f32 -> bf16 -> f32 is lossless) plus, for f32 sources,
    // a low-bit tail that the conversion must round to nearest even.
    for (size_t i = 0; i + src_eb <= src_bytes; i += static_cast<size_t>(src_eb)) {
      const float v = tandem::gpu::round_to_bf16(std::normal_distribution<float>(0, 1)(rng));
      if (src_eb == 1) {
        src_host[i] = static_cast<uint8_t>((rng() % 0x7f) | (rng() & 0x80));  // any e4m3 code but NaN
      } else if (src_eb == 4) {
        uint32_t u;
        std::memcpy(&u, &v, 4);
        u |= rng() & 0xffffu;
        std::memcpy(&src_host[i], &u, 4);
      } else {
        const bf16_bits b = tandem::gpu::float_to_bf16_bits(v);
        std::memcpy(&src_host[i], &b, 2);
      }
    }
    for (auto& b : dst_init) b = static_cast<uint8_t>(rng());

    // Host reference on host copies.
    std::vector<uint8_t> want = dst_init;
    KvCopyArgs ref;
    ref.src = src;
    ref.dst = dst;
    ref.src.base = src_host.data();
    ref.src.ids = packed_src ? nullptr : src_ids.data();
    ref.dst.base = want.data();
    ref.dst.ids = dst_ids.data();
    ref.num_tokens = tokens;
    ref.src_first = src_first;
    ref.layer_begin = range.first;
    ref.layer_end = range.second;
    ref.scales = kv_scales.data();
    tandem::kv_copy_host(ref);

    DeviceArray<uint8_t> d_src(*g.device, src_host), d_dst(*g.device, dst_init);
    // far: the device tables name blocks past 2^32 elements of each pool, whose bases move back as far.
    const int64_t src_far = far && !packed_src ? far_pool_blocks(src.block_stride()) : 0, dst_far = far ? far_pool_blocks(dst.block_stride()) : 0;
    std::vector<int32_t> device_src_ids = src_ids, device_dst_ids = dst_ids;
    for (int32_t& b : device_src_ids) b += static_cast<int32_t>(src_far);
    for (int32_t& b : device_dst_ids) b += static_cast<int32_t>(dst_far);
    DeviceArray<int32_t> d_src_ids(*g.device, device_src_ids), d_dst_ids(*g.device, device_dst_ids);
    KvCopyArgs a = ref;
    a.src.base = far_pool_base(d_src.get(), src_far * src.block_stride(), static_cast<size_t>(src_eb));
    a.src.ids = packed_src ? nullptr : d_src_ids.get();
    a.dst.base = far_pool_base(d_dst.get(), dst_far * dst.block_stride(), static_cast<size_t>(dst_eb));
    a.dst.ids = d_dst_ids.get();
    a.scales = d_kv_scales.get();
    api->copy(a, g.stream());
    const std::vector<uint8_t> got = d_dst.download();
    size_t first_diff = got.size();
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want[i]) {
        first_diff = i;
        break;
      }
    }
    CHECK(first_diff == got.size(),
          "kv copy%s width %d, bs %d->%d, %s->%s, layers [%d,%d), %s source: first differing byte %zu of %zu", far ? " (far pools)" : "", width, src_bs, dst_bs,
          tandem::kv_dtype_name(static_cast<size_t>(src_eb)), tandem::kv_dtype_name(static_cast<size_t>(dst_eb)), range.first, range.second,
          packed_src ? "packed" : "pool", first_diff, got.size());
    ++(far ? far_cases : cases);
  };
  // Rows of 32 elements (16-byte vectors when the dtype agrees) and of 3 (element by element).
  for (int width : {32, 3}) {
    for (int src_bs : {16, 32}) {
      for (int dst_bs : {16, 32}) {
        for (int src_eb : {4, 2, 1}) {
          for (int dst_eb : {4, 2, 1}) {
            for (auto range : {std::pair<int, int>{0, layers}, std::pair<int, int>{1, 3}, std::pair<int, int>{3, 4}}) {
              for (bool packed_src : {false, true}) check_copy(width, src_bs, dst_bs, src_eb, dst_eb, range, packed_src, false);
            }
          }
        }
      }
    }
  }
  // Pools past 2^32 elements (64-bit offsets): bf16 <-> e4m3 across block sizes, and bf16 to bf16.
  const bool far = g.name == "simt";
  if (far) {
    check_copy(32, 16, 32, 2, 1, {0, layers}, false, true);
    check_copy(32, 32, 16, 1, 2, {1, 3}, false, true);
    check_copy(3, 16, 16, 2, 2, {0, layers}, true, true);
  }
  // The reference itself: one value through f32 -> bf16 by hand (1 + 2^-8 + 2^-9 rounds up to
  // 1 + 2^-7; 1 + 2^-8 is a tie and rounds to even, 1.0).
  {
    float in[2] = {1.0f + 1.0f / 256 + 1.0f / 512, 1.0f + 1.0f / 256};
    bf16_bits out[2] = {0, 0};
    KvPoolView s;
    s.base = in;
    s.block_size = 1;
    s.elem_bytes = 4;
    s.num_layers = 1;
    s.token_stride = 1;
    KvPoolView d = s;
    d.base = out;
    d.elem_bytes = 2;
    KvCopyArgs r;
    r.src = s;
    r.dst = d;
    r.num_tokens = 1;
    r.layer_end = 1;
    tandem::kv_copy_host(r);
    CHECK(out[0] == 0x3f81 && out[1] == 0x3f80, "kv copy host rounding: %04x %04x", out[0], out[1]);
  }
  std::printf("gpu kv copy: %d cases (row widths 32/3, block size 16/32 x f32/bf16/fp8 each side, layer ranges, pool/packed) checked on %s%s\n",
              cases, g.name.c_str(), far_cases > 0 ? (" (and " + std::to_string(far_cases) + " between pools past 2^32 elements)").c_str() : "");
}

}  // namespace tandem_test::gpu
