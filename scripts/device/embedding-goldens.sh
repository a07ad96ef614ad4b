#!/usr/bin/env bash
# Embedding goldens on the GPU machine (it has sentence-transformers 6.0.1 and torch; this
# repository's CI machine does not). Run from the repository root with the bundle of
# scripts/device/pack.sh at .device-bundle/ (its node makes the tiny models). Writes the
# fixtures test/native/embedding-goldens.test.ts reads to $OUT/embedding-goldens/*.json and a
# one-line $OUT/embedding-goldens.json summary; commit the fixtures under
# test/fixtures/embedding-goldens/. Then embed-check.mjs runs the pooling step on cuda against
# the CPU backend (TANDEM_CHECK_DEVICE=simt for a dry run on the host). About 30 s.
set -uo pipefail
repo=$(pwd)
OUT=${OUT:-$repo/.device-out}
work=${TANDEM_CHECK_WORK:-/tmp/tandem-embed-goldens}
mkdir -p "$OUT/embedding-goldens"
rm -rf "$work" && mkdir -p "$work"
# The unpacked bundle: run-all.sh's (TANDEM_CHECK_UNPACKED), else ours.
bundle=${TANDEM_CHECK_UNPACKED:-$work/bundle}
if [ -z "${TANDEM_CHECK_UNPACKED:-}" ]; then
  mkdir -p "$bundle"
  tar -C "$bundle" -xJf "$repo/.device-bundle/bundle.tar.xz" || { echo "no bundle: run scripts/device/pack.sh first" >&2; exit 1; }
fi
export PATH="$bundle/node/bin:$PATH"
status=pass
for spec in "mean 31" "last 32"; do
  set -- $spec
  pooling=$1 seed=$2
  dir="$work/models/qwen3-embed-$pooling"
  (cd "$bundle" && node bin/runtime.js model make-tiny --arch qwen3 --out "$dir" --dtype f32 --seed "$seed" --embedding "$pooling") || status=fail
  python3 "$repo/scripts/goldens/make_embedding_goldens.py" --model "$dir" --label "qwen3-embed-$pooling" \
    --make-tiny "runtime model make-tiny --arch qwen3 --out DIR --dtype f32 --seed $seed --embedding $pooling" \
    --out "$OUT/embedding-goldens/qwen3-embed-$pooling.json" || status=fail
done
# The pooling step on the GPU against the CPU backend (unverified until this runs on one).
cuda=$(cd "$bundle" && node "$repo/scripts/device/embed-check.mjs" "$work/models/qwen3-embed-mean" "${TANDEM_CHECK_DEVICE:-cuda}") || status=fail
printf '{"status": "%s", "sentence_transformers": "%s", "cuda_embed": %s}\n' "$status" "$(python3 -c 'import sentence_transformers as s; print(s.__version__)' 2>/dev/null)" "${cuda:-null}" >"$OUT/embedding-goldens.json"
cat "$OUT/embedding-goldens.json"
[ "$status" = pass ]
