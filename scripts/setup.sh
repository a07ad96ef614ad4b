#!/usr/bin/env bash
# One-step setup for a fresh Debian/Ubuntu machine with Node 20+: system packages (etcd, NATS,
# UCX, cmake, a C++ compiler), npm dependencies, the TypeScript build and the native addons.
#
# Quiet: one short line per step, with its time. What the tools print (npm, tsc, cmake, ninja,
# nvcc) goes to a log per step, shown (its last lines, and where the whole log is) only when that
# step fails. Fast: npm installs the dependencies without running the package's own `prepare`
# (which would build everything again, serially and aloud); then the TypeScript build and the two
# native addons build at once. Idempotent: each step is skipped when its inputs are unchanged
# (npm: package-lock.json against what node_modules holds; TypeScript: `tsc -b` with its build
# info in dist/; native addons: a hash of their inputs stamped in their build directories, see
# scripts/setup-state.mjs).
#
#   bash scripts/setup.sh           set up, skipping what is up to date
#   bash scripts/setup.sh --clean   rebuild everything: remove dist/ and the native stamps first
#                                   (what a fresh clone does anyway; .ci/run uses it)
#   bash scripts/setup.sh --verbose  also print every step's log after it (a failure always does)
#   TANDEM_SETUP_SKIP_SYSTEM=1      leave system packages alone (you manage them; test/setup uses it)
set -euo pipefail
cd "$(dirname "$0")/.."

clean=0
verbose=0
for arg in "$@"; do
  case "$arg" in
    --clean) clean=1 ;;
    --verbose) verbose=1 ;;
    *) echo "setup: unknown option $arg (usage: bash scripts/setup.sh [--clean] [--verbose])" >&2; exit 2 ;;
  esac
done

say() { printf 'setup: %s\n' "$*"; }
now_s() { date +%s; }
setup_started=$(now_s)
# "42 s", "3 min 05 s"
took() {
  local s=$(( $(now_s) - $1 ))
  if [ "$s" -ge 60 ]; then printf '%d min %02d s' $(( s / 60 )) $(( s % 60 )); else printf '%d s' "$s"; fi
}

need_node_major=20
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt "$need_node_major" ]; then
  echo "setup: Node.js >= $need_node_major is required (found: $(node --version 2>/dev/null || echo none))" >&2
  exit 1
fi

# Every step's output goes here; removed when setup succeeds, kept (and named) when it fails.
logs=$(mktemp -d "${TMPDIR:-/tmp}/tandem-setup.XXXXXX")
cleanup() { [ -n "${keep_logs:-}" ] || rm -rf "$logs"; }
trap cleanup EXIT

# A step failed: its last lines, where its whole log is, exit 1.
failed() {
  local name=$1 log=$2
  keep_logs=1
  echo "setup: $name failed; the last lines of its output:" >&2
  tail -n 40 "$log" | sed 's/^/  | /' >&2
  echo "setup: whole log: $log" >&2
  exit 1
}

# Run a step with its output in $logs/<name>.log; print it only on failure (or with --verbose).
quietly() {
  local name=$1
  shift
  local log="$logs/$name.log"
  "$@" >"$log" 2>&1 || failed "$name" "$log"
  [ "$verbose" = 0 ] || sed "s/^/  [$name] /" "$log"
}

# Install what is missing of the system packages Tandem builds and tests with.
system_packages() {
  local missing=()
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
      say "no kubectl (and no apt package for it): test/deploy needs kubectl >= 1.24, see deploy/README.md"
    fi
  fi
  [ "${#missing[@]}" -gt 0 ] || return 0
  local started sudo=
  started=$(now_s)
  say "installing system packages: ${missing[*]}"
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  quietly apt-update $sudo apt-get update -qq
  quietly apt-install env DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
  say "system packages installed in $(took "$started")"
}
[ "${TANDEM_SETUP_SKIP_SYSTEM:-}" = 1 ] || system_packages

if [ "$clean" = 1 ]; then
  rm -rf dist native/build/.tandem-inputs native/ucx/build/.tandem-inputs
fi

if [ ! -d node_modules ] || ! node scripts/setup-state.mjs check npm; then
  started=$(now_s)
  say "installing npm dependencies"
  # --ignore-scripts: the package's `prepare` would build TypeScript and both addons here, one
  # after the other and aloud; they are built below, at once and quietly. No dependency needs
  # its install script: esbuild and msgpackr-extract take their binaries from their optional
  # platform packages, protobufjs's only checks versions.
  quietly npm npm install --ignore-scripts --no-audit --no-fund --loglevel=error
  say "npm dependencies installed in $(took "$started")"
fi

# The builds, at once: TypeScript (one core) beside the two cmake builds (their own -j; the
# engine's nvcc runs while tsc and the UCX agent compile). Each writes its own log.
declare -A pid label began
order=()
start_build() {
  local name=$1 what=$2
  shift 2
  order+=("$name")
  label[$name]=$what
  began[$name]=$(now_s)
  "$@" >"$logs/$name.log" 2>&1 &
  pid[$name]=$!
}
# One build ended with `status`: a failure stops the others and shows its log; else record it.
finished() {
  local name=$1 status=$2
  unset "pid[$name]"
  if [ "$status" -ne 0 ]; then
    for other in "${pid[@]}"; do kill "$other" 2>/dev/null || true; done
    failed "${label[$name]} build" "$logs/$name.log"
  fi
  [ "$verbose" = 0 ] || sed "s/^/  [$name] /" "$logs/$name.log"
  [ "$name" = tsc ] || node scripts/setup-state.mjs record "$name"
  say "${label[$name]} built in $(took "${began[$name]}")"
}
# Incremental: `tsc -b` re-checks and re-emits only what changed since dist/.tsbuildinfo.
start_build tsc "TypeScript" npm run --silent build
# An addon rebuilds only when the hash of its inputs differs from its stamp.
for addon in "native native/scripts/build.js native engine" "ucx native/ucx/build.js UCX agent"; do
  read -r name script what <<<"$addon"
  if node scripts/setup-state.mjs check "$name"; then
    say "$what up to date"
  else
    start_build "$name" "$what" node "$script"
  fi
done
building=()
for name in "${order[@]}"; do building+=("${label[$name]}"); done
say "building $(IFS=,; echo "${building[*]}" | sed 's/,/, /g') at once"
if [ "${BASH_VERSINFO[0]}" -gt 5 ] || { [ "${BASH_VERSINFO[0]}" -eq 5 ] && [ "${BASH_VERSINFO[1]}" -ge 1 ]; }; then
  # Report each build as it ends (bash >= 5.1: `wait -n -p`).
  while [ "${#pid[@]}" -gt 0 ]; do
    status=0
    wait -n -p done_pid "${pid[@]}" || status=$?
    for name in "${!pid[@]}"; do
      if [ "${pid[$name]}" = "$done_pid" ]; then finished "$name" "$status"; fi
    done
  done
else
  for name in "${order[@]}"; do
    status=0
    wait "${pid[$name]}" || status=$?
    finished "$name" "$status"
  done
fi
say "ready in $(took "$setup_started")"
