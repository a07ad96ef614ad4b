#!/usr/bin/env bash
# run-all: order=30 budget=90
# The GPU check of KV movement between workers (issue 24), run on a GPU machine from the
# repository root with the bundle of scripts/device/pack.sh at .device-bundle/ (no Node.js
# needed there). Step status and time to $OUT/summary.json, the log to $OUT/kv-transfer-check.log,
# measurements to $OUT/kv-transfer-bench.json, outputs to $OUT/kv-disagg.json. Steps:
#   kernels   every kernel check on cuda, the KV copy kernel's 192 cases included
#   ipc       two processes on the one GPU (tandem_kv_bench export / import), 0.5B- and
#             8B-shaped layouts: the gather kernel over a CUDA IPC mapping for 1, 16 and 256
#             blocks vs one cudaMemcpyDtoD of the same bytes, every copied byte checked; the
#             staged halves (gather into pinned memory and back) vs D2H / H2D memcpy
#   disagg    runtime up --engine native --device cuda, aggregated (--workers 1) and then
#             --prefill 1 --decode 1 (every prompt disaggregated) on the same GPU: greedy completions of
#             the tiny model and of a 0.5B-shaped random model (a ~3k-word prompt among them)
#             must be equal token for token
# Budget: under 5 minutes (device tool timeout_s=400). TANDEM_CHECK_STEPS=kernels,ipc,... runs a
# subset; TANDEM_CHECK_DEVICE=simt runs the flow on the host, in place when there is no bundle
# (a dry run of this script: small pools, the tiny model only).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
check_begin kv-transfer-check kernels,ipc,disagg

ipc() {
  local rc=0 blocks=300 files=""
  [ "$device" = simt ] && blocks=20
  for shape in 0.5b 8b; do
    local h="$work/kv-handle-$shape"
    rm -f "$h" "$h.done"
    native/build/tandem_kv_bench export --device "$device" --shape $shape --blocks $blocks --handle "$h" &
    local exporter=$!
    native/build/tandem_kv_bench import --device "$device" --shape $shape --blocks $blocks --handle "$h" --json "$work/kv-ipc-$shape.json" || rc=1
    touch "$h.done"
    wait $exporter || rc=1
    files="$files $work/kv-ipc-$shape.json"
  done
  python3 - "$OUT/kv-transfer-bench.json" "$gpu" $files <<'PY' || rc=1
import json, sys
out, gpu, files = sys.argv[1], sys.argv[2], sys.argv[3:]
runs = [json.load(open(f)) for f in files]
# Name what each figure measured: the transports the engine picks between (workers/kv-transfer/),
# each beside the plain CUDA copy of the same bytes it is judged against.
transports = {
    "ipc": {"transport": "cuda-ipc", "path": "the decode process maps the prefill's pool (cudaIpcOpenMemHandle) and gathers blocks with the KV copy kernel", "baseline": "one cudaMemcpyDtoD of the same bytes"},
    "staged": {"transport": "staged", "path": "gather into pinned host memory on one side, scatter from it on the other (the UCX / host path's device ends)", "baseline": "cudaMemcpy D2H and H2D of the same bytes"},
}
json.dump({"gpu": gpu, "transports": transports, "runs": runs, "aim": "gather >= 0.8 x memcpy DtoD at >= 16 blocks"}, open(out, "w"), indent=2)
for r in runs:
    for row in r["ipc"]:
        print(f'cuda-ipc {r["shape"]:5} {row["blocks"]:4} blocks: {row["gather_gbps"]:.1f} GB/s, {row["ratio"]:.2f} x memcpy DtoD, bytes equal: {row["bytes_equal"]}')
sys.exit(0 if all(r["bytes_equal"] for r in runs) else 1)
PY
  return $rc
}

# One fleet: start it, answer every prompt greedily, stop it. $1: label, rest: runtime up flags.
fleet() {
  local label=$1 model=$2
  shift 2
  local port=18100 log="$work/up-$label.log"
  up_start "$log" $port --model "$model" "$@"
  local long=3000
  [ "$model" = tiny ] && long=300  # the tiny model's context
  python3 scripts/device/greedy_answers.py "http://127.0.0.1:$port" "$work/answers-$label.json" $long
  local rc=$?
  up_stop
  [ $rc = 0 ] || cat "$log"
  return $rc
}

disagg() {
  local rc=0 list="tiny"
  if [ "$device" = cuda ]; then
    random_model qwen2-0.5b "$models/qwen2-0.5b" || return 1
    list="tiny $models/qwen2-0.5b"
  fi
  local results="[]"
  for model in $list; do
    local name=$(basename "$model")
    # 4 GiB pools (64 MiB on simt): the prefill keeps a host copy of its pool for the staged path.
    local kvmem=4294967296
    [ "$device" = simt ] && kvmem=67108864
    fleet "agg-$name" "$model" --workers 1 --kv-cache-memory $kvmem || rc=1
    fleet "disagg-$name" "$model" --workers 0 --prefill 1 --decode 1 --enforce-disagg --disagg-min-prefill-tokens 1 --kv-cache-memory $kvmem || rc=1
    results=$(python3 - "$results" "$name" "$work/answers-agg-$name.json" "$work/answers-disagg-$name.json" <<'PY'
import json, sys
results, name, a, d = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
try:
    agg, dis = json.load(open(a)), json.load(open(d))
    remote = sum(float(l.rsplit(" ", 1)[1]) for l in dis["routed"] if 'path="disagg"' in l)
    # Equal, and every prompt really went through a prefill worker and a KV hand-off.
    results.append({"model": name, "prompts": len(agg["answers"]), "equal": agg["answers"] == dis["answers"] and remote == len(dis["answers"]),
                    "disaggregated_requests": remote, "routed": dis["routed"],
                    "aggregated": agg["answers"], "disaggregated": dis["answers"]})
except Exception as e:
    results.append({"model": name, "equal": False, "error": str(e)})
print(json.dumps(results))
PY
)
  done
  echo "$results" >"$OUT/kv-disagg.json"
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); [print(x["model"], "equal" if x["equal"] else "DIFFER") for x in r]; sys.exit(0 if all(x["equal"] for x in r) else 1)' "$OUT/kv-disagg.json" || rc=1
  return $rc
}

export -f ipc fleet disagg

step kernels 60 native/build/tandem_gpu_kernel_test
step ipc 90 ipc
step disagg 200 disagg

check_end
