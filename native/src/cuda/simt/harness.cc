#include "harness.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <stdexcept>

namespace tandem::simt {

struct Block {
  std::vector<ThreadCtx> threads;
  std::vector<unsigned char> shared;   // fixed capacity: pointers handed out never move
  std::vector<unsigned char> dynamic;
  std::vector<unsigned char> slots;    // [warp][parity][lane][kSlotBytes]
  size_t static_high_water = 0;
  Context scheduler;
  const std::function<void()>* body = nullptr;
  bool dependent = false;
  std::string error;
};

namespace {

constexpr size_t kFiberStackBytes = 64 * 1024;
// 0xFF bytes read as a NaN in any float type: an unwritten shared value poisons results.
constexpr unsigned char kPoison = 0xFF;

// The schedule: set once from the environment (or by set_schedule); `epoch` counts changes, so
// each host thread restarts its shuffle stream from the seed after one.
struct ScheduleState {
  std::atomic<uint8_t> order;
  std::atomic<uint64_t> seed;
  std::atomic<uint64_t> epoch{0};
  ScheduleState() {
    const char* env = std::getenv("TANDEM_SIMT_ORDER");
    const Schedule s = env != nullptr && *env != 0 ? parse_schedule(env) : Schedule{};
    order.store(static_cast<uint8_t>(s.order));
    seed.store(s.seed);
  }
};

ScheduleState& schedule_state() {
  static ScheduleState state;
  return state;
}

/** splitmix64: a small, fast, well-mixed stream; this host thread's, restarted at each epoch. */
struct Rng {
  uint64_t state = 0;
  uint64_t epoch = ~uint64_t{0};
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /** An index below n (0 < n < 2^32), by multiply-shift: no division on this hot path. */
  size_t below(size_t n) { return static_cast<size_t>(((next() >> 32) * static_cast<uint64_t>(n)) >> 32); }
};

thread_local Rng t_rng;

/**
 * A warp's lanes for one pass (n <= 32): in order, reversed, or, shuffled, start + i * stride
 * (mod n) for a random start and a random stride prime to n: two draws a pass instead of a
 * Fisher-Yates shuffle's n - 1, on the path every warp collective takes.
 */
void lane_order(Order o, std::vector<uint32_t>& order, size_t n) {
  order.resize(n);
  if (o != Order::kShuffle) {
    for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(o == Order::kReverse ? n - 1 - i : i);
    return;
  }
  size_t stride = 1 + t_rng.below(n);
  while (std::gcd(stride, n) != 1) stride = stride % n + 1;
  size_t at = t_rng.below(n);
  for (size_t i = 0; i < n; ++i) {
    order[i] = static_cast<uint32_t>(at);
    at += stride;
    if (at >= n) at -= n;
  }
}

/** Fills `order` with 0..n-1 in the schedule's order. */
void schedule_order(Order o, std::vector<uint32_t>& order, size_t n) {
  order.resize(n);
  std::iota(order.begin(), order.end(), 0u);
  if (o == Order::kReverse) {
    std::reverse(order.begin(), order.end());
  } else if (o == Order::kShuffle) {
    for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[t_rng.below(i)]);
  }
}

thread_local ThreadCtx* t_current = nullptr;
thread_local Capture* t_capture = nullptr;
thread_local uint64_t t_launches = 0;

/**
 * SIGILL inside a kernel: with TANDEM_SIMT_ALIGN_TRAP (CMakeLists.txt) the kernel units trap on
 * a misaligned access, which a GPU faults on. Says which thread of which launch, then dies of
 * the signal as before (SA_RESETHAND: the trap runs again with the default action). The process
 * is ending, so the formatting here need not be async-signal-safe; write(2) is.
 */
void on_illegal_instruction(int /*sig*/) {
  const ThreadCtx* t = t_current;
  if (t == nullptr) return;
  char msg[512];
  const int n = std::snprintf(
      msg, sizeof msg,
      "simt: illegal instruction in a kernel, block (%u,%u,%u) thread (%u,%u,%u) of a launch of grid (%u,%u,%u) x block "
      "(%u,%u,%u): the SIMT kernel builds trap on a misaligned access (a 16-byte vector at an address that is not a "
      "multiple of 16, ...), which a GPU faults on; native/scripts/ubsan-check.sh names the file and line\n",
      t->block_idx.x, t->block_idx.y, t->block_idx.z, t->thread_idx.x, t->thread_idx.y, t->thread_idx.z, t->grid_dim.x,
      t->grid_dim.y, t->grid_dim.z, t->block_dim.x, t->block_dim.y, t->block_dim.z);
  if (n > 0) (void)!write(2, msg, static_cast<size_t>(std::min(n, static_cast<int>(sizeof msg) - 1)));
}

void install_trap_report() {
  static const bool installed = [] {
    struct sigaction sa = {};
    sa.sa_handler = &on_illegal_instruction;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = static_cast<int>(SA_RESETHAND | SA_NODEFER);
    struct sigaction old = {};
    // Only where nobody else handles SIGILL (Node does not; a debugger's or a sanitizer's stays).
    if (sigaction(SIGILL, nullptr, &old) == 0 && old.sa_handler == SIG_DFL && (old.sa_flags & SA_SIGINFO) == 0) {
      sigaction(SIGILL, &sa, nullptr);
    }
    return true;
  }();
  (void)installed;
}

struct Runner {
  Block block;
  std::vector<std::unique_ptr<FiberStack>> stacks;
  std::vector<uint32_t> block_order, warp_order, lane_order;
  Order order = Order::kForward;
  Runner() { block.shared.resize(kMaxStaticShared); }
};

Runner& runner() {
  thread_local Runner r;
  return r;
}

void fiber_entry(void* arg) {
  auto* t = static_cast<ThreadCtx*>(arg);
  try {
    (*t->block->body)();
    if (t->block->dependent && !t->dependency_waited && t->block->error.empty()) {
      t->block->error = "thread " + std::to_string(t->linear) +
                        " of a programmatic dependent launch exited without grid_dependency_wait (it may read before the "
                        "kernel before it finishes, and a grid none of whose threads waited can finish before it)";
    }
  } catch (const std::exception& e) {
    if (t->block->error.empty()) t->block->error = e.what();
  } catch (...) {
    if (t->block->error.empty()) t->block->error = "unknown exception in a kernel";
  }
  t->state = WaitState::kDone;
  switch_context(t->ctx, t->block->scheduler);
  __builtin_trap();  // a finished fiber is never resumed
}

std::string where(const Block& b) {
  const Dim3& i = b.threads.front().block_idx;
  return "block (" + std::to_string(i.x) + "," + std::to_string(i.y) + "," + std::to_string(i.z) + ")";
}

void run_block(Runner& r, bool first_of_launch) {
  Block& b = r.block;
  const size_t n = b.threads.size();
  while (r.stacks.size() < n) r.stacks.push_back(std::make_unique<FiberStack>(kFiberStackBytes));
  std::memset(b.shared.data(), kPoison, first_of_launch ? b.shared.size() : b.static_high_water);
  if (!b.dynamic.empty()) std::memset(b.dynamic.data(), kPoison, b.dynamic.size());
  for (size_t i = 0; i < n; ++i) {
    ThreadCtx& t = b.threads[i];
    t.state = WaitState::kRunnable;
    t.shared_cursor = 0;
    t.warp_ops = 0;
    t.dependency_waited = false;
    t.async_copies.clear();  // a thread that exits with copies in flight: they land nowhere
    t.async_groups = 0;
    r.stacks[i]->prepare(t.ctx, &fiber_entry, &t);
  }
  // Warp by warp: a warp runs (its lanes in the schedule's order) until every lane is at a block
  // barrier or done, its warp collectives released as soon as the whole warp meets them; then the
  // next warp. Once every warp is there, the block barrier releases them all.
  const unsigned warps = static_cast<unsigned>((n + kWarpSize - 1) / kWarpSize);
  for (;;) {
    schedule_order(r.order, r.warp_order, warps);
    size_t done = 0, at_block = 0;
    for (const uint32_t w : r.warp_order) {
      const size_t lo = w * kWarpSize, size = std::min(n, lo + kWarpSize) - lo;
      for (;;) {
        lane_order(r.order, r.lane_order, size);
        size_t w_done = 0, w_block = 0, w_warp = 0;
        for (const uint32_t lane : r.lane_order) {
          ThreadCtx& t = b.threads[lo + lane];
          if (t.state == WaitState::kRunnable) {
            t_current = &t;
            switch_context(b.scheduler, t.ctx);
            t_current = nullptr;
            if (t.shared_cursor > b.static_high_water) b.static_high_water = t.shared_cursor;
          }
          w_done += t.state == WaitState::kDone;
          w_block += t.state == WaitState::kBlockBarrier;
          w_warp += t.state == WaitState::kWarpBarrier;
        }
        if (!b.error.empty()) throw std::runtime_error("simt: " + where(b) + ": " + b.error);
        if (w_warp == 0) {
          done += w_done;
          at_block += w_block;
          break;
        }
        if (w_warp != size) {
          throw std::runtime_error("simt: " + where(b) + ": warp " + std::to_string(w) + ": " + std::to_string(w_warp) + " of " +
                                   std::to_string(size) + " lanes at a warp collective (" + std::to_string(w_done) +
                                   " exited, " + std::to_string(w_block) + " at __syncthreads): collectives need the full warp");
        }
        for (size_t i = lo; i < lo + size; ++i) b.threads[i].state = WaitState::kRunnable;
      }
    }
    if (done == n) return;
    if (at_block == n) {
      for (ThreadCtx& t : b.threads) t.state = WaitState::kRunnable;
      continue;
    }
    throw std::runtime_error("simt: " + where(b) + ": divergent __syncthreads: " + std::to_string(at_block) + " of " +
                             std::to_string(n) + " threads at the barrier, " + std::to_string(done) + " exited");
  }
}

void run_launch(Dim3 grid, Dim3 block, size_t dynamic_bytes, const std::function<void()>& body, bool dependent) {
  const size_t n = static_cast<size_t>(block.x) * block.y * block.z;
  if (n == 0 || n > 1024) throw std::runtime_error("simt: block of " + std::to_string(n) + " threads (1..1024)");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) throw std::runtime_error("simt: empty grid");
  if (grid.y > 65535 || grid.z > 65535) throw std::runtime_error("simt: grid.y and grid.z must be <= 65535");
  install_trap_report();
  Runner& r = runner();
  Block& b = r.block;
  b.body = &body;
  b.dependent = dependent;
  b.error.clear();
  b.threads.resize(n);
  b.dynamic.resize(dynamic_bytes);
  b.slots.assign(((n + kWarpSize - 1) / kWarpSize) * 2 * kWarpSize * kSlotBytes, 0);
  b.static_high_water = 0;
  ++t_launches;
  ScheduleState& st = schedule_state();
  r.order = static_cast<Order>(st.order.load());
  if (t_rng.epoch != st.epoch.load()) {
    t_rng.epoch = st.epoch.load();
    t_rng.state = st.seed.load();
  }
  const size_t blocks = static_cast<size_t>(grid.x) * grid.y * grid.z;
  if (blocks > UINT32_MAX) throw std::runtime_error("simt: grid of " + std::to_string(blocks) + " blocks (at most 2^32 - 1)");
  schedule_order(r.order, r.block_order, blocks);
  for (size_t run = 0; run < blocks; ++run) {
    const size_t linear = r.block_order[run];
    const Dim3 block_idx(static_cast<unsigned>(linear % grid.x), static_cast<unsigned>(linear / grid.x % grid.y),
                         static_cast<unsigned>(linear / (static_cast<size_t>(grid.x) * grid.y)));
    size_t i = 0;
    for (unsigned tz = 0; tz < block.z; ++tz) {
      for (unsigned ty = 0; ty < block.y; ++ty) {
        for (unsigned tx = 0; tx < block.x; ++tx, ++i) {
          ThreadCtx& t = b.threads[i];
          t.thread_idx = Dim3(tx, ty, tz);
          t.block_idx = block_idx;
          t.block_dim = block;
          t.grid_dim = grid;
          t.linear = static_cast<unsigned>(i);
          t.lane = static_cast<unsigned>(i % kWarpSize);
          t.warp = static_cast<unsigned>(i / kWarpSize);
          t.block = &b;
        }
      }
    }
    run_block(r, run == 0);
    if (b.static_high_water + dynamic_bytes > kMaxShared) {
      throw std::runtime_error("simt: " + std::to_string(b.static_high_water + dynamic_bytes) +
                               " bytes of shared memory per block (sm_80 allows " + std::to_string(kMaxShared) + ")");
    }
  }
}

}  // namespace

