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
import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildWithCmakeJs, checkToolchain, failer, have } from '../scripts/cmake-js-build.js';

const ucxDir = dirname(fileURLToPath(import.meta.url));
const fail = failer('ucx');

if (process.env.TANDEM_SKIP_UCX === '1') {
  console.log('[tandem ucx] TANDEM_SKIP_UCX=1: skipping the UCX agent (disaggregated transfer unavailable)');
  process.exit(0);
}

const cxx = checkToolchain(fail, {
  noCxx: 'no C++ compiler found (tried $CXX, c++, g++, clang++). Install one, e.g. `apt-get install build-essential`.',
  noCmake: 'cmake not found. Install cmake >= 3.18 (e.g. `apt-get install cmake`).',
});
const ucxHeaders = ['/usr/include/ucp/api/ucp.h', '/usr/local/include/ucp/api/ucp.h'];
const pkgConfigUcx = have('pkg-config', ['--exists', 'ucx']);
if (!pkgConfigUcx && !ucxHeaders.some((p) => existsSync(p))) {
  fail(
    'UCX headers not found (no `pkg-config ucx`, no ucp/api/ucp.h). Install them with\n' +
      '`apt-get install libucx-dev` (and `ucx-utils` for ucx_info / ucx_perftest), then rerun\n' +
      '`node native/ucx/build.js`. Set TANDEM_SKIP_UCX=1 to build without the transfer agent.',
  );
}

await buildWithCmakeJs({ tag: 'ucx', fail, dir: ucxDir, artifact: 'tandem_ucx.node', cxx, defaultJobs: 2 });
