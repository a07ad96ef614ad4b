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
# arch dtype seed [rope scaling]: the dense families, the mixtures of experts (issue 36) and a
# YaRN model.
for spec in "llama f32 11" "qwen2 f32 12" "qwen3 f32 13" "llama bf16 14" \
            "qwen3_moe f32 21" "mixtral f32 22" "qwen2_moe f32 23" "qwen3 f32 24 yarn" "mixtral bf16 25"; do
  set -- $spec
  arch=$1 dtype=$2 seed=$3 rope=${4:-}
  label="$arch-$dtype"
  extra=""
  if [ -n "$rope" ]; then
    label="$arch-$rope-$dtype"
    extra="--rope-scaling $rope"
  fi
  label=$(echo "$label" | tr _ -)
  dir="$tmp/$label"
  cmd="runtime model make-tiny --arch $arch --out DIR --dtype $dtype --seed $seed${extra:+ $extra}"
  make_tiny --arch "$arch" --out "$dir" --dtype "$dtype" --seed "$seed" $extra
  /usr/bin/python3 scripts/goldens/make_goldens.py --model "$dir" --label "$label" \
    --make-tiny "$cmd" --out "$out/$label.json"
done
ls -l "$out"

# Embedding goldens (issue 26): sentence-transformers on make-tiny embedding models, written to
# test/fixtures/embedding-goldens/. Only where sentence-transformers is installed (the GPU
# machine has it: scripts/device/embedding-goldens.sh); elsewhere this says what is missing.
emb_out=test/fixtures/embedding-goldens
if python3 -c 'import sentence_transformers, torch' 2>/dev/null; then
  mkdir -p "$emb_out"
  for spec in "mean 31" "last 32"; do
    set -- $spec
    pooling=$1 seed=$2
    dir="$tmp/qwen3-embed-$pooling"
    cmd="runtime model make-tiny --arch qwen3 --out DIR --dtype f32 --seed $seed --embedding $pooling"
    node bin/runtime.js model make-tiny --arch qwen3 --out "$dir" --dtype f32 --seed "$seed" --embedding "$pooling" >/dev/null
    python3 scripts/goldens/make_embedding_goldens.py --model "$dir" --label "qwen3-embed-$pooling" \
      --make-tiny "$cmd" --out "$emb_out/qwen3-embed-$pooling.json"
  done
  ls -l "$emb_out"
else
  echo "embedding goldens skipped: python3 cannot import sentence_transformers and torch here (pip install sentence-transformers, or run scripts/device/embedding-goldens.sh on the GPU machine)" >&2
fi
