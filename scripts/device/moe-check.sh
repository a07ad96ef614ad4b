#!/usr/bin/env bash
# run-all: order=80 budget=540 default=no
# The GPU check of mixture-of-experts models and YaRN (issue 36), run on a GPU machine from the
# repository root with the bundle of scripts/device/pack.sh at .device-bundle/ (no Node.js
# needed there), as one step of scripts/device/run-all.sh or alone. Step status and time go to
# $OUT/summary.json, the log to $OUT/moe-check.log; results to $OUT/moe-bench.json (the engine rows alone, written after every measurement: moe-engine.json),
# moe-hf-goldens.json, moe-disagg.json, moe-ncu.csv. Steps, most important first:
#   kernels     every kernel check on cuda, the MoE suite (router with torch.topk's tie order,
#               grouping, grouped GEMMs, combine; an expert with every token, experts with none)
#   engine      the C++ engine checks on cuda: the three MoE families' chunked / prefix-hit /
#               mixed batches, routing ties as torch breaks them, decode graphs
#   goldens     the MoE and YaRN golden fixtures on cuda (bf16 tolerance, native/tests/engine_test.cc)
#   hfgoldens   transformers itself (5.x, CPU, f32, eager) on the same make-tiny models and prompts:
#               writes fixtures in the committed format to moe-hf-goldens.json and compares them
#               with the committed ones (made by scripts/goldens/reference.py); a GPU session
#               commits them (python3 scripts/device/moe_hf_goldens.py --split DIR)
#   memcheck    compute-sanitizer memcheck on one MoE model's mixed steps (tandem_native_test --quick-moe)
#   serve       runtime up --engine native --device cuda with a tiny Qwen3-MoE: a chat completion
#               and a json_schema answer
#   disagg      the same model aggregated (--workers 1) and --prefill 1 --decode 1: greedy
#               completions equal token for token (moe-disagg.json)
#   bench       Qwen3-30B-A3B shape (random bf16, ~61 GB, built in memory): decode batch 1 and 64
#               against the HBM roofline of the bytes each step reads, prefill 2k on active
#               FLOPs against torch.matmul (and with the grouped GEMMs forced onto 8-row tiles
#               and onto 64- and 128-row tiles, side by side), transformers
#               generate at batch 1 and 64 (moe-bench.json)
#   ncu         where the expert kernels spend their time: ncu over a few decode steps (moe-ncu.csv)
#   benchfp8    the bench's engine rows again with --quantization fp8 (experts e4m3, read by the
#               grouped GEMMs as such): decode b1/b64 and prefill beside the bf16 rows (moe-bench-fp8.json)
# Budget: about 8 minutes on an H200 (the 61 GB model is built twice: bench and ncu; transformers
# builds its own). run-all.sh's plans run it in parts: goldens,hfgoldens,memcheck,serve,disagg
# among the checks, bench,benchfp8 and ncu among the benchmarks (its kernels and engine parts
# are the cuda step's binaries, which run every suite); TANDEM_RUN_STEPS=moe runs it whole.
# Device tool timeout_s=600. TANDEM_CHECK_STEPS=kernels,engine,... runs
# a subset; TANDEM_CHECK_DEVICE=simt runs the flow on the host, in place when there is no bundle
# (a dry run of this script: the tiny MoE shape for the bench; hfgoldens, memcheck and ncu are
# skipped where transformers, compute-sanitizer or ncu are missing).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
check_begin moe-check kernels,engine,goldens,hfgoldens,memcheck,serve,disagg,bench,ncu,benchfp8

# The fixtures this check covers: label = arch-dtype[-rope], made as regenerate.sh makes them.
MOE_GOLDENS="qwen3_moe:f32:21: mixtral:f32:22: qwen2_moe:f32:23: qwen3:f32:24:yarn mixtral:bf16:25:"
make_models() {
  local spec arch dtype seed rope label
  for spec in $MOE_GOLDENS; do
    IFS=: read -r arch dtype seed rope <<<"$spec"
    label=$(echo "$arch${rope:+-$rope}-$dtype" | tr _ -)
    node bin/runtime.js model make-tiny --arch "$arch" --out "$models/$label" --dtype "$dtype" --seed "$seed" ${rope:+--rope-scaling $rope} >/dev/null || return 1
  done
  node bin/runtime.js model make-tiny --arch qwen3_moe --out "$models/serve-qwen3-moe" --seed 5 >/dev/null
}

goldens() {
  local rc=0 label
  for label in qwen3-moe-f32 mixtral-f32 qwen2-moe-f32 qwen3-yarn-f32 mixtral-bf16; do
    echo "--- golden $label"
    # --golden-only: the fixture alone (the engine step already ran the suite on this device).
    native/build/tandem_native_test --golden-only "$models/$label" "test/fixtures/goldens/$label.json" | grep -E "golden case|checks" || rc=1
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  done
  return $rc
}

