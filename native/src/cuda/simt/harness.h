// The SIMT harness: runs CUDA-style kernels on host threads so their logic is tested without a
// GPU. A launch runs each block of the grid in turn; every thread of a block is a fiber
// (fiber.h), and control passes between fibers only at barriers, so a kernel sees the
// semantics it relies on:
//   - __syncthreads: every thread of the block arrives before any continues (a thread that
//     exits while others wait is reported as a divergent barrier, not ignored);
//   - shared memory: one arena per block, filled with a NaN pattern before each block so a
//     read of something no thread wrote shows up in the results;
//   - warp collectives (shuffles, ldmatrix, mma): each lane deposits its operands, the warp
//     meets at a warp barrier, and each lane computes its result from every lane's operands.
//   - programmatic dependent launches (launch with dependent = true): every thread must call
//     grid_dependency_wait before it exits. On a GPU such a kernel may start while the one before
//     it runs, and it finishes only after that one if its threads waited; a thread that skips
//     the wait reads early, and a grid none of whose threads waited can finish first, so the
//     next kernel's wait no longer covers the one before;
//   - addresses a GPU faults on: cp.async and ldmatrix need 16-byte aligned addresses, their
//     shared ones inside the block's shared memory (check_shared16); the kernel units' own
//     typed accesses trap when misaligned (TANDEM_SIMT_ALIGN_TRAP), and a SIGILL in a kernel is
//     reported with its launch, block and thread before the process dies of it;
//   - cp.async (cp_async_copy/commit/wait): a copy lands only at the wait_group that covers its
//     group, and its destination holds the poison until then, so a read before the right wait
//     shows up; copies of groups the wait leaves pending stay pending, as on the GPU.
// Blocks run one after another on the calling thread; a kernel must not depend on blocks
// running concurrently (none of ours do). A GPU runs blocks, and threads between barriers, in
// no fixed order, so neither does the harness unless told to (Schedule): by default blocks run
// in a shuffled order, a block's warps in a fresh shuffled order between block barriers, and a
// warp's lanes in a fresh shuffled order between its collectives, so a kernel that leans on an order (a "last" block that is last by
// index, a read of a neighbour's shared value with no barrier between) fails here as it might
// there. Launches can be recorded instead of run (capture), which is how the SIMT device
// emulates CUDA graphs: arguments are fixed at capture time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fiber.h"
#include "streams.h"

