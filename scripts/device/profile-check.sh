#!/usr/bin/env bash
# run-all: order=55 budget=110
# The decode step's kernels before and after the fused decode path, in one run on one bundle:
#   before  profile-decode.sh with TANDEM_GPU_DECODE=unfused (the per-op kernels: RMSNorm, GEMM,
#           split-K reduce, qkv_rope, SwiGLU, ...; cuBLASLt where it loads)
#   after   profile-decode.sh with the fused decode kernels (the default)
# Each writes $OUT/profile-<label>.log (time per kernel, summed) and
# $OUT/kernels-<shape>-<label>.csv (every kernel); commit both under bench/results/gpu-<gpu>/
# (scripts/device/collect.sh). About 45 s per label for the 0.5B shape (ncu replays each graph
# node); TANDEM_PROFILE_SHAPES adds shapes. Needs ncu: a simt dry run skips.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
check_begin profile-check before,after

profile() {  # label decode-path
  if [ "$device" != cuda ] || ! { command -v ncu >/dev/null || ls /usr/local/cuda*/bin/ncu >/dev/null 2>&1; }; then
    skip_because "$1" "no ncu on this machine or not on cuda (a dry run)"
    return 77
  fi
  (cd "$repo" && TANDEM_CHECK_UNPACKED="$bundle" TANDEM_CHECK_MODELS="$models" TANDEM_CHECK_WORK="$work/$1" \
    TANDEM_PROFILE_LABEL="$1" TANDEM_GPU_DECODE="$2" bash scripts/device/profile-decode.sh)
}
bundle=$(pwd)
export bundle
export -f profile

step before 55 profile before unfused
step after 55 profile after fused
check_end
