#!/usr/bin/env bash
# Files what a run-all.sh run brought back, ready to commit (run on the development machine
# from the repository root, after the device tool copied $OUT here):
#
#   bash scripts/device/collect.sh DIR [NAME]
#
# DIR holds run-all.json, run-all.log and results.tar.gz (the device tool's files_at). Copies
#   - the generated vendor goldens into test/fixtures/lora-goldens/ and
#     test/fixtures/embedding-goldens/ (the tests that skipped without them then run);
#   - every step's JSON, CSV and log into bench/results/gpu-NAME/<step>/ (logs as .txt: *.log is
#     ignored by git), run-all.json and run-all.txt beside them.
# NAME defaults to the GPU's model from run-all.json, lower case (e.g. h200). Prints what it
# copied; then `git add test/fixtures bench/results/gpu-NAME` and commit.
set -euo pipefail
dir=${1:?usage: collect.sh DIR [NAME]}
[ -f "$dir/run-all.json" ] || { echo "collect.sh: $dir/run-all.json not found" >&2; exit 2; }
name=${2:-$(python3 -c 'import json,re,sys; g=json.load(open(sys.argv[1]))["gpu"]; m=re.search(r"(H100|H200|A100|L40S|B200|GH200)", g); print((m.group(1) if m else g.split(",")[0].split()[-1]).lower())' "$dir/run-all.json")}
dest=bench/results/gpu-$name
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -C "$tmp" -xzf "$dir/results.tar.gz"
mkdir -p "$dest"
cp "$dir/run-all.json" "$dest/run-all.json"
[ -f "$dir/run-all.log" ] && cp "$dir/run-all.log" "$dest/run-all.txt"
for kind in lora-goldens embedding-goldens; do
  found=$(find "$tmp" -path "*/$kind/*.json" -type f)
  [ -n "$found" ] || continue
  mkdir -p "test/fixtures/$kind"
  for f in $found; do
    cp "$f" "test/fixtures/$kind/"
    echo "fixture: test/fixtures/$kind/$(basename "$f")"
  done
done
for step in "$tmp"/*/; do
  s=$(basename "$step")
  mkdir -p "$dest/$s"
  find "$step" -maxdepth 1 -type f \( -name '*.json' -o -name '*.csv' -o -name '*.log' \) | while read -r f; do
    b=$(basename "$f")
    case $b in *.log) b=${b%.log}.txt ;; esac
    cp "$f" "$dest/$s/$b"
  done
  echo "results: $dest/$s/ ($(ls "$dest/$s" | wc -l) files)"
done
echo "next: git add test/fixtures $dest && git commit"
