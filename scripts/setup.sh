#!/usr/bin/env bash
# One-step setup for a fresh Debian/Ubuntu machine with Node 20+: system packages (etcd, NATS,
# UCX, cmake, a C++ compiler), npm dependencies, the TypeScript build and the native addon.
# Idempotent, quiet and quick when everything is already in place: each step is skipped when
# its inputs are unchanged (npm: package-lock.json against what node_modules holds; TypeScript:
# `tsc -b` with its build info in dist/; native addons: a hash of their inputs stamped in their
# build directories, see scripts/setup-state.mjs).
#
#   bash scripts/setup.sh           set up, skipping what is up to date
#   bash scripts/setup.sh --clean   rebuild everything: remove dist/ and the native stamps first
#                                   (what a fresh clone does anyway; .ci/run uses it)
#   TANDEM_SETUP_TIMES=1            print each step's time
set -euo pipefail
cd "$(dirname "$0")/.."

clean=0
for arg in "$@"; do
  case "$arg" in
    --clean) clean=1 ;;
    *) echo "setup: unknown option $arg (usage: bash scripts/setup.sh [--clean])" >&2; exit 2 ;;
  esac
done

step_started=$(date +%s%N)
step_done() {
  if [ "${TANDEM_SETUP_TIMES:-}" = 1 ]; then
    local now
    now=$(date +%s%N)
    printf 'setup: %-8s %6d ms\n' "$1" $(( (now - step_started) / 1000000 ))
    step_started=$now
  fi
}

need_node_major=20
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt "$need_node_major" ]; then
  echo "setup: Node.js >= $need_node_major is required (found: $(node --version 2>/dev/null || echo none))" >&2
  exit 1
fi

missing=()
command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ] || missing+=(etcd-server)
command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || missing+=(nats-server)
[ -f /usr/include/ucp/api/ucp.h ] || missing+=(libucx-dev)
command -v ucx_perftest >/dev/null 2>&1 || missing+=(ucx-utils)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
# The dashboard's tests drive Debian's chromium through playwright-core (no browser download).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# kubectl (kustomize built in) renders deploy/k8s for test/deploy. The `kubectl` package comes
# from the Kubernetes apt repository; Debian's own `kubernetes-client` (1.20) is too old for
# kustomize components, so without a candidate only say so (the rest of setup still works).
if ! command -v kubectl >/dev/null 2>&1; then
  if apt-cache policy kubectl 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    missing+=(kubectl)
  else
    echo "setup: kubectl not found and no apt package for it: test/deploy needs kubectl >= 1.24 (see deploy/README.md)" >&2
  fi
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing system packages: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
  else
    SUDO=
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

step_done apt

if [ "$clean" = 1 ]; then
  rm -rf dist native/build/.tandem-inputs native/ucx/build/.tandem-inputs
fi

# Run a build step with its output hidden unless it fails.
quietly() {
  local log
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "setup: $* failed (output above)" >&2
    exit 1
  fi
  rm -f "$log"
}

if [ ! -d node_modules ] || ! node scripts/setup-state.mjs check npm; then
  # npm install runs the package's prepare hook, which builds TypeScript and both addons.
  echo "setup: installing npm dependencies"
  npm install --no-audit --no-fund --loglevel=error
  step_done npm
  node scripts/setup-state.mjs record native
  node scripts/setup-state.mjs record ucx
else
  step_done npm
  # Incremental: `tsc -b` re-checks and re-emits only what changed since dist/.tsbuildinfo.
  quietly npm run --silent build
  step_done tsc
  # An addon rebuilds only when the hash of its inputs differs from its stamp.
  for addon in "native native/scripts/build.js" "ucx native/ucx/build.js"; do
    set -- $addon
    if ! node scripts/setup-state.mjs check "$1"; then
      quietly node "$2"
      node scripts/setup-state.mjs record "$1"
    fi
    step_done "$1"
  done
fi
echo "setup: ready"
