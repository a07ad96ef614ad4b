#!/usr/bin/env bash
# run-all: order=60 budget=240
# Speculative decoding on a GPU (issue 37), in one call:
#   engine   the native test binary's speculative checks on the device (--spec): greedy and seeded
#            sampling equal to plain decoding with drafts (penalties, bias, per-position masks,
#            logprobs, a mixed batch, rejected drafts), the chi-square of a token sampled after a
#            draft, the n-gram and suffix drafters in the engine; verify rows run as decode rows
#            (split-KV attention, CUDA graphs)
#   serve    runtime frontend + a plain and a speculating native worker on the device (a 0.5B-shaped
#            random model): the same token ids for every kind of request, accepted drafts on /metrics
#   bench    bench/speculative-bench.ts on an 8B-shaped random model: verify step time at k = 1, 2,
#            4, 8 against a plain step at batch 1, 8 and 64 (aim <= 1.15x at k = 4, batch 1), and at
#            batch 1 over a 16k-token context (2 GiB of KV: the decode spans read it once a step); tok/s at
#            batch 1 on a copy-heavy workload (aim >= 2x where acceptance at k = 4 is >= 70 %); a
#            workload whose drafts are almost never accepted at batch 1, 8 and 64 (aim >= 0.97x)
# Reports: $OUT/spec-serve.json, $OUT/speculative-gpu.json; status in $OUT/summary.json, the log in
# $OUT/spec-check.log. About 3-4 minutes on an H200 (the 8B model loads four times).
# TANDEM_CHECK_DEVICE=simt: the same flow on the host (a dry run): the tiny model everywhere, short runs.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
check_begin spec-check engine,serve,bench

engine_checks() {
  native/build/tandem_native_test --spec
}

serve_check() {
  local model
  if [ "$device" = cuda ]; then
    model="$models/qwen2-0.5b"
    random_model qwen2-0.5b "$model" || return 1
  else
    model="$work/tiny-serve"
    [ -f "$model/config.json" ] || node bin/runtime.js model make-tiny --arch llama --out "$model" >/dev/null || return 1
  fi
  node scripts/device/spec-serve.mjs --device "$device" --model "$model" --method suffix --kv-cache-memory 1073741824 --out "$OUT/spec-serve.json"
}

bench_gpu() {
  if [ "$device" = cuda ]; then
    local model="$models/llama-3.1-8b"
    random_model llama-3.1-8b "$model" || return 1
    node dist/bench/speculative-bench.js --device cuda --model "$model" --shape llama-8b --reps 3 --copy-tokens 256 --reject-tokens 64 --verify-long-context 16384 --out "$OUT/speculative-gpu.json"
  else
    node dist/bench/speculative-bench.js --device simt --shape tiny --reps 1 --copy-tokens 24 --reject-tokens 8 --verify-batches 1,8 --reject-batches 1,8 --out "$OUT/speculative-gpu.json"
  fi
}
export -f engine_checks serve_check bench_gpu

step engine 60 engine_checks
step serve 60 serve_check
step bench 150 bench_gpu
check_end
