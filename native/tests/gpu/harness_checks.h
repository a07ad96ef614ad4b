// The SIMT harness's own checks (simt/harness.h): that it exposes what a GPU does and a
// one-block-at-a-time emulator would hide. Each hazard is planted in a small kernel that is right
// only in index order, and must come out wrong under the reverse and shuffled schedules:
//   - a "last" block that is last by index and reads the other blocks' results with no counter
//     (the fixed kernel, last_block_arrive, must be right under every schedule);
//   - a thread reading its neighbour's shared value with no barrier between;
//   - a read of a cp.async destination before the wait_group that covers it, a wait_group that
//     leaves the newest groups in flight, and a copy never committed;
//   - thread order between barriers really shuffled (integer atomics hand out slots);
//   - a programmatic dependent launch with threads that skip grid_dependency_wait is refused;
//   - a __syncthreads some threads skip, and a warp collective half a warp calls, are refused;
//   - cp.async and ldmatrix with a misaligned address, or a cp.async into global memory, fail
//     as they fault on a GPU;
//   - the SIMT device refuses to allocate, free or synchronize while a graph is being captured,
//     as CUDA does (it would otherwise record a graph the GPU never makes);
//   - a 16-byte vector read at an 8-byte address, which x86 does and a GPU faults on, kills the
//     process with the harness's report (TANDEM_SIMT_ALIGN_TRAP builds; run in a child process);
//   - the SIMT device's copies with pinned host memory are as asynchronous as CUDA's: a pinned
//     download reads as poison until the synchronize, and a pinned upload's source changed before
//     it is refused;
//   - the side stream's copies and kernels run only at synchronize_side() (the latest a GPU may
//     run them), so a host that reads their results early, or waits with synchronize(), fails.
// The checks set the schedule themselves and put the process's back when done.
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../src/cuda/device.h"
#include "../../src/cuda/kernel_lang.h"
#include "../../src/cuda/kernels/last_block.cuh"
#include "../../src/cuda/simt/harness.h"
#include "../check.h"

