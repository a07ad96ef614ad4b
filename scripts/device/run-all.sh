#!/usr/bin/env bash
# Every device check in one call (issue 33), for a session lent a GPU: run from the repository
# root with the bundle of scripts/device/pack.sh at .device-bundle/ (carry [".device-bundle"]).
#
# Steps are the scripts scripts/device/<name>-check.sh, found by name; each declares its place
# and its time budget on its second line:
#     # run-all: order=30 budget=90
# so a new check is a new file (no table to edit; see scripts/device/README.md, "Adding a
# step"). A step runs with its own OUT ($work/out/<name>), the bundle unpacked once here
# (TANDEM_CHECK_UNPACKED) and its budget as the timeout, cut to what is left before the
# deadline (TANDEM_RUN_DEADLINE seconds after the start, default 530: the run ends within 9
# minutes, under the device tool's 10); a step that would get less than 15 s is skipped and says so.
#
#   TANDEM_RUN_STEPS=cuda,kv-transfer   run these steps (default: every *-check.sh but those
#                                       marked default=no), in their declared order
#   TANDEM_CHECK_DEVICE=simt            a dry run on this machine (no GPU): the same flow on the
#                                       SIMT harness, in place when there is no bundle; budgets
#                                       and the deadline x TANDEM_CHECK_SIMT_SCALE (default 4)
#
# What comes back ($OUT; the device tool returns at most 8 files): run-all.json (each step's
# status, time, budget and its own summary), run-all.log (everything printed) and results.tar.gz
# (every step's OUT: bench JSON, profiles, generated goldens). scripts/device/collect.sh copies
# the goldens into test/fixtures/ and the results into bench/results/gpu-<gpu>/ for committing.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(pwd)
OUT=${OUT:-$repo/.device-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run-all.log") 2>&1
device=${TANDEM_CHECK_DEVICE:-cuda}
work=${TANDEM_CHECK_WORK:-/tmp/tandem-run-all}
# The SIMT harness runs kernels on the host, several times slower than a GPU: a dry run scales
# every budget (and the deadline) by TANDEM_CHECK_SIMT_SCALE (default 4).
scale=1
[ "$device" = simt ] && scale=${TANDEM_CHECK_SIMT_SCALE:-4}
deadline_s=${TANDEM_RUN_DEADLINE:-$((530 * scale))}
started=$(date +%s)
rm -rf "$work"
mkdir -p "$work/out"

# The step table: "order name budget default" per *-check.sh, sorted by order.
table=$(for f in "$here"/*-check.sh; do
  name=$(basename "$f" -check.sh)
  line=$(sed -n '2p' "$f")
  order=$(printf '%s' "$line" | sed -n 's/.*order=\([0-9]*\).*/\1/p')
  budget=$(printf '%s' "$line" | sed -n 's/.*budget=\([0-9]*\).*/\1/p')
  default=$(printf '%s' "$line" | sed -n 's/.*default=\(no\).*/\1/p')
  echo "${order:-99} $name ${budget:-60} ${default:-yes}"
done | sort -n)
echo "=== steps (order name budget default):"
echo "$table"
wanted=${TANDEM_RUN_STEPS:-$(echo "$table" | awk '$4 == "yes" {print $2}' | paste -sd, -)}
for name in ${wanted//,/ }; do
  echo "$table" | awk -v n="$name" '$2 == n {found=1} END {exit !found}' || { echo "run-all: no step '$name' (scripts/device/$name-check.sh)" >&2; exit 2; }
done
echo "=== running: $wanted (device $device, deadline ${deadline_s} s)"

# Unpack once; every step reuses it.
if [ -f "$repo/.device-bundle/bundle.tar.xz" ]; then
  echo "=== unpack"
  mkdir -p "$work/bundle"
  tar -C "$work/bundle" -xJf "$repo/.device-bundle/bundle.tar.xz" || { echo "run-all: the bundle does not unpack" >&2; exit 1; }
  export TANDEM_CHECK_UNPACKED="$work/bundle"
elif [ "$device" != simt ]; then
  echo "no bundle: run scripts/device/pack.sh first" >&2
  exit 1
fi
# Shared between steps: generated models (the bench and the fault check use the same shapes).
export TANDEM_CHECK_MODELS="$work/models"
mkdir -p "$TANDEM_CHECK_MODELS"

results="$work/results.jsonl"
: >"$results"
note() {  # name status seconds budget summary_file detail
  python3 - "$@" >>"$results" <<'PY'
import json, sys
name, status, seconds, budget, summary, detail = sys.argv[1:7]
steps = None
try:
    text = open(summary).read().strip()
    if text and not text.endswith("}"):
        text += "}"  # a step killed by its timeout leaves the object open
    steps = json.loads(text) if text else None
except Exception as e:
    steps = {"unreadable": str(e)}
print(json.dumps({"name": name, "status": status, "seconds": int(seconds), "budget": int(budget), "detail": detail, "steps": steps}))
PY
}

for name in $(echo "$table" | awk '{print $2}'); do
  case ",$wanted," in *",$name,"*) ;; *) continue ;; esac
  budget=$(($(echo "$table" | awk -v n="$name" '$2 == n {print $3}') * scale))
  left=$((deadline_s - ($(date +%s) - started)))
  limit=$((budget < left ? budget : left))
  out="$work/out/$name"
  mkdir -p "$out"
  if [ "$limit" -lt 15 ]; then
    echo "=== $name: skipped, ${left} s left before the deadline (budget ${budget} s)"
    note "$name" skip 0 "$budget" /dev/null "no time left: ${left} s before the deadline"
    continue
  fi
  echo "=== $name ($(($(date +%s) - started)) s in; timeout ${limit} s of budget ${budget} s)"
  t0=$(date +%s)
  OUT="$out" TANDEM_CHECK_WORK="$work/step-$name" timeout -k 5 "$limit" bash "$here/$name-check.sh"
  rc=$?
  dt=$(($(date +%s) - t0))
  case $rc in
    0) status=pass detail="" ;;
    124 | 137) status=fail detail="timed out after ${limit} s" ;;
    *) status=fail detail="exit $rc" ;;
  esac
  echo "=== $name: $status in ${dt} s"
  note "$name" "$status" "$dt" "$budget" "$out/summary.json" "$detail"
