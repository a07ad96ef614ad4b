#!/usr/bin/env bash
# Where a decode step's time goes on the GPU: Nsight Compute's duration of every kernel of the
# engine benchmark at batch 1 (CUDA graph nodes profiled one by one; the 0.5B shape by default),
# summed per kernel name in $OUT/profile[-LABEL].log, raw rows in $OUT/kernels-<shape>[-LABEL].csv.
# Kernels run serialized under ncu, so the sum is the step's GPU work without overlap or launch
# gaps; compare it with the step time the benchmark prints. Same bundle as cuda-check.sh:
#   bash scripts/device/pack.sh; then on the GPU machine: bash scripts/device/profile-decode.sh
# TANDEM_PROFILE_SHAPES=a,b and TANDEM_PROFILE_BATCH=n pick what is profiled; TANDEM_PROFILE_LABEL
# names the files (profile-check.sh profiles the decode path before and after the fused kernels
# in one run: TANDEM_GPU_DECODE=unfused / fused, labels "before" / "after"). An unpacked bundle
# (TANDEM_CHECK_UNPACKED) and a models directory (TANDEM_CHECK_MODELS) are reused when given.
set -uo pipefail
repo=$(pwd)
OUT=${OUT:-$repo/.device-out}
mkdir -p "$OUT"
label=${TANDEM_PROFILE_LABEL:+-$TANDEM_PROFILE_LABEL}
exec > >(tee -a "$OUT/profile$label.log") 2>&1
work=${TANDEM_CHECK_WORK:-/tmp/tandem-check}
shapes=${TANDEM_PROFILE_SHAPES:-qwen2-0.5b}
batch=${TANDEM_PROFILE_BATCH:-1}
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "ncu not found"; exit 1; }
mkdir -p "$work"
models=${TANDEM_CHECK_MODELS:-$work/models}
mkdir -p "$models"
if [ -n "${TANDEM_CHECK_UNPACKED:-}" ]; then
  cd "$TANDEM_CHECK_UNPACKED" || exit 1
else
  rm -rf "$work/bundle" && mkdir -p "$work/bundle"
  tar -C "$work/bundle" -xJf "$repo/.device-bundle/bundle.tar.xz" || { echo "no bundle: run scripts/device/pack.sh first" >&2; exit 1; }
  cd "$work/bundle"
fi
export PATH="$(pwd)/node/bin:$PATH" TANDEM_CACHE_DIR="$work/cache"
export TANDEM_CUBLASLT=${TANDEM_CUBLASLT:-$(python3 -c 'import glob,site; c=[p for d in site.getsitepackages() for p in glob.glob(d+"/nvidia/*/lib/libcublasLt.so.*")]; print(c[0] if c else "")' 2>/dev/null)}
[ -z "$TANDEM_CUBLASLT" ] && unset TANDEM_CUBLASLT
echo "decode path: ${TANDEM_GPU_DECODE:-fused (default)}; launches overlapped: ${TANDEM_GPU_OVERLAP:-1 (default)}"
for shape in ${shapes//,/ }; do
  [ -f "$models/$shape/config.json" ] || native/build/tandem_gpu_bench make-model --shape "$shape" --out "$models/$shape" >/dev/null || exit 1
  echo "=== $shape, decode batch $batch"
  node dist/bench/native-gpu-bench.js --shapes "$shape" --models-dir "$models" --batches "$batch" --prefill 16 --decode-steps 32 --no-compare-decode --out "$work/plain.json" 2>&1 | grep -E "decode batch|graphs"
  "$ncu" --metrics gpu__time_duration.sum --csv --print-units base --graph-profiling node --launch-count 3000 \
    node dist/bench/native-gpu-bench.js --shapes "$shape" --models-dir "$models" --batches "$batch" --prefill 16 --decode-steps 32 --no-compare-decode --out "$work/$shape.json" \
    >"$work/ncu-$shape.txt" 2>"$work/ncu-$shape.err" || { tail -20 "$work/ncu-$shape.err"; exit 1; }
  grep -E '^"' "$work/ncu-$shape.txt" >"$OUT/kernels-$shape$label.csv"
  python3 - "$OUT/kernels-$shape$label.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r.get("Metric Name") == "gpu__time_duration.sum"]
by = collections.defaultdict(lambda: [0, 0.0])
for r in rows:
    name = r["Kernel Name"].split("(")[0][:80]
    by[name][0] += 1
    by[name][1] += float(r["Metric Value"].replace(",", ""))
total = sum(v[1] for v in by.values())
print(f"{len(rows)} kernels profiled, {total/1e6:.2f} ms of GPU time in all")
for name, (n, ns) in sorted(by.items(), key=lambda kv: -kv[1][1])[:24]:
    print(f"{100*ns/total:5.1f}%  {n:6d} x {ns/n/1000:8.2f} us  {name}")
PY
done
