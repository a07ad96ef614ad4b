#!/bin/sh
# Regenerates the PEFT-applied goldens under test/fixtures/lora-goldens/ (needs torch,
# transformers and peft: the GPU machine has them). Run from the repository root.
# TANDEM_LORA_GOLDENS_OUT (default test/fixtures/lora-goldens), PYTHON (default /usr/bin/python3)
# and TANDEM_RUNTIME (default `node bin/runtime.js`) let scripts/device/vendor-goldens-check.sh
# run it from an unpacked device bundle and collect the fixtures under $OUT.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
out=${TANDEM_LORA_GOLDENS_OUT:-test/fixtures/lora-goldens}
python=${PYTHON:-/usr/bin/python3}
runtime=${TANDEM_RUNTIME:-node bin/runtime.js}
mkdir -p "$out"
for spec in "llama 21" "qwen2 22" "qwen3 23"; do
  set -- $spec
  arch=$1 seed=$2
  dir="$tmp/$arch"
  cmd="runtime model make-tiny --arch $arch --out DIR --dtype f32 --seed $seed --lora 1 --lora-rank 8"
  $runtime model make-tiny --arch "$arch" --out "$dir" --dtype f32 --seed "$seed" --lora 1 --lora-rank 8
  "$python" "$here/make_lora_goldens.py" --model "$dir" --adapter "$dir/loras/lora-0" \
    --label "$arch-lora" --make-tiny "$cmd" --out "$out/$arch-lora.json"
done
ls -l "$out"
