#!/usr/bin/env bash
# Builds the bundle a GPU machine (which has no Node.js) runs scripts/device/cuda-check.sh from:
#   .device-bundle/bundle.tar.xz   node (this machine's binary), production node_modules plus
#                                  ajv for the structured-output check, dist/, the native addons
#                                  and the C++ test and bench binaries built for x86-64-v3 with
#                                  the CUDA target (sm_80, sm_90a), the golden fixtures, the
#                                  schema corpus as JSON, and scripts/
# It must stay under 64 MiB (what the device tool carries, the repository included); the script
# fails if it does not. Its own build goes to .device-build/ (never carried); the development
# build under native/build is not touched.
#
#   bash scripts/device/pack.sh            then, on the GPU machine (the repo is the working dir):
#   bash scripts/device/cuda-check.sh      with carry [".device-bundle"]
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
out="$root/.device-bundle"  # what a device call carries: the bundle and the build's log, nothing else
build="$root/.device-build"  # the portable build, kept between packs (hundreds of MB: never carried)
stage="$out/stage"
limit_mib=${TANDEM_BUNDLE_LIMIT_MIB:-56}
rm -rf "$stage"
mkdir -p "$stage"
say() { echo "pack: $*"; }

command -v nvcc >/dev/null 2>&1 || { echo "pack: nvcc not found: the bundle needs the CUDA target" >&2; exit 1; }
[ -d node_modules ] || { echo "pack: run 'bash scripts/setup.sh' first" >&2; exit 1; }

say "TypeScript build"
npm run --silent build

say "native build for x86-64-v3 with the CUDA target (into $build)"
# An older pack kept its build inside the carried directory (hundreds of MB past the carry
# limit); CMake's cache names its directory, so it cannot move: start again in $build.
rm -rf "$out/build"
TANDEM_MARCH=x86-64-v3 TANDEM_NATIVE_BUILD_ROOT="$build" node native/scripts/build.js >"$out/native-build.log" 2>&1 \
  || { tail -40 "$out/native-build.log" >&2; exit 1; }
TANDEM_NATIVE_BUILD_ROOT="$build" node native/ucx/build.js >>"$out/native-build.log" 2>&1 \
  || { tail -40 "$out/native-build.log" >&2; exit 1; }
# cuda_device.cc (only in a build with the CUDA target) carries this message.
grep -qa "no usable CUDA driver" "$build/native/Release/tandem_native.node" \
  || { echo "pack: the native build did not include the CUDA target (see $out/native-build.log)" >&2; exit 1; }

say "production node_modules (+ ajv, ajv-formats for the structured-output check)"
deps="$out/deps"
rm -rf "$deps"
mkdir -p "$deps"
cp package.json package-lock.json "$deps/"
(cd "$deps" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
# ajv is a dev dependency: copy it and what it needs from this checkout, each package as Node
# resolves it from its dependent (so a nested older version elsewhere cannot be picked up).
node -e "
  const { cpSync, existsSync } = require('node:fs');
  const { dirname, join } = require('node:path');
  const dest = '$deps/node_modules';
  const copy = (name, from) => {
    const dir = dirname(require.resolve(name + '/package.json', { paths: [from] }));
    if (!existsSync(join(dest, name))) cpSync(dir, join(dest, name), { recursive: true });
    const pkg = require(join(dir, 'package.json'));
    for (const dep of Object.keys(pkg.dependencies ?? {})) copy(dep, dir);
  };
  for (const name of ['ajv', 'ajv-formats']) copy(name, '$root');
"
# cmake-js and the addon headers are build-time only.
rm -rf "$deps/node_modules/cmake-js" "$deps/node_modules/node-api-headers" "$deps/node_modules/node-addon-api"

say "staging"
mkdir -p "$stage/node/bin" "$stage/native/build/Release" "$stage/native/ucx/build/Release" "$stage/test/fixtures" "$stage/native/lib"
cp "$(node -p process.execPath)" "$stage/node/bin/node"
cp -r dist bin package.json "$stage/"
cp -r "$deps/node_modules" "$stage/node_modules"
cp "$build/native/Release/tandem_native.node" "$stage/native/build/Release/"
for bin in tandem_native_test tandem_gpu_kernel_test tandem_gpu_bench tandem_kv_bench tandem_moe_bench tandem_fp8_bench; do
  cp "$build/native/$bin" "$stage/native/build/"
done
cp "$build/ucx/Release/tandem_ucx.node" "$stage/native/ucx/build/Release/"
cp -r test/fixtures/goldens "$stage/test/fixtures/"
mkdir -p "$stage/scripts"
cp -r scripts/device "$stage/scripts/"
node --import tsx -e "
  import('$root/test/grammar/schema-corpus.ts').then(({ SCHEMA_CORPUS }) => {
    require('node:fs').writeFileSync('$stage/scripts/device/schema-corpus.json', JSON.stringify(SCHEMA_CORPUS));
  });"
git rev-parse HEAD >"$stage/COMMIT" 2>/dev/null || true

say "compressing"
# One xz stream with a window wider than the binaries together: each test and bench binary links
# the same CUDA kernels (~40 MB of fatbins), and a match reaches back across them (7 MB for the
# binaries, where independent 24 MiB blocks of a multithreaded xz left 33 MB). Unpacking needs
# 192 MiB of memory.
tar -C "$stage" -cf - . | xz -T1 -6 --lzma2=preset=6,dict=192MiB >"$out/bundle.tar.xz"
rm -rf "$stage" "$deps"
size=$(stat -c %s "$out/bundle.tar.xz")
carried=$(du -sb "$out" | cut -f1)
tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
say "bundle.tar.xz: $((size / 1048576)) MiB ($((carried / 1048576)) MiB carried with .device-bundle); tracked files $((tracked / 1048576)) MiB (the device tool carries both, 64 MiB at most)"
if [ $((size / 1048576)) -ge "$limit_mib" ]; then
  echo "pack: the bundle is over ${limit_mib} MiB" >&2
  exit 1
fi
if [ $(((carried + tracked) / 1048576)) -ge 63 ]; then
  echo "pack: .device-bundle and the tracked files come to $(((carried + tracked) / 1048576)) MiB: the device tool carries 64 MiB at most" >&2
  exit 1
fi
