#!/usr/bin/env bash
# The native test binaries under UndefinedBehaviorSanitizer: misaligned loads, out-of-bounds
# array indexing, overflowing signed arithmetic and shifts, bad float-to-int casts, null
# dereferences. Any finding stops the binary with its file and line (-fno-sanitize-recover).
# The SIMT harness runs the kernels as host code, so this also covers the kernels' indexing
# and their 16-byte vector accesses, which a GPU would fault on when misaligned.
#
# Every build already traps on a misaligned access in the SIMT kernel units
# (TANDEM_SIMT_ALIGN_TRAP in CMakeLists.txt); this script turns the trap off, so that the
# sanitizer's report gives the file and line, and checks the rest.
# By hand, not in CI (a separate build: ~10 minutes on 2 cores):
#   bash native/scripts/ubsan-check.sh            # build into native/build/ubsan, run everything
#   TANDEM_UBSAN_BUILD=/tmp/u bash native/scripts/ubsan-check.sh
# Runs: tandem_native_test on cpu and simt (default, --fp8, --spec, --quick-moe), the GPU
# kernel suites on simt, and every golden fixture on cpu and simt (models from make-tiny).
set -euo pipefail
native=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$native/.." && pwd)
build=${TANDEM_UBSAN_BUILD:-$native/build/ubsan}
checks="alignment,bounds,shift,signed-integer-overflow,null,vla-bound,float-cast-overflow"
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)

echo "[ubsan] configuring $build (-fsanitize=$checks)"
cmake -S "$native" -B "$build" "${generator[@]}" -DTANDEM_CUDA=OFF -DTANDEM_SIMT_ALIGN_TRAP=OFF -DTANDEM_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CXX_FLAGS=-fsanitize=$checks -fno-sanitize-recover=all -g1" > "$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
echo "[ubsan] building the test binaries (minutes)"
cmake --build "$build" --target tandem_native_test tandem_gpu_kernel_test -j "$(nproc)" > "$build.build.log" 2>&1 ||
  { tail -40 "$build.build.log"; exit 1; }

failed=0
run() {  # label, then the command
  local label=$1
  shift
  local out
  if out=$("$@" 2>&1) && ! grep -q "runtime error" <<< "$out"; then
    echo "[ubsan] ok    $label: $(grep -Eo '[0-9]+ checks, [0-9]+ failures' <<< "$out" | tail -1)"
  else
    echo "[ubsan] FAIL  $label"
    grep -E "runtime error|FAIL" <<< "$out" | head -5
    failed=1
  fi
}

for device in cpu simt; do
  for mode in "" --fp8 --spec --quick-moe; do
    run "tandem_native_test $mode on $device" env TANDEM_TEST_DEVICE=$device "$build/tandem_native_test" $mode
  done
done
run "tandem_gpu_kernel_test on simt" env TANDEM_TEST_DEVICE=simt "$build/tandem_gpu_kernel_test"

models=$(mktemp -d)
trap 'rm -rf "$models"' EXIT
for fixture in "$repo"/test/fixtures/goldens/*.json; do
  label=$(basename "$fixture" .json)
  make_tiny=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).make_tiny ?? "")' "$fixture")
  [[ $make_tiny == "runtime model make-tiny "* ]] || continue
  read -r -a args <<< "${make_tiny#runtime }"
  for i in "${!args[@]}"; do [[ ${args[$i]} == DIR ]] && args[$i]=$models/$label; done
  node "$repo/bin/runtime.js" "${args[@]}" > /dev/null
  for device in cpu simt; do
    run "golden $label on $device" env TANDEM_TEST_DEVICE=$device "$build/tandem_native_test" --golden-only "$models/$label" "$fixture"
  done
done
exit $failed
