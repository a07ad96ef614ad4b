#!/bin/sh
# Regenerates the PEFT-applied goldens under test/fixtures/lora-goldens/ (needs torch,
# transformers and peft: the GPU machine has them). Run from the repository root.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=test/fixtures/lora-goldens
mkdir -p "$out"
for spec in "llama 21" "qwen2 22" "qwen3 23"; do
  set -- $spec
  arch=$1 seed=$2
  dir="$tmp/$arch"
  cmd="runtime model make-tiny --arch $arch --out DIR --dtype f32 --seed $seed --lora 1 --lora-rank 8"
  node bin/runtime.js model make-tiny --arch "$arch" --out "$dir" --dtype f32 --seed "$seed" --lora 1 --lora-rank 8
  /usr/bin/python3 scripts/goldens/make_lora_goldens.py --model "$dir" --adapter "$dir/loras/lora-0" \
    --label "$arch-lora" --make-tiny "$cmd" --out "$out/$arch-lora.json"
done
ls -l "$out"
