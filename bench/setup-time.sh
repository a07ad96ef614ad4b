#!/usr/bin/env bash
# How long a newcomer's `bash scripts/setup.sh` takes in a fresh clone, and how much it prints:
# two versions of the setup script side by side on the same tree (issue 34 §3.6). Each round
# clones this repository at TREE_REF into a temporary directory, puts the setup script
# (scripts/setup.sh, scripts/setup-state.mjs) of OLD_REF or NEW_REF in it, and runs it there
# (npm install from the npm cache the first round warms, TypeScript, both native addons), timed
# by /usr/bin/time (wall, user and system CPU of everything it ran). The order is old new new
# old, so a load that drifts over the run weighs on both alike; the table gives each run and the
# mean of each.
#
#   flock /work/wt/.native.lock bash bench/setup-time.sh OLD_REF NEW_REF [TREE_REF, default NEW_REF]
#
# Run it under the native build lock (it builds the native addon twice per version: many
# minutes on 2 cores). Writes bench/results/setup-time.json.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
[ $# -ge 2 ] && [ $# -le 3 ] || { echo "usage: bash bench/setup-time.sh OLD_REF NEW_REF [TREE_REF]" >&2; exit 2; }
old=$(git rev-parse --verify "$1^{commit}")
new=$(git rev-parse --verify "$2^{commit}")
tree=$(git rev-parse --verify "${3:-$2}^{commit}")
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-setup-time.XXXXXX")
trap 'rm -rf "$work"' EXIT

runs=()
round=0
for pair in "old $old" "new $new" "new $new" "old $old"; do
  read -r label sha <<<"$pair"
  round=$((round + 1))
  dir="$work/$round-$label"
  git clone -q --no-checkout "$repo" "$dir"
  git -C "$dir" checkout -q "$tree"
  git -C "$dir" checkout -q "$sha" -- scripts/setup.sh scripts/setup-state.mjs
  load=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -f '%e %U %S' -o "$work/time" bash -c "cd '$dir' && bash scripts/setup.sh" >"$work/out" 2>&1 || {
    echo "setup of $label ($sha) failed:" >&2
    tail -n 30 "$work/out" >&2
    exit 1
  }
  read -r wall user sys <"$work/time"
  lines=$(grep -c '' "$work/out")
  printf '%-3s %s  wall %7.1f s  cpu %7.1f s  %4d lines  load %s\n' "$label" "${sha:0:8}" "$wall" "$(awk "BEGIN{print $user + $sys}")" "$lines" "$load"
  runs+=("{\"version\":\"$label\",\"commit\":\"$sha\",\"wallS\":$wall,\"userS\":$user,\"sysS\":$sys,\"outputLines\":$lines,\"loadAtStart\":$load}")
  rm -rf "$dir"
done

mkdir -p bench/results
json=$(printf '%s,' "${runs[@]}")
node -e '
const runs = JSON.parse(process.argv[1]);
const mean = (v, k) => runs.filter((r) => r.version === v).reduce((s, r) => s + r[k], 0) / 2;
const out = { what: "bash scripts/setup.sh in a fresh clone, old new new old", tree: process.argv[2], cores: require("os").availableParallelism(), runs,
  mean: Object.fromEntries(["old", "new"].map((v) => [v, { wallS: mean(v, "wallS"), cpuS: mean(v, "userS") + mean(v, "sysS"), outputLines: mean(v, "outputLines") }])) };
out.newOverOldWall = out.mean.new.wallS / out.mean.old.wallS;
require("fs").writeFileSync("bench/results/setup-time.json", JSON.stringify(out, null, 2) + "\n");
console.log(`mean wall: old ${out.mean.old.wallS.toFixed(0)} s, new ${out.mean.new.wallS.toFixed(0)} s (new/old ${out.newOverOldWall.toFixed(2)}); output lines: old ${out.mean.old.outputLines}, new ${out.mean.new.outputLines}`);
' "[${json%,}]" "$tree"
