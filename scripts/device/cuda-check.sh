#!/usr/bin/env bash
# run-all: order=10 budget=180
# The one-command GPU check of the CUDA backend, run on a GPU machine from the repository root
# with the bundle of scripts/device/pack.sh at .device-bundle/ (no Node.js needed there).
# Each step's status and time go to $OUT/summary.json, everything printed to $OUT/cuda-check.log;
# benchmark JSON to $OUT/native-gpu-bench.json (merging bandwidth.json, gemm.json and torch.json),
# serving results to $OUT/serve.json: 7 files, under the device tool's 8. Steps, most important first:
#   kernels     every kernel against the CPU backend's (tandem_gpu_kernel_test, cuda)
#   engine      the C++ engine checks on cuda (chunking, prefix hits, mixed batches, sampling, errors)
#   goldens     the four golden fixtures on cuda (bf16 tolerance, see native/tests/engine_test.cc)
#   memcheck    compute-sanitizer memcheck on the engine checks' mixed steps
#   serve       runtime up --engine native --device cuda: a completion, a json_schema answer, the
#               schema corpus (every answer parses and validates) and regex/choice outputs;
#               a LoRA load refused with 400 (the CUDA worker's card says supportsLora: false)
#   bench       bandwidth, GEMMs (cuBLASLt, ours), torch.matmul and transformers baselines, the
#               engine benchmark (decode, prefill, graphs) on the three model shapes
# Budget: under 6 minutes (run it with the device tool's timeout_s=600); TANDEM_CHECK_STEPS=
# kernels,engine,... runs a subset, TANDEM_CHECK_QUICK=1 benchmarks the 0.5B shape only, and
# TANDEM_CHECK_DEVICE=simt runs the same flow on the host (a dry run of the script itself, ~90 s).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
check_begin cuda-check kernels,engine,goldens,memcheck,serve,bench
node bin/runtime.js backends

make_goldens_models() {
  for spec in "llama f32 11" "qwen2 f32 12" "qwen3 f32 13" "llama bf16 14"; do
    set -- $spec
    node bin/runtime.js model make-tiny --arch "$1" --out "$models/$1-$2" --dtype "$2" --seed "$3" >/dev/null || return 1
  done
}
goldens() {
  local rc=0
  for m in llama-f32 qwen2-f32 qwen3-f32 llama-bf16; do
    echo "--- golden $m"
    # --golden-only: the fixture alone (the engine step already ran the suite on this device).
    native/build/tandem_native_test --golden-only "$models/$m" "test/fixtures/goldens/$m.json" | grep -E "golden case|checks" || rc=1
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  done
  return $rc
}
memcheck() {
  local sanitizer
  if [ "$device" != cuda ]; then
    skip_because memcheck "compute-sanitizer checks CUDA launches only (a dry run)"
    return 77
  fi
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  [ -n "$sanitizer" ] || { echo "compute-sanitizer not found"; return 1; }
  "$sanitizer" --tool memcheck --error-exitcode 3 --print-limit 20 native/build/tandem_native_test --quick
}
serve() {
  local port=18000 log="$work/up.log" rc=0
  up_start "$log" $port --model tiny --workers 1
  cat "$log"
  local corpus=scripts/device/schema-corpus.json
  if [ ! -f "$corpus" ]; then  # in place (a dry run): made from the checkout as pack.sh makes it
    corpus="$work/schema-corpus.json"
    node --import tsx -e "import('$repo/test/grammar/schema-corpus.ts').then(({ SCHEMA_CORPUS }) => require('node:fs').writeFileSync('$corpus', JSON.stringify(SCHEMA_CORPUS)))" || rc=1
  fi
  TANDEM_SCHEMA_CORPUS="$corpus" node scripts/device/serve-check.mjs "http://127.0.0.1:$port" "$OUT/serve.json" || rc=1
  up_stop
  return $rc
}
bench() {
  local tool=native/build/tandem_gpu_bench
  $tool bandwidth --device "$device" --json "$OUT/bandwidth.json" || return 1
  $tool gemm --device "$device" ${TANDEM_CHECK_QUICK:+--quick} --json "$OUT/gemm.json" || return 1
  # The sampler at batch 1/8/64 over 152k tokens: one-block kernel vs fast path (simt: 5003 tokens, batch 1).
  local vocab=151936
  [ "$device" = simt ] && vocab=5003
  $tool sample --device "$device" --vocab $vocab --json "$OUT/sample.json" || return 1
  if [ "$device" = cuda ] && [ "${TANDEM_CHECK_TORCH:-1}" = 1 ]; then
    [ -f "$models/qwen2-0.5b/config.json" ] || $tool make-model --shape qwen2-0.5b --out "$models/qwen2-0.5b" || return 1
    PYTHONUNBUFFERED=1 timeout 150 python3 scripts/device/torch_baselines.py --model "$models/qwen2-0.5b" --gemm-json "$OUT/gemm.json" --out "$OUT/torch.json" \
      || echo "torch baselines failed (ratios to torch will be missing)"
  fi
  node dist/bench/native-gpu-bench.js --device "$device" --models-dir "$models" ${TANDEM_CHECK_QUICK:+--quick} \
    --bandwidth-json "$OUT/bandwidth.json" --gemm-json "$OUT/gemm.json" --torch-json "$OUT/torch.json" --sample-json "$OUT/sample.json" --out "$OUT/native-gpu-bench.json"
}

export -f goldens memcheck serve bench

# Worst cases add up to 550 s, inside the device tool's 600 s per command; a normal run is ~5 min.
step kernels 45 native/build/tandem_gpu_kernel_test
step engine 30 native/build/tandem_native_test
if want goldens; then make_goldens_models; fi
step goldens 45 goldens
step memcheck 90 memcheck
step serve 60 serve
step bench 280 bench

check_end