hfgoldens() {
  python3 -c 'import transformers, torch' 2>/dev/null || { echo "transformers is not installed here"; return 77; }
  python3 scripts/device/moe_hf_goldens.py --models "$models" --fixtures test/fixtures/goldens \
    --labels qwen3-moe-f32,mixtral-f32,qwen2-moe-f32,qwen3-yarn-f32,mixtral-bf16 --out "$OUT/moe-hf-goldens.json"
}

memcheck() {
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  [ -n "$sanitizer" ] || { echo "compute-sanitizer not found"; return 77; }
  "$sanitizer" --tool memcheck --error-exitcode 3 --print-limit 20 native/build/tandem_native_test --quick-moe
}

# One fleet on the tiny Qwen3-MoE: start it, run the client ($2: check | greedy), stop it.
fleet() {
  local label=$1 mode=$2
  shift 2
  local port=18200 log="$work/up-$label.log" rc=0
  up_start "$log" $port --model "$models/serve-qwen3-moe" "$@"
  if [ "$mode" = greedy ]; then
    local long=300
    [ "$device" = simt ] && long=60  # the harness is slow: a shorter long prompt in the dry run
    python3 scripts/device/greedy_answers.py "http://127.0.0.1:$port" "$work/answers-$label.json" $long
    rc=$?
  else
    python3 - "http://127.0.0.1:$port" "$work/answers-$label.json" <<'PY'
import json, sys, urllib.request
base, out = sys.argv[1], sys.argv[2]
def post(path, body):
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"content-type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=120))
model = json.load(urllib.request.urlopen(base + "/v1/models", timeout=30))["data"][0]["id"]
r = post("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 24, "temperature": 0})
text = r["choices"][0]["message"]["content"] or ""
schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}}, "required": ["name", "age"], "additionalProperties": False}
s = post("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "a person"}], "max_tokens": 96, "temperature": 0.7, "seed": 3,
         "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}})
obj = json.loads(s["choices"][0]["message"]["content"])
ok = isinstance(obj.get("name"), str) and isinstance(obj.get("age"), int) and set(obj) == {"name", "age"}
json.dump({"chat": text, "json_schema": obj, "ok": ok}, open(out, "w"))
print(f"chat: {text!r}; json_schema: {obj}")
sys.exit(0 if ok and r["choices"][0]["finish_reason"] in ("stop", "length") else 1)
PY
    rc=$?
  fi
  up_stop
  [ $rc = 0 ] || cat "$log"
  return $rc
}

serve() { fleet serve check --workers 1; }

disagg() {
  local rc=0 kvmem=1073741824
  [ "$device" = simt ] && kvmem=67108864
  fleet agg greedy --workers 1 --kv-cache-memory $kvmem || rc=1
  fleet disagg greedy --workers 0 --prefill 1 --decode 1 --enforce-disagg --disagg-min-prefill-tokens 1 --kv-cache-memory $kvmem || rc=1
  python3 - "$work/answers-agg.json" "$work/answers-disagg.json" "$OUT/moe-disagg.json" <<'PY' || rc=1
import json, sys
agg, dis = [json.load(open(p)) for p in sys.argv[1:3]]
out = sys.argv[3]
remote = sum(float(l.rsplit(" ", 1)[1]) for l in dis["routed"] if 'path="disagg"' in l)
equal = agg["answers"] == dis["answers"] and remote == len(dis["answers"])
json.dump({"model": "make-tiny qwen3_moe", "equal": equal, "disaggregated_requests": remote, "aggregated": agg["answers"], "disaggregated": dis["answers"]}, open(out, "w"), indent=1)
print("aggregated == disaggregated" if equal else "DIFFER", f"({remote:.0f} requests through a prefill worker)")
sys.exit(0 if equal else 1)
PY
  return $rc
}

bench() {
  local bw=0 shape=qwen3-30b-a3b
  [ "$device" = simt ] && shape=tiny-moe
  if [ "$device" = cuda ]; then
    native/build/tandem_gpu_bench bandwidth --device cuda --json "$work/bandwidth.json" || return 1
    bw=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("copy_gbps", 0))' "$work/bandwidth.json")
  fi
  native/build/tandem_moe_bench --device "$device" --shape $shape --bandwidth-gbs "$bw" --json "$OUT/moe-engine.json" || return 1
  if [ "$device" = cuda ]; then
    PYTHONUNBUFFERED=1 timeout 240 python3 scripts/device/moe_torch_baselines.py --out "$work/moe-torch.json" \
      || echo "torch/transformers baselines failed (their ratios will be missing)"
  fi
  python3 - "$OUT/moe-bench.json" "$gpu" "$OUT/moe-engine.json" "$work/moe-torch.json" "$work/bandwidth.json" <<'PY'
import json, os, sys
out, gpu, eng_p, torch_p, bw_p = sys.argv[1:6]
eng = json.load(open(eng_p))
torch_ = json.load(open(torch_p)) if os.path.exists(torch_p) else {}
bw = json.load(open(bw_p)) if os.path.exists(bw_p) else {}
r = {"gpu": gpu, "engine": eng, "torch": torch_, "bandwidth": bw, "aims": {
    "decode_b1_roofline": ">= 0.60", "decode_b64_roofline": ">= 0.60 of the distinct experts' bytes", "prefill_2k": ">= 0.35 x torch.matmul TFLOP/s on active FLOPs"}}