ThreadCtx& current() { return *t_current; }

void launch(Dim3 grid, Dim3 block, size_t dynamic_shared_bytes, std::function<void()> body, bool dependent) {
  if (t_capture != nullptr) {
    t_capture->ops.push_back([grid, block, dynamic_shared_bytes, dependent, body = std::move(body)] {
      run_launch(grid, block, dynamic_shared_bytes, body, dependent);
    });
    return;
  }
  run_launch(grid, block, dynamic_shared_bytes, body, dependent);
}

void grid_dependency_wait() { current().dependency_waited = true; }

void sync_threads() {
  ThreadCtx& t = current();
  t.state = WaitState::kBlockBarrier;
  switch_context(t.ctx, t.block->scheduler);
}

void sync_warp() {
  ThreadCtx& t = current();
  t.state = WaitState::kWarpBarrier;
  switch_context(t.ctx, t.block->scheduler);
}

void* shared_alloc(size_t bytes, size_t align) {
  ThreadCtx& t = current();
  size_t at = (t.shared_cursor + align - 1) / align * align;
  if (at + bytes > kMaxStaticShared) {
    throw std::runtime_error("simt: static shared memory over " + std::to_string(kMaxStaticShared) + " bytes");
  }
  t.shared_cursor = at + bytes;
  return t.block->shared.data() + at;
}

