#!/usr/bin/env bash
# run-all: order=40 budget=45
# compute-sanitizer on the code a decode step and a KV hand-off run, with both tools:
#   memcheck-kernels  memcheck: the fused decode kernels, the sampler's fast path and the KV block
#                     copy (tandem_gpu_kernel_test, suites fused,sampling_fast,kv_copy)
#   racecheck-kernels racecheck (shared-memory hazards) on the same suites
#   memcheck-step     memcheck: the engine's quick pass (one model: mixed steps, decode steps
#                     replayed from graphs, sampling; tandem_native_test --quick)
#   racecheck-step    racecheck on the same
# Status to $OUT/summary.json, the log to $OUT/sanitizer-check.log; about 40 s on an H200. A
# simt dry run has no compute-sanitizer: its steps are skipped.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
check_begin sanitizer-check memcheck-kernels,racecheck-kernels,memcheck-step,racecheck-step

sanitize() {  # name tool program args...
  local name=$1 tool=$2 sanitizer
  shift 2
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -z "$sanitizer" ] || [ "$device" != cuda ]; then
    skip_because "$name" "no compute-sanitizer on this machine or not on cuda (a dry run)"
    return 77
  fi
  "$sanitizer" --tool "$tool" --error-exitcode 3 --print-limit 20 "$@"
}
kernels() { TANDEM_TEST_SUITES=fused,sampling_fast,kv_copy TANDEM_TEST_QUICK=1 sanitize "$1" "$2" native/build/tandem_gpu_kernel_test; }
engine_step() { sanitize "$1" "$2" native/build/tandem_native_test --quick; }
export -f sanitize kernels engine_step

step memcheck-kernels 20 kernels memcheck-kernels memcheck
step racecheck-kernels 20 kernels racecheck-kernels racecheck
step memcheck-step 15 engine_step memcheck-step memcheck
step racecheck-step 20 engine_step racecheck-step racecheck
check_end
