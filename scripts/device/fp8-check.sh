#!/usr/bin/env bash
# run-all: order=80 budget=360 default=no
# The GPU check of FP8 (issue 35), run on a GPU machine from the repository root with the bundle
# of scripts/device/pack.sh at .device-bundle/ (or unpacked at $TANDEM_CHECK_UNPACKED, as
# scripts/device/run-all.sh passes it). Whole, it takes up to 6 minutes: run-all's plans run its
# parts (engine and goldens among the checks, bench among the benchmarks); TANDEM_RUN_STEPS=fp8
# runs it whole. Each step's status and time go to $OUT/summary.json,
# everything printed to $OUT/fp8-check.log; results to $OUT/fp8-goldens.json and
# $OUT/native-gpu-fp8-bench.json (for bench/results/gpu-<name>/). Steps, most important first:
#   kernels   the FP8 kernels against the CPU backend's (GEMV W8A16/W8A8 per-row and block scales,
#             activation quantization, weight dequantization, attention over an e4m3 KV pool, the
#             KV write into it, KV copies between f32/bf16/e4m3 pools): tandem_gpu_kernel_test --fp8
#   engine    the GPU backend on FP8 checkpoints of every accepted format against the CPU backend,
#             W8A8 and W8A16 (prefill through cuBLASLt FP8 where the load-time probe passed, else the
#             dequantizing fallback; decode through the GEMV), and the FP8 KV cache: tandem_native_test --fp8
#   goldens   make-tiny's three FP8 formats on the GPU against transformers where it loads the format,
#             else the dequantized model (fp8_goldens.py); greedy tokens equal or diverging inside the
#             FP8 margin, first-logit relative L2 reported (fp8-goldens.mjs); once more with an FP8 KV cache
#   bench     copy bandwidth, FP8 GEMMs beside bf16 (tandem_fp8_bench gemm), then the engine on the
#             Llama-3.1-8B shape: bf16 against FP8 weights (quantized at load; an fp8-block checkpoint)
#             at decode batch 1/64/256 and a 2k prefill, bf16 against FP8 KV at batch 64 and 8k
#             context, and a 70B-shaped FP8 model (a sparse checkpoint) loading on this GPU or why not
# TANDEM_CHECK_STEPS=kernels,engine,... runs a subset, TANDEM_CHECK_QUICK=1 shortens the bench (no
# 70B, fewer steps), TANDEM_CHECK_DEVICE=simt runs the same flow on the host (a dry run of the
# script itself, in place when there is no bundle: tiny models, numbers that mean nothing; a step
# that needs the GPU machine's Python packages is a skip, exit 77, saying why).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
check_begin fp8-check kernels,engine,goldens,bench
node bin/runtime.js backends
transformers=$(python3 -c 'import transformers, torch; print(f"transformers {transformers.__version__}, torch {torch.__version__}")' 2>/dev/null || echo "no transformers")
check_record python info 0 "$transformers"

goldens() {
  local rc=0 results=()
  if ! python3 -c 'import numpy, torch' 2>/dev/null; then
    [ "$device" = simt ] || { echo "python3 has no torch/numpy: the references need them"; return 1; }
    echo "skipped: python3 has no torch/numpy here" | tee "$work/.skip-goldens"
    return 77
  fi
  for format in fp8-block fp8-channel fp8-tensor; do
    local dir="$models/qwen3-$format"
    node bin/runtime.js model make-tiny --arch qwen3 --out "$dir" --dtype bf16 --seed 21 --quantize "$format" >/dev/null || return 1
    python3 scripts/device/fp8_goldens.py --model "$dir" --out "$work/ref-$format.json" --steps 16 || { rc=1; continue; }
    for kv in auto fp8; do
      local line
      line=$(node scripts/device/fp8-goldens.mjs "$dir" "$work/ref-$format.json" "$device" "$kv") || rc=1
      echo "$line"
      [ -n "$line" ] && results+=("$line")
    done
  done
  (IFS=,; echo "[${results[*]}]") >"$OUT/fp8-goldens.json"
  return $rc
}
bench() {
  local big="" bf16="$models/llama-3.1-8b"
  native/build/tandem_gpu_bench bandwidth --device "$device" --json "$work/fp8-bandwidth.json" || return 1
  native/build/tandem_fp8_bench gemm --device "$device" ${TANDEM_CHECK_QUICK:+--quick} --json "$work/fp8-gemm.json" || return 1
  if [ "$device" = simt ]; then
    bf16="$models/fp8-bench-bf16"
    node bin/runtime.js model make-tiny --arch llama --out "$bf16" --dtype bf16 --seed 3 >/dev/null || return 1
    node bin/runtime.js model make-tiny --arch llama --out "$models/bench-block" --dtype bf16 --seed 3 --quantize fp8-block >/dev/null || return 1
  else
    [ -f "$bf16/config.json" ] || native/build/tandem_gpu_bench make-model --shape llama-3.1-8b --out "$bf16" || return 1
    native/build/tandem_fp8_bench make-sparse --shape llama-3.1-8b --format fp8-block --out "$models/bench-block" || return 1
    if [ -z "${TANDEM_CHECK_QUICK:-}" ]; then
      native/build/tandem_fp8_bench make-sparse --shape llama-3.1-70b --format fp8-channel --out "$models/big-70b" && big="--big $models/big-70b"
    fi
  fi
  node dist/bench/native-gpu-fp8-bench.js --device "$device" --model "$bf16" --block-model "$models/bench-block" $big \
    ${TANDEM_CHECK_QUICK:+--quick} --bandwidth-json "$work/fp8-bandwidth.json" --out "$work/fp8-engine.json" || return 1
  # One file back: the engine bench with the GEMM table and the bandwidth folded in.
  python3 - "$work/fp8-engine.json" "$work/fp8-gemm.json" "$work/fp8-bandwidth.json" "$OUT/native-gpu-fp8-bench.json" <<'EOF'
import json, sys
engine, gemm, bw, out = sys.argv[1:5]
report = json.load(open(engine))
report["gemm"] = json.load(open(gemm))
report["bandwidth"] = json.load(open(bw))
json.dump(report, open(out, "w"), indent=2)
EOF
  rm -rf "$models/big-70b" "$models/bench-block"
}

export device models OUT work
export -f goldens bench

step kernels 30 native/build/tandem_gpu_kernel_test --fp8
step engine 30 native/build/tandem_native_test --fp8
step goldens 60 goldens
step bench 240 bench

check_end
