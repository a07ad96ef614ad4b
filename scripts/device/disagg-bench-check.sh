#!/usr/bin/env bash
# run-all: order=60 budget=120
# Disaggregation on the GPU, measured (bench/disagg-gpu-bench.ts), for bench/results/gpu-<gpu>/:
#   bench   a Qwen2-0.5B-shaped random model: TTFT of a 4k-token prompt aggregated vs 1 prefill +
#           1 decode, without and with --kv-layer-streaming; ITL p50/p99 aggregated vs 1P+1D
#           at a prefill-heavy load (ISL 4096, OSL 128, 6 req/s, 40 requests)
# Writes $OUT/disagg-gpu-bench.json; status to $OUT/summary.json, the log to
# $OUT/disagg-bench-check.log. About 90 s (three fleets, two loads each at most). On simt: the
# tiny model, 200-token prompts, 4 requests (a dry run of the flow).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
check_begin disagg-bench-check bench

bench() {
  if [ "$device" = cuda ]; then
    random_model qwen2-0.5b "$models/qwen2-0.5b" || return 1
    node dist/bench/disagg-gpu-bench.js --device cuda --model "$models/qwen2-0.5b" --out "$OUT/disagg-gpu-bench.json"
  else
    node dist/bench/disagg-gpu-bench.js --device "$device" --model tiny --prompt-tokens 200 --osl 8 --rate 2 --requests 4 --repeats 1 \
      --kv-cache-memory 67108864 --out "$OUT/disagg-gpu-bench.json"
  fi
}
export -f bench

step bench 115 bench
check_end
