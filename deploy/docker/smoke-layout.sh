#!/usr/bin/env bash
# Smoke test of the CPU image's final stage WITHOUT a container runtime (no registry is reachable
# from our machines, so the base images cannot be pulled): it lays out /app exactly as the
# Dockerfile's runtime stage does (package files, bin/, dist/, the two .node addons, node_modules
# pruned with `npm prune --omit=dev`), then, as the image's non-root uid 10001, generates the
# tiny model, starts a native-engine worker and a frontend from that tree with file discovery,
# and serves one completion. It proves what a pruned production tree can break (a runtime import
# of a dev dependency, an addon path, a file the build forgot) on this machine's Debian bookworm
# and Node 20, the image's base. It does not prove the apt layer or the base image itself.
#
#   npm run build && npm run build:native && bash deploy/docker/smoke-layout.sh
#
# Needs root (to switch to uid 10001) and about a minute.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
[ "$(id -u)" -eq 0 ] || { echo "smoke-layout: run as root (it switches to uid 10001 like the image)" >&2; exit 1; }
for f in dist/cli/main.js native/build/Release/tandem_native.node native/ucx/build/Release/tandem_ucx.node; do
  [ -e "$f" ] || { echo "smoke-layout: $f missing: run npm run build && npm run build:native" >&2; exit 1; }
done

work=$(mktemp -d /tmp/tandem-image-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
app=$work/app
chmod 755 "$work"
mkdir -p "$app/native/build/Release" "$app/native/ucx/build/Release" "$work/models" "$work/tmp"

# The runtime stage's COPY lines, in order.
cp package.json package-lock.json "$app/"
cp -a node_modules bin dist "$app/"
cp native/build/Release/tandem_native.node "$app/native/build/Release/"
cp native/ucx/build/Release/tandem_ucx.node "$app/native/ucx/build/Release/"
(cd "$app" && npm prune --omit=dev --offline --no-audit --no-fund --loglevel=error >/dev/null)
for dev in typescript vitest tsx; do
  [ ! -e "$app/node_modules/$dev" ] || { echo "smoke-layout: dev dependency $dev survived the prune" >&2; exit 1; }
done
chown -R 10001:10001 "$work/models" "$work/tmp"
chmod -R a+rX "$app"

node_bin=$(command -v node)
as_tandem() {
  setpriv --reuid=10001 --regid=10001 --clear-groups env -i PATH=/usr/bin:/bin HOME=/nonexistent TMPDIR="$work/tmp" \
    NODE_ENV=production TANDEM_LOG_FORMAT=json UCX_TLS=tcp "$@"
}
runtime() { as_tandem "$node_bin" "$app/bin/runtime.js" "$@"; }
# A server in the background: exec all the way down (subshell → setpriv → env → node), so $!
# is node's own pid and the cleanup's kill reaches it.
start_bg() {
  local log=$1
  shift
  ( exec setpriv --reuid=10001 --regid=10001 --clear-groups env -i PATH=/usr/bin:/bin HOME=/nonexistent TMPDIR="$work/tmp" \
      NODE_ENV=production TANDEM_LOG_FORMAT=json UCX_TLS=tcp "$node_bin" "$app/bin/runtime.js" "$@" ) >"$log" 2>&1 &
  pids+=($!)
}

echo "smoke-layout: pruned tree at $app ($(du -sh "$app/node_modules" | cut -f1) node_modules)"
runtime --help >/dev/null
runtime model make-tiny --arch llama --out "$work/models/tiny" --dtype f32 >/dev/null
as_tandem "$node_bin" -e "import('$app/dist/workers/kv-transfer/addon.js').then((m) => { m.loadUcxAddon(); })"
echo "smoke-layout: CLI, tiny model and UCX addon load as uid 10001"

disc=$work/tmp/discovery
start_bg "$work/worker.log" worker --engine native --device cpu --threads 1 --model "$work/models/tiny" --discovery-dir "$disc"
start_bg "$work/frontend.log" frontend --http-port 0 --host 127.0.0.1 --discovery-dir "$disc"

url=
for _ in $(seq 1 120); do
  url=$(grep -o 'frontend listening on http://[^ ]*' "$work/frontend.log" 2>/dev/null | head -1 | sed 's/.* //' || true)
  if [ -n "$url" ] && curl -fsS "$url/health" >/dev/null 2>&1; then break; fi
  url=
  sleep 1
done
if [ -z "$url" ]; then
  echo "smoke-layout: the frontend never became ready; logs:" >&2
  tail -20 "$work/worker.log" "$work/frontend.log" >&2
  exit 1
fi
body=$(curl -fsS "$url/v1/completions" -H 'content-type: application/json' \
  -d '{"model":"tiny","prompt":"hello","max_tokens":4}')
echo "$body" | grep -q '"choices"' || { echo "smoke-layout: unexpected answer: $body" >&2; exit 1; }
echo "smoke-layout: OK: native worker + frontend from the pruned tree served a completion"
