// Deferred streams of the SIMT harness: a stream whose work waits in a queue until the host
// synchronizes it (SimtDevice's side stream). A GPU may run a stream's work any time before its
// synchronize; running it at the synchronize, the latest, shows a host that reads the stream's
// results early, refills its inputs too soon, or waits for it with another stream's synchronize.
// Kernels reach a queue through launch_on (harness.h); copies through enqueue_on.
#pragma once

#include <functional>

namespace tandem::simt {

/** Makes `stream` defer (its work runs in order at run_stream), or not; `on` false drops what still waits. */
void defer_stream(const void* stream, bool on);
/** Queues `op` on `stream` when it defers (true); false when it does not. */
bool enqueue_on(const void* stream, std::function<void()> op);
/** Runs what waits on `stream`, in order (its kernels' errors are thrown from here). */
void run_stream(const void* stream);

}  // namespace tandem::simt
