#!/usr/bin/env bash
# Every device check in one call (issues 33, 35, 36, 37), for a session lent a GPU: run from the
# repository root with the bundle of scripts/device/pack.sh at .device-bundle/ (carry
# [".device-bundle"]).
#
# Steps are the scripts scripts/device/<name>-check.sh, found by name; each declares its place
# and its time budget on its second line:
#     # run-all: order=30 budget=90
# A run is a list of items, each a step or some of its parts (the names of its `step` calls):
#     cuda                          the whole step, its own budget
#     moe:goldens+serve@150         these parts only (TANDEM_CHECK_STEPS=goldens,serve), 150 s
# An item runs with the step's OUT ($work/out/<name>; items of one step share it), the bundle
# unpacked once here (TANDEM_CHECK_UNPACKED) and its budget as the timeout, cut to what is left
# before the deadline (TANDEM_RUN_DEADLINE seconds after the start, default 530: the run ends
# within 9 minutes, under the device tool's 10); an item the deadline would cut to less than
# 15 s is skipped and says so.
#
# Which items (the first that is set):
#   TANDEM_RUN_STEPS=cuda,moe:bench   these, in this order
#   TANDEM_RUN_PLAN=checks|benches|all   a plan below; default all
# The plans put correctness first, for every issue, because a session gets 15 minutes of device
# time and a GPU is lent to few sessions: a failed check is work any later session can do
# without a GPU, and goldens made here turn CI's skips into checks. `checks` is every issue's
# correctness (kernels, engine, goldens, sanitizer, serving, disaggregated = aggregated, the
# kill -9 fault), each part once; `benches` the measurements, the headline of each issue first;
# `all` is `checks` then `benches`, as far as the deadline goes. A step that no plan names and
# that is not marked default=no on its line 2 runs at the end of `all`: a new check needs no edit
# here to run.
#   TANDEM_RUN_LIST=1                 print the items and stop
#   TANDEM_CHECK_DEVICE=simt          a dry run on this machine (no GPU): the same flow on the
#                                     SIMT harness, in place when there is no bundle; budgets
#                                     and the deadline x TANDEM_CHECK_SIMT_SCALE (default 4)
#
# What comes back ($OUT; the device tool returns at most 8 files): run-all.json (each item's
# status, time, budget and its own summary; "complete": false until the run ends), run-all.log
# (everything printed) and results.tar.gz (every step's OUT: bench JSON, profiles, generated
# goldens). Both are rewritten after every item, so a run the device tool cuts short still brings
# back what it finished. scripts/device/collect.sh copies the goldens into test/fixtures/ and the
# results into bench/results/gpu-<gpu>/ for committing.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(pwd)
OUT=${OUT:-$repo/.device-out}
listing=${TANDEM_RUN_LIST:-}
if [ -z "$listing" ]; then
  mkdir -p "$OUT"
  exec > >(tee -a "$OUT/run-all.log") 2>&1
fi
device=${TANDEM_CHECK_DEVICE:-cuda}
work=${TANDEM_CHECK_WORK:-/tmp/tandem-run-all}
# The SIMT harness runs kernels on the host, several times slower than a GPU: a dry run scales
# every budget (and the deadline) by TANDEM_CHECK_SIMT_SCALE (default 4).
scale=1
[ "$device" = simt ] && scale=${TANDEM_CHECK_SIMT_SCALE:-4}
deadline_s=${TANDEM_RUN_DEADLINE:-$((530 * scale))}
started=$(date +%s)

# The plans (items as above). The budgets are caps; the H200 took 19 s for cuda's checks (before
# the MoE and FP8 suites). cuda's kernels and engine parts run every suite (MoE, FP8 kernels,
# speculative engine checks included), so no later item repeats them.
plan_checks="cuda:kernels+engine+goldens+memcheck+serve@150 vendor-goldens@60 kv-transfer:ipc+disagg@120 sanitizer@75 kv-fault@60
  moe:goldens+hfgoldens+memcheck+serve+disagg@150 fp8:engine+goldens@90 spec:serve@60"
