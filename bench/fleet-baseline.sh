#!/usr/bin/env bash
# Fleet baseline (issue 4): build if needed, then run bench/fleet-baseline.ts with any flags given,
# e.g.  bench/fleet-baseline.sh --quick
#       bench/fleet-baseline.sh --router-mode kv --saturation-from bench/results/fleet-baseline/rr-summary.json
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f dist/cli/main.js ] || npm run build
exec node --import tsx bench/fleet-baseline.ts "$@"
