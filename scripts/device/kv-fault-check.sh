#!/usr/bin/env bash
# run-all: order=50 budget=60
# kill -9 of the prefill worker mid-copy between device pools (issue 33), with kv-fault.mjs:
#   kill-prefill  1 prefill + 1 decode worker on the GPU, --kv-layer-streaming, a 16k-token
#                 prompt on a Llama-3.2-1B-shaped random model (a prefill long enough that the
#                 kill lands while the decode worker copies layer ranges over the IPC mapping):
#                 the request completes, the decode worker leaks no blocks (active, staging,
#                 in flight) and still serves the same greedy tokens
# Report to $OUT/kv-fault.json, status to $OUT/summary.json, the log to $OUT/kv-fault-check.log.
# About 60 s (two model loads). TANDEM_CHECK_DEVICE=simt: the tiny model, a 200-token prompt.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
check_begin kv-fault-check kill-prefill

kill_prefill() {
  local model=tiny tokens=200 kvmem=67108864
  if [ "$device" = cuda ]; then
    model="$models/llama-3.2-1b" tokens=16384 kvmem=8589934592
    random_model llama-3.2-1b "$model" || return 1
  fi
  node scripts/device/kv-fault.mjs --device "$device" --model "$model" --prompt-tokens "$tokens" --kv-cache-memory "$kvmem" --out "$OUT/kv-fault.json"
}
export -f kill_prefill

step kill-prefill 75 kill_prefill
check_end
