#include "streams.h"

#include <deque>
#include <map>
#include <mutex>

namespace tandem::simt {

namespace {

struct DeferredStreams {
  std::mutex mu;
  std::map<const void*, std::deque<std::function<void()>>> queues;
};

DeferredStreams& deferred() {
  static DeferredStreams d;
  return d;
}

}  // namespace

void defer_stream(const void* stream, bool on) {
  DeferredStreams& d = deferred();
  std::lock_guard<std::mutex> lock(d.mu);
  if (on) {
    d.queues[stream];
  } else {
    d.queues.erase(stream);
  }
}

bool enqueue_on(const void* stream, std::function<void()> op) {
  if (stream == nullptr) return false;
  DeferredStreams& d = deferred();
  std::lock_guard<std::mutex> lock(d.mu);
  auto it = d.queues.find(stream);
  if (it == d.queues.end()) return false;
  it->second.push_back(std::move(op));
  return true;
}

void run_stream(const void* stream) {
  DeferredStreams& d = deferred();
  for (;;) {
    std::function<void()> op;
    {
      std::lock_guard<std::mutex> lock(d.mu);
      auto it = d.queues.find(stream);
      if (it == d.queues.end() || it->second.empty()) return;
      op = std::move(it->second.front());
      it->second.pop_front();
    }
    try {
      op();
    } catch (...) {
      // A failed kernel ends the stream's work, as a CUDA error does: nothing after it runs.
      std::lock_guard<std::mutex> lock(d.mu);
      auto it = d.queues.find(stream);
      if (it != d.queues.end()) it->second.clear();
      throw;
    }
  }
}

}  // namespace tandem::simt