if torch_.get("matmul_tflops"):
    r["prefill_vs_matmul"] = eng["prefill"]["active_tflops"] / torch_["matmul_tflops"]
for b in ("b1", "b64"):
    hf = torch_.get(f"transformers_generate_{b}_tok_s")
    if hf and f"decode_{b}" in eng:
        r[f"decode_{b}_vs_transformers"] = eng[f"decode_{b}"]["tok_s"] / hf
json.dump(r, open(out, "w"), indent=1)
for k in ("decode_b1", "decode_b64", "decode_b4"):
    if k in eng: print(k, json.dumps(eng[k]))
for k in ("prefill", "prefill_tiles8", "prefill_mma64", "prefill_mma128", "prefill_again"):
    if k in eng: print(k, json.dumps(eng[k]))
if "prefill_tiles8" in eng:  # the grouped GEMMs' paths side by side (gpu_backend_moe.cc's thresholds)
    r["prefill_mma_vs_tiles8"] = eng["prefill"]["tok_s"] / eng["prefill_tiles8"]["tok_s"]
    json.dump(r, open(out, "w"), indent=1)
for k in ("prefill_vs_matmul", "prefill_mma_vs_tiles8", "decode_b1_vs_transformers", "decode_b64_vs_transformers"):
    if k in r: print(k, round(r[k], 3))
PY
}

bench_fp8() {
  local bw=0 shape=qwen3-30b-a3b
  [ "$device" = simt ] && shape=tiny-moe
  [ -f "$work/bandwidth.json" ] && bw=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("copy_gbps", 0))' "$work/bandwidth.json")
  native/build/tandem_moe_bench --device "$device" --shape $shape --bandwidth-gbs "$bw" --quantization fp8 --json "$OUT/moe-bench-fp8.json" || return 1
  python3 - "$OUT/moe-bench-fp8.json" "$OUT/moe-engine.json" <<'PY'
import json, os, sys
f8 = json.load(open(sys.argv[1]))
b16 = json.load(open(sys.argv[2])) if os.path.exists(sys.argv[2]) else {}
for k in ("decode_b1", "decode_b64", "decode_b4", "prefill"):
    if k in f8 and k in b16:
        print(k, "fp8 / bf16 tok/s", round(f8[k]["tok_s"] / b16[k]["tok_s"], 3), "| fp8", json.dumps(f8[k]))
PY
}

ncu_profile() {
  local ncu
  ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] && [ "$device" = cuda ] || { echo "ncu not found (or not a CUDA run)"; return 77; }
  # Kernel durations of a few decode steps at batch 1 (the first ~500 MoE launches are the
  # load, prefill and graph capture); summed per kernel name.
  "$ncu" --kernel-name regex:"moe_|gemm|attention|rmsnorm|qkv_rope|sample" --launch-skip 2000 --launch-count 600 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw \
    native/build/tandem_moe_bench --device cuda --steps 4 --json "$work/ncu-bench.json" >"$work/ncu.csv" 2>"$work/ncu.err" || { tail -20 "$work/ncu.err"; return 1; }
  python3 - "$work/ncu.csv" "$OUT/moe-ncu.csv" <<'PY'
import csv, collections, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, data = rows[0], rows[2:]
ki, ti, bi = head.index("Kernel Name"), head.index("gpu__time_duration.sum"), head.index("dram__bytes_read.sum")
tot = collections.defaultdict(lambda: [0, 0.0, 0.0])
for r in data:
    name = r[ki].split("(")[0].split("<")[0]
    t = tot[name]; t[0] += 1; t[1] += float(r[ti].replace(",", "")); t[2] += float(r[bi].replace(",", ""))
with open(sys.argv[2], "w") as f:
    f.write("kernel,launches,total_us,dram_read_mb,achieved_gbs\n")
    for name, (n, ns, b) in sorted(tot.items(), key=lambda kv: -kv[1][1]):
        f.write(f"{name},{n},{ns/1e3:.1f},{b/1e6:.1f},{b/ns if ns else 0:.0f}\n")
print(open(sys.argv[2]).read())
PY
}

export device models OUT work gpu MOE_GOLDENS
export -f make_models goldens hfgoldens memcheck fleet serve disagg bench ncu_profile bench_fp8

if want goldens || want hfgoldens || want serve || want disagg; then make_models || echo "make-tiny failed"; fi
step kernels 90 native/build/tandem_gpu_kernel_test
step engine 60 native/build/tandem_native_test
step goldens 180 goldens
step hfgoldens 120 hfgoldens
step memcheck 120 memcheck
step serve 60 serve
step disagg 240 disagg
step bench 360 bench
step ncu 150 ncu_profile
step benchfp8 150 bench_fp8

check_end
