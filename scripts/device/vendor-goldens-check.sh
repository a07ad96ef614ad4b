#!/usr/bin/env bash
# run-all: order=20 budget=60
# Vendor goldens that only the GPU machine can make (it has torch, transformers, peft and
# sentence-transformers; CI does not), written under $OUT for committing (scripts/device/
# collect.sh copies them to test/fixtures/):
#   embedding  scripts/device/embedding-goldens.sh: sentence-transformers vectors for two tiny
#              qwen3 embedding models -> $OUT/embedding-goldens/*.json, and the pooling step on
#              cuda against the CPU backend (embed-check.mjs)
#   lora       scripts/goldens/regenerate-lora.sh: transformers + peft (unmerged LoRA) logits
#              and greedy tokens for three tiny adapters -> $OUT/lora-goldens/*.json
# Status to $OUT/summary.json, the log to $OUT/vendor-goldens-check.log. About 40 s (Python
# imports). On a machine without the packages (a simt dry run here) the steps are skipped.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
check_begin vendor-goldens-check embedding,lora

# 2 (make_lora_goldens.py) or 3 (make_embedding_goldens.py): a package is missing.
missing_ok() {  # name rc
  if [ "$device" = simt ] && { [ "$2" = 2 ] || [ "$2" = 3 ]; }; then
    skip_because "$1" "Python packages missing on this machine (a dry run)"
    return 77
  fi
  return "$2"
}
embedding() {
  (cd "$repo" && TANDEM_CHECK_UNPACKED="$bundle" TANDEM_CHECK_WORK="$work/embedding" bash scripts/device/embedding-goldens.sh) && return 0
  python3 -c 'import torch, sentence_transformers' 2>/dev/null && return 1
  missing_ok embedding 3
}
lora() {
  local rc
  (cd "$repo" && TANDEM_LORA_GOLDENS_OUT="$OUT/lora-goldens" PYTHON=python3 TANDEM_RUNTIME="node $bundle/bin/runtime.js" sh scripts/goldens/regenerate-lora.sh)
  rc=$?
  [ $rc = 0 ] || missing_ok lora $rc
}
bundle=$(pwd)
export bundle
export -f missing_ok embedding lora

step embedding 40 embedding
step lora 35 lora
check_end
