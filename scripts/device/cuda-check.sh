#!/usr/bin/env bash
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
repo=$(pwd)
OUT=${OUT:-$repo/.device-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/cuda-check.log") 2>&1
device=${TANDEM_CHECK_DEVICE:-cuda}
steps=${TANDEM_CHECK_STEPS:-kernels,engine,goldens,memcheck,serve,bench}
work=${TANDEM_CHECK_WORK:-/tmp/tandem-check}
started=$(date +%s)
summary="$OUT/summary.json"
echo "{" >"$summary"
first=1
record() {  # name status seconds [detail]
  local sep=","
  [ $first = 1 ] && sep="" && first=0
  printf '%s\n  "%s": {"status": "%s", "seconds": %s, "detail": %s}' "$sep" "$1" "$2" "$3" "$(printf '%s' "${4:-}" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')" >>"$summary"
}
want() { case ",$steps," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
step() {  # name timeout command...
  local name=$1 limit=$2
  shift 2
  want "$name" || return 0
  echo "=== $name ($(($(date +%s) - started)) s in)"
  local t0=$(date +%s) rc
  if declare -F "$1" >/dev/null; then
    timeout "$limit" bash -c "$*"  # a function of this script (exported below)
  else
    timeout "$limit" "$@"
  fi
  rc=$?
  local dt=$(($(date +%s) - t0))
  if [ $rc = 0 ]; then record "$name" pass "$dt"; else record "$name" fail "$dt" "exit $rc"; fi
  echo "=== $name: exit $rc in ${dt} s"
}

echo "=== unpack"
rm -rf "$work"
mkdir -p "$work"
tar -C "$work" -xJf "$repo/.device-bundle/bundle.tar.xz" || { echo "no bundle: run scripts/device/pack.sh first" >&2; exit 1; }
cd "$work"
export PATH="$work/node/bin:$PATH" TANDEM_TEST_DEVICE=$device TANDEM_CACHE_DIR="$work/cache"
export TANDEM_CUBLASLT=${TANDEM_CUBLASLT:-$(python3 -c 'import glob,site; c=[p for d in site.getsitepackages() for p in glob.glob(d+"/nvidia/*/lib/libcublasLt.so.*")]; print(c[0] if c else "")' 2>/dev/null)}
[ -z "$TANDEM_CUBLASLT" ] && unset TANDEM_CUBLASLT
# At most 8 files come back from $OUT: the GPU and the backends go to the log and the summary.
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi")
echo "gpu: $gpu"
node bin/runtime.js backends
echo "commit $(cat COMMIT 2>/dev/null)"
record gpu info 0 "$gpu; commit $(cat COMMIT 2>/dev/null)"

models="$work/models"
mkdir -p "$models"
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
    native/build/tandem_native_test --golden "$models/$m" "test/fixtures/goldens/$m.json" | grep -E "golden case|checks" || rc=1
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  done
  return $rc
}
memcheck() {
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  [ -n "$sanitizer" ] || { echo "compute-sanitizer not found"; return 1; }
  "$sanitizer" --tool memcheck --error-exitcode 3 --print-limit 20 native/build/tandem_native_test --quick
}
serve() {
  local port=18000 log="$work/up.log" rc=0
  node bin/runtime.js up --engine native --device "$device" --model tiny --workers 1 --http-port $port --log-level warn >"$log" 2>&1 &
  local up=$!
  for _ in $(seq 1 120); do grep -q "Press Ctrl-C" "$log" && break; kill -0 $up 2>/dev/null || break; sleep 0.5; done
  cat "$log"
  node scripts/device/serve-check.mjs "http://127.0.0.1:$port" "$OUT/serve.json" || rc=1
  kill -INT $up 2>/dev/null
  wait $up
  return $rc
}
bench() {
  local tool=native/build/tandem_gpu_bench
  $tool bandwidth --device "$device" --json "$OUT/bandwidth.json" || return 1
  $tool gemm --device "$device" ${TANDEM_CHECK_QUICK:+--quick} --json "$OUT/gemm.json" || return 1
  if [ "$device" = cuda ]; then
    $tool make-model --shape qwen2-0.5b --out "$models/qwen2-0.5b" || return 1
    PYTHONUNBUFFERED=1 timeout 150 python3 scripts/device/torch_baselines.py --model "$models/qwen2-0.5b" --gemm-json "$OUT/gemm.json" --out "$OUT/torch.json" \
      || echo "torch baselines failed (ratios to torch will be missing)"
  fi
  node dist/bench/native-gpu-bench.js --device "$device" --models-dir "$models" ${TANDEM_CHECK_QUICK:+--quick} \
    --bandwidth-json "$OUT/bandwidth.json" --gemm-json "$OUT/gemm.json" --torch-json "$OUT/torch.json" --out "$OUT/native-gpu-bench.json"
}

export device models OUT work
export -f goldens memcheck serve bench

# Worst cases add up to 550 s, inside the device tool's 600 s per command; a normal run is ~5 min.
step kernels 45 native/build/tandem_gpu_kernel_test
step engine 30 native/build/tandem_native_test
if want goldens; then make_goldens_models; fi
step goldens 45 goldens
step memcheck 90 memcheck
step serve 60 serve
step bench 280 bench

echo "}" >>"$summary"
echo "=== done in $(($(date +%s) - started)) s"
cat "$summary"
grep -q '"fail"' "$summary" && exit 1
exit 0
