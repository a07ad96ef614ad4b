// The steps both native build scripts share (native/scripts/build.js for the engine addon,
// native/ucx/build.js for the UCX agent): find the toolchain, check the npm packages cmake-js
// needs, and run an offline cmake-js build of one directory. Each script keeps its own
// messages and extra checks; this module only removes the copy.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';

/** Print `[tandem <tag>] message` to stderr and exit 1. */
export function failer(tag) {
  return (message) => {
    console.error(`\n[tandem ${tag}] ${message}\n`);
    process.exit(1);
  };
}

export function have(cmd, args = ['--version']) {
  return spawnSync(cmd, args, { stdio: 'ignore' }).status === 0;
}

/** $CXX, else the first of c++, g++, clang++ that runs; fails with `noCxx`, `noCmake`. */
export function checkToolchain(fail, { noCxx, noCmake }) {
  const cxx = process.env.CXX ?? ['c++', 'g++', 'clang++'].find((c) => have(c));
  if (cxx === undefined || !have(cxx)) fail(noCxx);
  if (!have('cmake')) fail(noCmake);
  return cxx;
}

/**
 * Check the npm packages, then build `dir` into `dir/build` with cmake-js and print where
 * `artifact` landed. Env: TANDEM_NATIVE_JOBS (default min(defaultJobs, cores)),
 * TANDEM_NATIVE_DEBUG=1 for a Debug build, TANDEM_NATIVE_BUILD_ROOT=DIR to build into
 * DIR/<tag> instead (scripts/device/pack.sh builds a portable copy there without touching
 * the development build). A CMAKE_CXX_COMPILER is passed only when $CXX is unset (cmake
 * reads $CXX itself).
 */
export async function buildWithCmakeJs({ tag, fail, dir, artifact, cxx, defaultJobs, cMakeOptions = {} }) {
  const require = createRequire(join(dir, 'package.json'));
  for (const pkg of ['cmake-js', 'node-api-headers', 'node-addon-api']) {
    try {
      require.resolve(pkg);
    } catch {
      fail(`the npm package '${pkg}' is missing: run \`npm install\` first`);
    }
  }

  const jobs = Number(process.env.TANDEM_NATIVE_JOBS ?? Math.min(defaultJobs, availableParallelism()));
  const debug = process.env.TANDEM_NATIVE_DEBUG === '1';
  const options = { ...cMakeOptions };
  if (process.env.CXX === undefined) options.CMAKE_CXX_COMPILER = cxx;

  const { BuildSystem } = require('cmake-js');
  const outDir = process.env.TANDEM_NATIVE_BUILD_ROOT ? join(process.env.TANDEM_NATIVE_BUILD_ROOT, tag) : join(dir, 'build');
  const build = new BuildSystem({
    directory: dir,
    out: outDir,
    debug,
    parallel: jobs,
    cMakeOptions: options,
    log: true,
  });

  const started = Date.now();
  try {
    await build.build();
  } catch (err) {
    fail(`build failed: ${err instanceof Error ? err.message : String(err)}\nSee the compiler output above.`);
  }
  const out = join(outDir, debug ? 'Debug' : 'Release', artifact);
  console.log(`[tandem ${tag}] built ${out} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}