plan_benches="cuda:bench@200 profile@110 moe:bench+benchfp8@300 fp8:bench@240 spec:bench@150 disagg-bench@120 moe:ncu@150"

# The step table: "order name budget default" per *-check.sh, sorted by order.
table=$(for f in "$here"/*-check.sh; do
  name=$(basename "$f" -check.sh)
  line=$(sed -n '2p' "$f")
  order=$(printf '%s' "$line" | sed -n 's/.*order=\([0-9]*\).*/\1/p')
  budget=$(printf '%s' "$line" | sed -n 's/.*budget=\([0-9]*\).*/\1/p')
  default=$(printf '%s' "$line" | sed -n 's/.*default=\(no\).*/\1/p')
  echo "${order:-99} $name ${budget:-60} ${default:-yes}"
done | sort -n)
if [ -z "$listing" ]; then
  echo "=== steps (order name budget default):"
  echo "$table"
fi
item_name() { local n=${1%%@*}; echo "${n%%:*}"; }
named_in_plans=" $(for i in $plan_checks $plan_benches; do item_name "$i"; done | tr '\n' ' ')"
unplanned=$(echo "$table" | awk '$4 == "yes" {print $2}' | while read -r n; do case "$named_in_plans" in *" $n "*) ;; *) echo "$n" ;; esac; done)
if [ -n "${TANDEM_RUN_STEPS:-}" ]; then
  items=${TANDEM_RUN_STEPS//,/ }
  label="TANDEM_RUN_STEPS"
else
  plan=${TANDEM_RUN_PLAN:-all}
  case $plan in
    checks) items=$plan_checks ;;
    benches) items=$plan_benches ;;
    all) items="$plan_checks $plan_benches $unplanned" ;;
    *) echo "run-all: no plan '$plan' (checks, benches or all)" >&2; exit 2 ;;
  esac
  label="plan $plan"
fi
items=$(echo $items)  # one line, single spaces
# Every item names a step and parts of it (the list on its check_begin line): a misspelt part
# would otherwise run nothing and pass.
for item in $items; do
  name=$(item_name "$item")
  echo "$table" | awk -v n="$name" '$2 == n {found=1} END {exit !found}' || { echo "run-all: no step '$name' (scripts/device/$name-check.sh)" >&2; exit 2; }
  case $item in *@*) case ${item##*@} in '' | *[!0-9]*) echo "run-all: '$item': the budget after @ is whole seconds" >&2; exit 2 ;; esac ;; esac
  head=${item%%@*}
  case $head in *:*) ;; *) continue ;; esac
  parts=",$(sed -n 's/^check_begin [^ ]* \([^ ]*\).*/\1/p' "$here/$name-check.sh" | head -1),"
  for p in $(echo "${head#*:}" | tr + ' '); do
    case $parts in *",$p,"*) ;; *) echo "run-all: step '$name' has no part '$p' (its parts: ${parts:1:-1})" >&2; exit 2 ;; esac
  done
done
if [ -n "$listing" ]; then  # the items only, one a line (the plans' test reads them)
  printf '%s\n' $items
  exit 0
