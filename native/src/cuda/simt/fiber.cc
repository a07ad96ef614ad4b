#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace tandem::simt {

#if defined(__x86_64__)

extern "C" void tandem_simt_switch(void** save_sp, void* load_sp);
extern "C" void tandem_simt_trampoline();

// System V x86-64: save the callee-saved registers, MXCSR and the x87 control word on the
// current stack, store the stack pointer, load the other one and pop the same frame.
asm(R"(
  .text
  .p2align 4
  .globl tandem_simt_switch
  .type tandem_simt_switch,@function
tandem_simt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size tandem_simt_switch, .-tandem_simt_switch

  .p2align 4
  .globl tandem_simt_trampoline
  .type tandem_simt_trampoline,@function
tandem_simt_trampoline:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size tandem_simt_trampoline, .-tandem_simt_trampoline
)");

void switch_context(Context& from, Context& to) { tandem_simt_switch(&from.sp, to.sp); }

#else

void switch_context(Context& from, Context& to) {
  // The scheduler's context is created on its first switch (fibers get theirs in prepare).
  if (from.uctx == nullptr) from.uctx = new ucontext_t();
  swapcontext(static_cast<ucontext_t*>(from.uctx), static_cast<ucontext_t*>(to.uctx));
}

#endif

FiberStack::FiberStack(size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  usable_ = (bytes + page - 1) / page * page;
  mapped_ = usable_ + page;
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  // The lowest page is the guard: stacks grow down into it.
  ::mprotect(p, page, PROT_NONE);
  base_ = static_cast<char*>(p) + page;
#if !defined(__x86_64__)
  uctx_ = new ucontext_t();
#endif
}

FiberStack::~FiberStack() {
  if (base_ != nullptr) ::munmap(static_cast<char*>(base_) - (mapped_ - usable_), mapped_);
#if !defined(__x86_64__)
  delete static_cast<ucontext_t*>(uctx_);
#endif
}

void FiberStack::prepare(Context& ctx, Entry entry, void* arg) {
#if defined(__x86_64__)
  // Frame popped by tandem_simt_switch: [mxcsr|fpcw] r15 r14 r13 r12 rbx rbp ret. After the
  // ret the stack pointer is 16-byte aligned, as the trampoline's call requires.
  uintptr_t top = reinterpret_cast<uintptr_t>(base_) + usable_;
  top &= ~static_cast<uintptr_t>(15);
  auto* frame = reinterpret_cast<uint64_t*>(top - 64);
  uint32_t mxcsr = 0;
  uint16_t fpcw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpcw));
  std::memset(frame, 0, 64);
  std::memcpy(reinterpret_cast<char*>(frame), &mxcsr, 4);
  std::memcpy(reinterpret_cast<char*>(frame) + 4, &fpcw, 2);
  frame[3] = reinterpret_cast<uint64_t>(entry);  // r13
  frame[4] = reinterpret_cast<uint64_t>(arg);    // r12
  frame[7] = reinterpret_cast<uint64_t>(&tandem_simt_trampoline);
  ctx.sp = frame;
#else
  auto* uc = static_cast<ucontext_t*>(uctx_);
  getcontext(uc);
  uc->uc_stack.ss_sp = base_;
  uc->uc_stack.ss_size = usable_;
  uc->uc_link = nullptr;
  // makecontext passes int arguments: split the pointer in two.
  const auto bits = reinterpret_cast<uintptr_t>(arg);
  struct Start {
    static void run(int lo, int hi, int elo, int ehi) {
      const uintptr_t a = (static_cast<uintptr_t>(static_cast<uint32_t>(hi)) << 32) | static_cast<uint32_t>(lo);
      const uintptr_t e = (static_cast<uintptr_t>(static_cast<uint32_t>(ehi)) << 32) | static_cast<uint32_t>(elo);
      reinterpret_cast<Entry>(e)(reinterpret_cast<void*>(a));
    }
  };
  const auto eb = reinterpret_cast<uintptr_t>(entry);
  makecontext(uc, reinterpret_cast<void (*)()>(&Start::run), 4, static_cast<int>(bits & 0xffffffffu),
              static_cast<int>(bits >> 32), static_cast<int>(eb & 0xffffffffu), static_cast<int>(eb >> 32));
  ctx.uctx = uc;
#endif
}

}  // namespace tandem::simt