done

total=$(($(date +%s) - started))
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi")
commit=$(cat "${TANDEM_CHECK_UNPACKED:-/nonexistent}/COMMIT" 2>/dev/null || git rev-parse HEAD 2>/dev/null)
python3 - "$results" "$OUT/run-all.json" "$device" "$gpu" "$commit" "$total" "$deadline_s" <<'PY'
import json, sys
results, out, device, gpu, commit, total, deadline = sys.argv[1:8]
steps = [json.loads(l) for l in open(results) if l.strip()]
summary = {"device": device, "gpu": gpu, "commit": commit, "seconds": int(total), "deadline_seconds": int(deadline),
           "passed": all(s["status"] != "fail" for s in steps), "steps": steps}
json.dump(summary, open(out, "w"), indent=2)
for s in steps:
    sub = s.get("steps") or {}
    failed = [k for k, v in sub.items() if isinstance(v, dict) and v.get("status") == "fail"]
    print(f'{s["name"]:16} {s["status"]:5} {s["seconds"]:4d} s / {s["budget"]:4d} s  {s["detail"]}{"  failed: " + ",".join(failed) if failed else ""}')
PY
# Everything the steps wrote, in one file (the device tool brings back at most 8).
tar -C "$work/out" -czf "$OUT/results.tar.gz" . 2>/dev/null
echo "=== done in ${total} s: $OUT/run-all.json, $OUT/run-all.log, $OUT/results.tar.gz ($(du -h "$OUT/results.tar.gz" | cut -f1))"
python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["passed"] else 1)' "$OUT/run-all.json"
