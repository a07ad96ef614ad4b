// Fibers for the SIMT harness: every emulated CUDA thread of a block runs on its own small
// stack, and control moves between them only at barriers (__syncthreads, warp collectives).
// On x86-64 the switch is a few instructions of assembly (callee-saved registers, MXCSR and
// the x87 control word); elsewhere it falls back to ucontext, which is correct but slower.
#pragma once

#include <cstddef>

namespace tandem::simt {

/** A saved execution context: the stack pointer of a suspended fiber (or of the scheduler). */
struct Context {
  void* sp = nullptr;
#if !defined(__x86_64__)
  void* uctx = nullptr;  // ucontext_t, allocated by FiberStack
#endif
};

/** Suspends the caller into `from` and resumes `to`. */
void switch_context(Context& from, Context& to);

/**
 * One fiber's stack: mmap'd once with a guard page below it (an overflow faults instead of
 * corrupting a neighbour), reused across launches.
 */
class FiberStack {
 public:
  using Entry = void (*)(void* arg);
  explicit FiberStack(size_t bytes);
  ~FiberStack();
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;

  /** Prepares `ctx` so that switching to it calls entry(arg) on this stack; entry must never return. */
  void prepare(Context& ctx, Entry entry, void* arg);

 private:
  void* base_ = nullptr;
  size_t mapped_ = 0;
  size_t usable_ = 0;
#if !defined(__x86_64__)
  void* uctx_ = nullptr;
#endif
};

}  // namespace tandem::simt
