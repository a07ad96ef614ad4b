// A fixed pool of host threads for data-parallel loops. parallel_for splits [0, n) into
// chunks that threads claim from an atomic counter, so uneven work (attention rows of
// different context lengths) balances itself. The calling thread works too.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem {

class ThreadPool {
 public:
  /** fn(begin, end, worker_index); worker_index is in [0, size()). */
  using RangeFn = std::function<void(int64_t, int64_t, int)>;

  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  /** Runs fn over [0, n) in chunks of at least `grain`; returns when every chunk is done. */
  void parallel_for(int64_t n, int64_t grain, const RangeFn& fn);

 private:
  void worker_loop(int index);
  void run_chunks(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  bool stopping_ = false;
  int active_ = 0;

  // The current job (valid while active_ > 0 or the caller runs it).
  const RangeFn* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  std::atomic<int64_t> next_{0};
};

}  // namespace tandem
