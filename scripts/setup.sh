#!/usr/bin/env bash
# One-step setup for a fresh Debian/Ubuntu machine with Node 20+: system packages (etcd, NATS,
# UCX, cmake, a C++ compiler), npm dependencies, the TypeScript build and the native addon.
# Idempotent and quiet when everything is already in place.
set -euo pipefail
cd "$(dirname "$0")/.."

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

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: installing npm dependencies"
  npm install --no-audit --no-fund --loglevel=error
else
  # Already installed: rebuild, and show the compilers' output only if something fails.
  log=$(mktemp)
  if ! { npm run --silent build && npm run --silent build:native; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "setup: the build failed (output above)" >&2
    exit 1
  fi
  rm -f "$log"
fi
echo "setup: ready"