namespace tandem_test::gpu {

namespace harness_detail {

namespace simt = tandem::simt;
namespace td = tandem::gpu::td;

/** Blocks write partial[b] = b + 1; the "last" block sums them, by index or by arrival. */
inline long long sum_of_partials(int blocks, bool by_arrival) {
  std::vector<int> partial(static_cast<size_t>(blocks), 0);
  int counter = 0;
  long long out = -1;
  simt::launch(simt::Dim3(static_cast<unsigned>(blocks)), simt::Dim3(32), 0, [&] {
    TD_SHARED(int, flag, 1);
    const int b = static_cast<int>(blockIdx.x);
    if (threadIdx.x == 0) partial[static_cast<size_t>(b)] = b + 1;
    const bool last = by_arrival ? tandem::gpu::simt_target::last_block_arrive(&counter, blocks, flag)
                                 : b == static_cast<int>(gridDim.x) - 1;
    if (last && threadIdx.x == 0) out = std::accumulate(partial.begin(), partial.end(), 0LL);
  });
  return out;
}

/** Thread i stores i in shared memory and reads thread i - 1's value, with or without a barrier. */
inline int neighbour_reads_wrong(bool barrier) {
  constexpr int kThreads = 128;
  std::vector<int> got(kThreads, -2);
  simt::launch(simt::Dim3(1), simt::Dim3(kThreads), 0, [&] {
    TD_SHARED(int, s, kThreads);
    const int i = static_cast<int>(threadIdx.x);
    s[i] = i;
    if (barrier) td::sync_threads();
    got[static_cast<size_t>(i)] = i > 0 ? s[i - 1] : -1;
  });
  int wrong = 0;
  for (int i = 1; i < kThreads; ++i) wrong += got[static_cast<size_t>(i)] != i - 1;
  return wrong;
}

/** Slots thread 0..n-1 drew from one atomic counter in one round: identity in index order. */
inline bool atomic_slots_in_index_order() {
  constexpr int kThreads = 256;
  std::vector<int> slot(kThreads, -1);
  int next = 0;
  simt::launch(simt::Dim3(1), simt::Dim3(kThreads), 0,
               [&] { slot[threadIdx.x] = td::atomic_add(&next, 1); });
  for (int i = 0; i < kThreads; ++i) {
    if (slot[static_cast<size_t>(i)] != i) return false;
  }
  return true;
}

/** The error of a dependent launch whose threads from `skip_from` on return before the wait ("" if none). */
inline std::string dependent_launch_error(bool dependent, unsigned skip_from) {
  try {
    simt::launch(simt::Dim3(4), simt::Dim3(64), 0, [&] {
      if (threadIdx.x >= skip_from) return;
      td::grid_dependency_wait();
    }, dependent);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

/** What a one-warp launch of `body` threw ("" if nothing). */
inline std::string launch_error(const std::function<void()>& body) {
  try {
    simt::launch(simt::Dim3(1), simt::Dim3(32), 64, body);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

/** What capturing `record` on the device threw ("" if nothing). */
inline std::string capture_error(tandem::gpu::Device& d, const std::function<void()>& record) {
  try {
    d.capture(record);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

/** How a child process running `body` ended ("exit N" or "signal N"), and what it wrote to stderr. */
inline std::pair<std::string, std::string> in_child(const std::function<void()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return {"no pipe", ""};
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) return {"no fork", ""};
  if (pid == 0) {
    const rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);  // the planted trap leaves no core file behind
    close(fds[0]);
    dup2(fds[1], 2);
    body();
    _exit(0);
  }
  close(fds[1]);
  std::string err;
  char buf[512];
  for (ssize_t k; (k = read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, static_cast<size_t>(k));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return {WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status)) : "exit " + std::to_string(WEXITSTATUS(status)), err};
}

/** Thread 5 of a one-block launch reads 16 bytes at `offset` into a 16-byte aligned buffer of 0, 1, 2, ... */
inline uint32_t vector_read_at(size_t offset) {
  alignas(16) static unsigned char bytes[64];
  std::iota(bytes, bytes + 64, static_cast<unsigned char>(0));
  uint32_t got = 0;
  simt::launch(simt::Dim3(1), simt::Dim3(32), 0, [&] {
    if (threadIdx.x != 5) return;
    got = reinterpret_cast<const td::vec16*>(bytes + offset)->x;
  });
  return got;
}

}  // namespace harness_detail

inline void test_harness(tandem::gpu::Device& device) {
  namespace simt = tandem::simt;
  namespace td = tandem::gpu::td;
  using namespace harness_detail;
  const simt::Schedule before = simt::schedule();
  constexpr int kBlocks = 64;
  constexpr long long kSum = kBlocks * (kBlocks + 1) / 2;
  const simt::Schedule forward{simt::Order::kForward, 1}, reverse{simt::Order::kReverse, 1};
  const simt::Schedule schedules[] = {forward, reverse, {simt::Order::kShuffle, 1}, {simt::Order::kShuffle, 99}};
  for (const simt::Schedule& s : schedules) {
    simt::set_schedule(s);
    const std::string how = simt::describe(s);
    const bool in_order = s.order == simt::Order::kForward;
    // The planted bugs: right in index order only.
    const long long by_index = sum_of_partials(kBlocks, false);
    CHECK((by_index == kSum) == in_order, "harness (%s): the last block by index summed %lld (all %lld)", how.c_str(),
          by_index, kSum);
    const int unsynced = neighbour_reads_wrong(false);
    CHECK((unsynced == 0) == in_order, "harness (%s): %d neighbour reads wrong with no barrier", how.c_str(), unsynced);
    const bool slots_in_order = atomic_slots_in_index_order();
    CHECK(slots_in_order == in_order, "harness (%s): atomic slots in thread order: %d", how.c_str(), static_cast<int>(slots_in_order));
    // The fixed kernels: right under every schedule.
    CHECK(sum_of_partials(kBlocks, true) == kSum, "harness (%s): last_block_arrive's block summed wrong", how.c_str());
    CHECK(neighbour_reads_wrong(true) == 0, "harness (%s): neighbour reads wrong after a barrier", how.c_str());
  }

  // cp.async: a destination reads as poison until the wait_group covering its group.
  simt::set_schedule(forward);
  std::vector<uint32_t> src(12);
  std::iota(src.begin(), src.end(), 100u);
  std::vector<uint32_t> seen;
  simt::launch(simt::Dim3(1), simt::Dim3(32), 0, [&] {
    TD_SHARED(uint32_t, s, 12);
    if (threadIdx.x != 0) return;
    td::cp_async16(s, src.data(), true);  // group 0
    seen.push_back(s[0]);                 // before any wait: poison
    td::cp_async_commit();
    td::cp_async16(s + 4, src.data() + 4, true);  // group 1
    td::cp_async_commit();
    td::cp_async16(s + 8, src.data() + 8, false);  // never committed: zero fill, never lands
    td::cp_async_wait<1>();                        // group 0 lands, group 1 may still be in flight
    seen.push_back(s[0]);
    seen.push_back(s[4]);
    td::cp_async_wait<0>();  // group 1 lands; the uncommitted copy does not
    seen.push_back(s[4]);
    seen.push_back(s[8]);
    td::cp_async_commit();
    td::cp_async_wait<0>();
    seen.push_back(s[8]);
  });
  const std::vector<uint32_t> want = {0xFFFFFFFFu, 100u, 0xFFFFFFFFu, 104u, 0xFFFFFFFFu, 0u};
  CHECK(seen == want, "harness: cp.async landed at the wrong wait (%zu values seen)", seen.size());

  const std::string skipped = dependent_launch_error(true, 48);
  CHECK(skipped.find("exited without grid_dependency_wait") != std::string::npos,
        "harness: a dependent launch whose threads skip the wait was not refused (%s)", skipped.c_str());
  CHECK(dependent_launch_error(true, 64).empty() && dependent_launch_error(false, 0).empty(),
        "harness: a dependent launch that waits everywhere, or a plain one, was refused");

  void* held = device.alloc(64);
  const std::string in_capture[] = {
      capture_error(device, [&] { device.free(device.alloc(16)); }),
      capture_error(device, [&] { device.synchronize(); }),
      capture_error(device, [&] { device.free(held); }),
  };
  CHECK(in_capture[0].find("alloc while a graph is being captured") != std::string::npos &&
            in_capture[1].find("synchronize while a graph is being captured") != std::string::npos &&
            in_capture[2].find("free while a graph is being captured") != std::string::npos,
        "harness: the SIMT device let a capture allocate (%s), synchronize (%s) or free (%s)", in_capture[0].c_str(),
        in_capture[1].c_str(), in_capture[2].c_str());
  CHECK(capture_error(device, [&] { device.fill(held, 0, 64); }).empty(), "harness: a fill refused in a capture");

  // Addresses the GPU faults on: a global source off 16 bytes, a destination in global memory, an
  // ldmatrix row off 16 bytes; and the same operations with good addresses.
  alignas(16) static unsigned char global[64];
  const std::string bad_src = launch_error([] {
    TD_SHARED(uint32_t, s, 8);
    td::cp_async16(s, global + 4, true);
  });
  const std::string bad_dst = launch_error([] { td::cp_async16(global + 16, global, true); });
  const std::string bad_row = launch_error([] {
    TD_SHARED(uint32_t, s, 64);
    uint32_t r[4];
    td::ldmatrix_x4(r, reinterpret_cast<unsigned char*>(s) + 16 * (threadIdx.x % 8) + 8);
  });
  const std::string good = launch_error([] {
    TD_SHARED(uint32_t, s, 64);
    td::cp_async16(s + 4 * (threadIdx.x % 8), global + 16 * (threadIdx.x % 4), true);
    td::cp_async_commit();
    td::cp_async_wait<0>();
    td::sync_threads();
    uint32_t r[4];
    td::ldmatrix_x4(r, s + 4 * (threadIdx.x % 8));
  });
  const std::string divergent = launch_error([] {
    if (threadIdx.x < 16) return;
    td::sync_threads();
  });
  const std::string half_warp = launch_error([] {
    if (threadIdx.x < 16) (void)td::shfl_xor(1.0f, 1);
  });
  CHECK(divergent.find("divergent __syncthreads: 16 of 32 threads at the barrier, 16 exited") != std::string::npos &&
            half_warp.find("16 of 32 lanes at a warp collective (16 exited, 0 at __syncthreads)") != std::string::npos,
        "harness: divergence not refused (%s | %s)", divergent.c_str(), half_warp.c_str());
  CHECK(bad_src.find("cp.async: a global address 4 bytes past 16-byte alignment") != std::string::npos &&
            bad_dst.find("cp.async: an address outside the block's shared memory") != std::string::npos &&
            bad_row.find("ldmatrix: a shared address 8 bytes past 16-byte alignment") != std::string::npos && good.empty(),
        "harness: address checks (%s | %s | %s | %s)", bad_src.c_str(), bad_dst.c_str(), bad_row.c_str(), good.c_str());

  // Pinned copies: a download lands at the synchronize (a pageable one at once), and an upload's
  // pinned source must stay as it was until then.
  auto* pin = static_cast<unsigned char*>(device.alloc_pinned(64));
  void* dev = device.alloc(64);
  device.fill(dev, 7, 64);
  device.download(pin, dev, 64);
  const int early = pin[5];
  device.synchronize();
  const int landed = pin[5];
  std::vector<unsigned char> pageable(64, 0);
  device.download(pageable.data(), dev, 64);
  std::memset(pin, 1, 64);
  device.upload(dev, pin, 64);
  pin[3] = 2;  // the planted bug: the source rewritten while its copy may still be reading it
  std::string rewritten;
  try {
    device.synchronize();
  } catch (const std::exception& e) {
    rewritten = e.what();
  }
  device.upload(dev, pin, 64);
  std::string kept;
  try {
    device.synchronize();
  } catch (const std::exception& e) {
    kept = e.what();
  }
  device.free(dev);
  device.free_pinned(pin);
  CHECK(early == 0xA5 && landed == 7 && pageable[5] == 7 &&
            rewritten.find("the pinned host memory an upload of 64 bytes reads changed (byte 3) before the device was "
                           "synchronized") != std::string::npos &&
            kept.empty(),
        "harness: pinned copies (early %d, landed %d, pageable %d; rewritten: %s; kept: %s)", early, landed, pageable[5],
        rewritten.c_str(), kept.c_str());

  // The side stream: an upload and a kernel on it wait for synchronize_side(), not synchronize().
  {
    auto* src = static_cast<unsigned char*>(device.alloc_pinned(64));
    auto* dst = static_cast<unsigned char*>(device.alloc(64));
    device.fill(dst, 0, 64);
    std::memset(src, 9, 64);
    device.upload_side(dst, src, 64);
    simt::launch_on(device.side_stream(), simt::Dim3(1), simt::Dim3(32), 0, [dst] { dst[32 + threadIdx.x] = 4; });
    const int queued = dst[0] + dst[40];
    device.synchronize();
    const int after_main = dst[0] + dst[40];
    device.synchronize_side();
    const int after_side = dst[0] + dst[40];
    device.free(dst);
    device.free_pinned(src);
    CHECK(queued == 0 && after_main == 0 && after_side == 13,
          "harness: side stream (%d queued, %d after synchronize, %d after synchronize_side; want 0, 0, 13)", queued, after_main,
          after_side);
  }

  // A misaligned vector read: the right bytes on x86, a fault on a GPU; here a trap and the report.
  std::string misaligned = "not built with TANDEM_SIMT_ALIGN_TRAP";
#if defined(TANDEM_SIMT_ALIGN_TRAP)
  const auto [how_bad, report] = in_child([] { vector_read_at(8); });
  const auto [how_good, quiet] = in_child([] { _exit(vector_read_at(16) == 0x13121110u ? 0 : 1); });
  CHECK(how_bad == "signal " + std::to_string(SIGILL) &&
            report.find("simt: illegal instruction in a kernel, block (0,0,0) thread (5,0,0) of a launch of grid (1,1,1) x "
                        "block (32,1,1): the SIMT kernel builds trap on a misaligned access") != std::string::npos &&
            how_good == "exit 0" && quiet.empty(),
        "harness: a misaligned vector read (%s: %s) or an aligned one (%s: %s)", how_bad.c_str(), report.c_str(),
        how_good.c_str(), quiet.c_str());
  misaligned = "a misaligned 16-byte vector read traps";
#endif

  bool refused = false;
  try {
    simt::parse_schedule("sideways");
  } catch (const std::invalid_argument& e) {
    refused = std::string(e.what()).find("TANDEM_SIMT_ORDER=sideways") != std::string::npos;
  }
  CHECK(refused, "harness: TANDEM_SIMT_ORDER=sideways was not refused by name");
  CHECK(simt::parse_schedule("shuffle:42").seed == 42 && simt::parse_schedule("reverse").order == simt::Order::kReverse,
        "harness: schedule values misread");
  simt::set_schedule(before);
  std::printf(
      "gpu harness: a last-by-index block, a missing barrier and atomic slot order caught out of index order (reverse, "
      "2 shuffles), last_block_arrive right under all, cp.async landing at its wait_group checked, a dependent launch that skips its wait refused, allocation and synchronization in a graph capture refused, misaligned cp.async and ldmatrix addresses refused, divergent barriers and half-warp collectives refused, pinned copies asynchronous until the synchronize, the side stream deferred to its synchronize, %s\n",
      misaligned.c_str());
}

}  // namespace tandem_test::gpu
