#!/usr/bin/env node
// Builds native/build/Release/tandem_native.node with cmake-js, offline: native/package.json
// sets binary.napi_versions, so cmake-js takes headers from node-api-headers and
// node-addon-api instead of downloading Node's. Called by `npm run build:native` (and from
// the package's install/prepare hook).
//
// Environment:
//   TANDEM_SKIP_NATIVE=1   skip the build (prints why) and exit 0
//   TANDEM_MARCH=...       -march value (default: native; e.g. x86-64-v2 for portable binaries)
//   TANDEM_NATIVE_JOBS=N   parallel compile jobs (default: min(4, cores))
//   TANDEM_NATIVE_DEBUG=1  Debug build
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const nativeDir = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(join(nativeDir, 'package.json'));

function fail(message) {
  console.error(`\n[tandem native] ${message}\n`);
  process.exit(1);
}

function have(cmd, args = ['--version']) {
  const r = spawnSync(cmd, args, { stdio: 'ignore' });
  return r.status === 0;
}

if (process.env.TANDEM_SKIP_NATIVE === '1') {
  console.log('[tandem native] TANDEM_SKIP_NATIVE=1: skipping the native build (the mocker engine still works)');
  process.exit(0);
}

const cxx = process.env.CXX ?? ['c++', 'g++', 'clang++'].find((c) => have(c));
if (cxx === undefined || !have(cxx)) {
  fail(
    'no C++ compiler found (tried $CXX, c++, g++, clang++). Install one, e.g. `apt-get install build-essential`,\n' +
      'then run `npm run build:native`. Set TANDEM_SKIP_NATIVE=1 to install without the native engine.',
  );
}
if (!have('cmake')) {
  fail(
    'cmake not found. Install cmake >= 3.18 (e.g. `apt-get install cmake`), then run `npm run build:native`.\n' +
      'Set TANDEM_SKIP_NATIVE=1 to install without the native engine.',
  );
}
for (const pkg of ['cmake-js', 'node-api-headers', 'node-addon-api']) {
  try {
    require.resolve(pkg);
  } catch {
    fail(`the npm package '${pkg}' is missing: run \`npm install\` first`);
  }
}

const jobs = Number(process.env.TANDEM_NATIVE_JOBS ?? Math.min(4, availableParallelism()));
const debug = process.env.TANDEM_NATIVE_DEBUG === '1';
const cMakeOptions = { TANDEM_MARCH: process.env.TANDEM_MARCH ?? 'native' };
if (process.env.CXX === undefined) cMakeOptions.CMAKE_CXX_COMPILER = cxx;

const { BuildSystem } = require('cmake-js');
const build = new BuildSystem({
  directory: nativeDir,
  out: join(nativeDir, 'build'),
  debug,
  parallel: jobs,
  cMakeOptions,
  log: true,
});

const started = Date.now();
try {
  await build.build();
} catch (err) {
  fail(`build failed: ${err instanceof Error ? err.message : String(err)}\nSee the compiler output above.`);
}
const out = join(nativeDir, 'build', debug ? 'Debug' : 'Release', 'tandem_native.node');
console.log(`[tandem native] built ${out} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