void* dynamic_shared() { return current().block->dynamic.data(); }

void check_shared16(const void* p, size_t bytes, const char* what) {
  const Block& b = *current().block;
  const auto at = reinterpret_cast<uintptr_t>(p);
  auto within = [&](const std::vector<unsigned char>& arena) {
    const auto lo = reinterpret_cast<uintptr_t>(arena.data());
    return !arena.empty() && at >= lo && at + bytes <= lo + arena.size();
  };
  if (!within(b.shared) && !within(b.dynamic)) throw std::runtime_error(std::string(what) + ": an address outside the block's shared memory");
  if (at % 16 != 0) throw std::runtime_error(std::string(what) + ": a shared address " + std::to_string(at % 16) + " bytes past 16-byte alignment");
}

unsigned char* WarpOp::begin() {
  ThreadCtx& t = current();
  block_ = t.block;
  warp_ = t.warp;
  parity_ = t.warp_ops++ & 1u;
  return block_->slots.data() + ((static_cast<size_t>(warp_) * 2 + parity_) * kWarpSize + t.lane) * kSlotBytes;
}

const unsigned char* WarpOp::slot(unsigned lane) const {
  return block_->slots.data() + ((static_cast<size_t>(warp_) * 2 + parity_) * kWarpSize + lane) * kSlotBytes;
}

