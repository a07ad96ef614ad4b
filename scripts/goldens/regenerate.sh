#!/bin/sh
# Regenerates every golden fixture under test/fixtures/goldens/ from make-tiny models.
# Run from the repository root: sh scripts/goldens/regenerate.sh
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=test/fixtures/goldens
mkdir -p "$out"
# scripts/goldens/make-tiny.ts makes the same makeTinyModel call as `runtime model make-tiny`.
make_tiny() { node --import tsx scripts/goldens/make-tiny.ts "$@"; }
for spec in "llama f32 11" "qwen2 f32 12" "qwen3 f32 13" "llama bf16 14"; do
  set -- $spec
  arch=$1 dtype=$2 seed=$3
  dir="$tmp/$arch-$dtype"
  cmd="runtime model make-tiny --arch $arch --out DIR --dtype $dtype --seed $seed"
  make_tiny --arch "$arch" --out "$dir" --dtype "$dtype" --seed "$seed"
  /usr/bin/python3 scripts/goldens/make_goldens.py --model "$dir" --label "$arch-$dtype" \
    --make-tiny "$cmd" --out "$out/$arch-$dtype.json"
done
ls -l "$out"
