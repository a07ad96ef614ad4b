#!/usr/bin/env node
// Builds native/ucx/build/Release/tandem_ucx.node (and the ucx_agent_test binary) with
// cmake-js (`-d native/ucx`), offline: native/ucx/package.json sets binary.napi_versions, so
// cmake-js takes headers from node-api-headers and node-addon-api instead of downloading
// Node's. Separate from the engine addon (native/scripts/build.js).
//
// Environment:
//   TANDEM_SKIP_UCX=1        skip the build (prints why) and exit 0
//   TANDEM_NATIVE_JOBS=N     parallel compile jobs (default: min(2, cores))
//   TANDEM_NATIVE_DEBUG=1    Debug build
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ucxDir = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(ucxDir, 'package.json'));

function fail(message) {
  console.error(`\n[tandem ucx] ${message}\n`);
  process.exit(1);
}

function have(cmd, args = ['--version']) {
  return spawnSync(cmd, args, { stdio: 'ignore' }).status === 0;
}

if (process.env.TANDEM_SKIP_UCX === '1') {
  console.log('[tandem ucx] TANDEM_SKIP_UCX=1: skipping the UCX agent (disaggregated transfer unavailable)');
  process.exit(0);
}

const cxx = process.env.CXX ?? ['c++', 'g++', 'clang++'].find((c) => have(c));
if (cxx === undefined || !have(cxx)) {
  fail('no C++ compiler found (tried $CXX, c++, g++, clang++). Install one, e.g. `apt-get install build-essential`.');
}
if (!have('cmake')) fail('cmake not found. Install cmake >= 3.18 (e.g. `apt-get install cmake`).');
const ucxHeaders = ['/usr/include/ucp/api/ucp.h', '/usr/local/include/ucp/api/ucp.h'];
const pkgConfigUcx = have('pkg-config', ['--exists', 'ucx']);
if (!pkgConfigUcx && !ucxHeaders.some((p) => existsSync(p))) {
  fail(
    'UCX headers not found (no `pkg-config ucx`, no ucp/api/ucp.h). Install them with\n' +
      '`apt-get install libucx-dev` (and `ucx-utils` for ucx_info / ucx_perftest), then rerun\n' +
      '`node native/ucx/build.js`. Set TANDEM_SKIP_UCX=1 to build without the transfer agent.',
  );
}
for (const pkg of ['cmake-js', 'node-api-headers', 'node-addon-api']) {
  try {
    require.resolve(pkg);
  } catch {
    fail(`the npm package '${pkg}' is missing: run \`npm install\` first`);
  }
}

const jobs = Number(process.env.TANDEM_NATIVE_JOBS ?? Math.min(2, availableParallelism()));
const debug = process.env.TANDEM_NATIVE_DEBUG === '1';
const cMakeOptions = {};
if (process.env.CXX === undefined) cMakeOptions.CMAKE_CXX_COMPILER = cxx;

const { BuildSystem } = require('cmake-js');
const build = new BuildSystem({
  directory: ucxDir,
  out: join(ucxDir, 'build'),
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
const out = join(ucxDir, 'build', debug ? 'Debug' : 'Release', 'tandem_ucx.node');
console.log(`[tandem ucx] built ${out} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