void cp_async_copy(void* dst, const void* src, bool pred) {
  ThreadCtx& t = current();
  // cp.async of 16 bytes faults on a GPU unless both addresses are 16-byte aligned (the source too
  // when it is not read: it is still an operand).
  check_shared16(dst, 16, "cp.async");
  if (reinterpret_cast<uintptr_t>(src) % 16 != 0) {
    throw std::runtime_error("cp.async: a global address " + std::to_string(reinterpret_cast<uintptr_t>(src) % 16) + " bytes past 16-byte alignment");
  }
  AsyncCopy c;
  c.dst = dst;
  c.group = t.async_groups;
  if (pred) {
    std::memcpy(c.bytes, src, sizeof c.bytes);
  } else {
    std::memset(c.bytes, 0, sizeof c.bytes);
  }
  t.async_copies.push_back(c);
  std::memset(dst, kPoison, sizeof c.bytes);
}

void cp_async_commit() { ++current().async_groups; }

void cp_async_wait(unsigned pending) {
  ThreadCtx& t = current();
  // Groups [0, async_groups - pending) must have landed; copies not yet committed stay in flight.
  const unsigned landed = t.async_groups > pending ? t.async_groups - pending : 0;
  size_t kept = 0;
  for (AsyncCopy& c : t.async_copies) {
    if (c.group < landed) {
      std::memcpy(c.dst, c.bytes, sizeof c.bytes);
    } else {
      t.async_copies[kept++] = c;
    }
  }
  t.async_copies.resize(kept);
}

Schedule parse_schedule(const std::string& text) {
  Schedule s;
  if (text == "forward") {
    s.order = Order::kForward;
  } else if (text == "reverse") {
    s.order = Order::kReverse;
  } else if (text == "shuffle") {
    s.order = Order::kShuffle;
  } else if (text.rfind("shuffle:", 0) == 0 && text.size() > 8 &&
             text.find_first_not_of("0123456789", 8) == std::string::npos && text.size() <= 8 + 19) {
    s.order = Order::kShuffle;
    s.seed = std::stoull(text.substr(8));
  } else {
    throw std::invalid_argument("TANDEM_SIMT_ORDER=" + text + ": expected forward, reverse, shuffle or shuffle:SEED");
  }
  return s;
}

Schedule schedule() {
  ScheduleState& st = schedule_state();
  return Schedule{static_cast<Order>(st.order.load()), st.seed.load()};
}

void set_schedule(Schedule s) {
  ScheduleState& st = schedule_state();
  st.order.store(static_cast<uint8_t>(s.order));
  st.seed.store(s.seed);
  st.epoch.fetch_add(1);
}

std::string describe(Schedule s) {
  switch (s.order) {
    case Order::kForward: return "blocks and threads in order";
    case Order::kReverse: return "blocks and threads in reverse order";
    case Order::kShuffle: return "blocks and threads shuffled, seed " + std::to_string(s.seed);
  }
  return "?";
}

void launch_on(const void* stream, Dim3 grid, Dim3 block, size_t dynamic_shared_bytes, std::function<void()> body, bool dependent) {
  auto run = [grid, block, dynamic_shared_bytes, dependent, body]() mutable {
    run_launch(grid, block, dynamic_shared_bytes, body, dependent);
  };
  if (enqueue_on(stream, run)) return;
  launch(grid, block, dynamic_shared_bytes, std::move(body), dependent);
}

void set_capture(Capture* capture) { t_capture = capture; }
Capture* active_capture() { return t_capture; }
uint64_t launch_count() { return t_launches; }

}  // namespace tandem::simt
