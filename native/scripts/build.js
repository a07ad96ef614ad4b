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
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildWithCmakeJs, checkToolchain, failer } from './cmake-js-build.js';

const nativeDir = join(dirname(fileURLToPath(import.meta.url)), '..');
const fail = failer('native');

if (process.env.TANDEM_SKIP_NATIVE === '1') {
  console.log('[tandem native] TANDEM_SKIP_NATIVE=1: skipping the native build (the mocker engine still works)');
  process.exit(0);
}

const cxx = checkToolchain(fail, {
  noCxx:
    'no C++ compiler found (tried $CXX, c++, g++, clang++). Install one, e.g. `apt-get install build-essential`,\n' +
    'then run `npm run build:native`. Set TANDEM_SKIP_NATIVE=1 to install without the native engine.',
  noCmake:
    'cmake not found. Install cmake >= 3.18 (e.g. `apt-get install cmake`), then run `npm run build:native`.\n' +
    'Set TANDEM_SKIP_NATIVE=1 to install without the native engine.',
});

await buildWithCmakeJs({
  tag: 'native',
  fail,
  dir: nativeDir,
  artifact: 'tandem_native.node',
  cxx,
  defaultJobs: 4,
  cMakeOptions: { TANDEM_MARCH: process.env.TANDEM_MARCH ?? 'native' },
});