namespace tandem::simt {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr Dim3() = default;
  constexpr Dim3(unsigned x_, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

inline constexpr unsigned kWarpSize = 32;
inline constexpr size_t kSlotBytes = 32;                 // operands one lane deposits per collective
inline constexpr size_t kMaxStaticShared = 48 * 1024;    // CUDA's static limit
inline constexpr size_t kMaxShared = 163 * 1024;         // sm_80's opt-in limit, the smallest we build for

enum class WaitState : uint8_t { kRunnable, kBlockBarrier, kWarpBarrier, kDone };

struct Block;

/** A cp.async in flight: the bytes it read, where they land, and its commit group. */
struct AsyncCopy {
  void* dst = nullptr;
  unsigned group = 0;
  unsigned char bytes[16];
};

/** One emulated CUDA thread. */
struct ThreadCtx {
  Dim3 thread_idx, block_idx, block_dim, grid_dim;
  unsigned linear = 0, lane = 0, warp = 0;
  size_t shared_cursor = 0;
  unsigned warp_ops = 0;  // collectives done so far: selects the double-buffered slot
  WaitState state = WaitState::kRunnable;
  Block* block = nullptr;
  Context ctx;
  bool dependency_waited = false;       // grid_dependency_wait called (dependent launches)
  std::vector<AsyncCopy> async_copies;  // issued, not yet landed
  unsigned async_groups = 0;            // commit groups closed so far
};

/** The thread whose fiber is running; valid only inside a kernel launched by launch(). */
ThreadCtx& current();

/**
 * Runs body once per thread of every block (blockIdx/threadIdx through current()). `dependent`:
 * a programmatic dependent launch, whose every thread must call grid_dependency_wait.
 */
void launch(Dim3 grid, Dim3 block, size_t dynamic_shared_bytes, std::function<void()> body, bool dependent = false);
/** griddepcontrol.wait: the launches before have finished (they have here); recorded for the check. */
void grid_dependency_wait();

void sync_threads();
void sync_warp();

/** The next `bytes` of the block's static shared arena (every thread gets the same address). */
void* shared_alloc(size_t bytes, size_t align);
/** The block's dynamic shared memory (launch's dynamic_shared_bytes). */
void* dynamic_shared();
/**
 * Throws unless [p, p + bytes) lies in this block's shared memory (static or dynamic) and p is
 * 16-byte aligned: what ldmatrix's row addresses and cp.async's destination must be on a GPU.
 */
void check_shared16(const void* p, size_t bytes, const char* what);

/**
 * A warp collective: this lane deposits `mine`; once the whole warp has, get(lane) reads any
 * lane's deposit. Slots are double-buffered, so one barrier per collective suffices: a lane
 * cannot reach the collective after next (which reuses this slot) before every lane has
 * passed the next one's barrier, by which time all reads of this one are done.
 */
class WarpOp {
 public:
  template <typename T>
  explicit WarpOp(const T& mine) {
    static_assert(sizeof(T) <= kSlotBytes, "warp collective operand too large");
    std::memcpy(begin(), &mine, sizeof(T));
    sync_warp();
  }
  template <typename T>
  T get(unsigned lane) const {
    T out;
    std::memcpy(&out, slot(lane), sizeof(T));
    return out;
  }

 private:
  unsigned char* begin();
  const unsigned char* slot(unsigned lane) const;
  Block* block_ = nullptr;
  unsigned warp_ = 0;
  unsigned parity_ = 0;
};

/**
 * The 16-byte cp.async of `src` (zeros when !pred) into shared `dst`: it lands at the
 * cp_async_wait that covers the group it is committed in. Until then `dst` reads as poison.
 * Both addresses must be 16-byte aligned, as on the GPU (else it throws).
 */
void cp_async_copy(void* dst, const void* src, bool pred);
/** Closes this thread's current group of copies (cp.async.commit_group). */
void cp_async_commit();
/** Lands every copy except those of the `pending` most recent groups (cp.async.wait_group). */
void cp_async_wait(unsigned pending);

/** The order in which blocks of a launch, and threads of a block between barriers, run. */
enum class Order : uint8_t {
  kForward,  // blocks by index (x fastest); warps and lanes by index
  kReverse,  // the last block first; warps and lanes from the highest index down
  kShuffle,  // seeded random orders: of blocks, of warps every round, of lanes every pass
};
struct Schedule {
  Order order = Order::kShuffle;
  uint64_t seed = 1;
};
/**
 * The process's schedule. Read once from TANDEM_SIMT_ORDER (forward | reverse | shuffle |
 * shuffle:SEED; unset: shuffle, seed 1) unless set_schedule set it first; a bad value throws.
 */
Schedule schedule();
/** Sets the schedule for launches from now on (on every host thread); shuffles restart from the seed. */
void set_schedule(Schedule s);
/** "shuffled blocks and threads, seed 1", "reverse order", "in order". */
std::string describe(Schedule s);
/** Parses a TANDEM_SIMT_ORDER value; throws std::invalid_argument naming the value. */
Schedule parse_schedule(const std::string& text);

/** Records launches (and the SIMT device's copies) instead of running them: a CUDA graph. */
struct Capture {
  std::vector<std::function<void()>> ops;
  void replay() const {
    for (const auto& op : ops) op();
  }
};
/** While set, launch() appends to it instead of running. One per host thread. */
void set_capture(Capture* capture);
Capture* active_capture();

/** launch() on `stream`: queued when the stream defers, else as launch(). */
void launch_on(const void* stream, Dim3 grid, Dim3 block, size_t dynamic_shared_bytes, std::function<void()> body,
               bool dependent = false);

/** Launches run so far on this host thread (tests use it to see that a graph replayed). */
uint64_t launch_count();

}  // namespace tandem::simt