fi
rm -rf "$work"
mkdir -p "$work/out"
echo "=== running ($label): $items (device $device, deadline ${deadline_s} s)"

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
note() {  # item name status seconds budget summary_file detail
  python3 - "$@" >>"$results" <<'PY'
import json, sys
item, name, status, seconds, budget, summary, detail = sys.argv[1:8]
steps = None
try:
    text = open(summary).read().strip()
    if text and not text.endswith("}"):
        text += "}"  # a step killed by its timeout leaves the object open
    steps = json.loads(text) if text else None
except Exception as e:
    steps = {"unreadable": str(e)}
print(json.dumps({"name": name, "item": item, "status": status, "seconds": int(seconds), "budget": int(budget), "detail": detail, "steps": steps}))
PY
}
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi")
commit=$(cat "${TANDEM_CHECK_UNPACKED:-/nonexistent}/COMMIT" 2>/dev/null || git rev-parse HEAD 2>/dev/null)
# run-all.json and results.tar.gz in $OUT from what has run so far (complete: 0 or 1).
report() {
  python3 - "$results" "$OUT/run-all.json" "$device" "$gpu" "$commit" "$(($(date +%s) - started))" "$deadline_s" "$1" "$items" <<'PY'
import json, sys
results, out, device, gpu, commit, total, deadline, complete, items = sys.argv[1:10]
steps = [json.loads(l) for l in open(results) if l.strip()]
summary = {"device": device, "gpu": gpu, "commit": commit, "seconds": int(total), "deadline_seconds": int(deadline),
           "complete": complete == "1", "items": items.split(), "passed": all(s["status"] != "fail" for s in steps), "steps": steps}
json.dump(summary, open(out, "w"), indent=2)
PY
  tar -C "$work/out" -czf "$OUT/results.tar.gz" . 2>/dev/null
}

for item in $items; do
  name=$(item_name "$item")
  part=""
  budget=$(echo "$table" | awk -v n="$name" '$2 == n {print $3}')
  case $item in *@*) budget=${item##*@} ;; esac
  head=${item%%@*}
  case $head in *:*) part=${head#*:} ;; esac
  budget=$((budget * scale))
  left=$((deadline_s - ($(date +%s) - started)))
  limit=$((budget < left ? budget : left))
  out="$work/out/$name"
  mkdir -p "$out"
  # Items of one step share its OUT; each keeps its own summary.
  summary="$out/summary.json"
  [ -n "$part" ] && summary="$out/summary-${part//+/-}.json"
  if [ "$limit" -lt 15 ] && [ "$limit" -lt "$budget" ]; then  # cut by the deadline to less than 15 s
    echo "=== $item: skipped, ${left} s left before the deadline (budget ${budget} s)"
    note "$item" "$name" skip 0 "$budget" /dev/null "no time left: ${left} s before the deadline"
    report 0
    continue
  fi
  echo "=== $item ($(($(date +%s) - started)) s in; timeout ${limit} s of budget ${budget} s)"
  t0=$(date +%s)
  rm -f "$out/summary.json"
  if [ -n "$part" ]; then
    OUT="$out" TANDEM_CHECK_WORK="$work/step-$name" TANDEM_CHECK_STEPS="${part//+/,}" timeout -k 5 "$limit" bash "$here/$name-check.sh"
  else
    OUT="$out" TANDEM_CHECK_WORK="$work/step-$name" timeout -k 5 "$limit" bash "$here/$name-check.sh"
  fi
  rc=$?
  [ "$summary" != "$out/summary.json" ] && [ -f "$out/summary.json" ] && mv "$out/summary.json" "$summary"
  dt=$(($(date +%s) - t0))
  case $rc in
    0) status=pass detail="" ;;
    124 | 137) status=fail detail="timed out after ${limit} s" ;;
    *) status=fail detail="exit $rc" ;;
  esac
  echo "=== $item: $status in ${dt} s"
  note "$item" "$name" "$status" "$dt" "$budget" "$summary" "$detail"
  report 0
done

report 1
total=$(($(date +%s) - started))
python3 - "$OUT/run-all.json" <<'PY'
import json, sys
for s in json.load(open(sys.argv[1]))["steps"]:
    sub = s.get("steps") or {}
    failed = [k for k, v in sub.items() if isinstance(v, dict) and v.get("status") == "fail"]
    print(f'{s["item"]:52} {s["status"]:5} {s["seconds"]:4d} s / {s["budget"]:4d} s  {s["detail"]}{"  failed: " + ",".join(failed) if failed else ""}')
PY
echo "=== done in ${total} s: $OUT/run-all.json, $OUT/run-all.log, $OUT/results.tar.gz ($(du -h "$OUT/results.tar.gz" | cut -f1))"
python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["passed"] else 1)' "$OUT/run-all.json"
