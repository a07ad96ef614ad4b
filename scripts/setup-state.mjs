#!/usr/bin/env node
// What scripts/setup.sh may skip on a re-run. Plain Node (no dependencies, no build), because it
// runs before anything is installed or compiled.
//
//   node scripts/setup-state.mjs check npm|native|ucx    exit 0: up to date, 10: (re)build it
//   node scripts/setup-state.mjs record native|ucx       after a successful build
//
// npm: node_modules/.package-lock.json is npm's own record of what is installed; the install is
// current when every package of package-lock.json is there at the same version and integrity
// (optional packages for other platforms are never installed, so their absence is no reason).
// native, ucx: a stamp in the build directory holds a hash of every input that cmake-js would
// see (the sources, the CMake files, the build scripts, the toolchain binaries, the environment
// variables the builds read). A build directory without its stamp, or without its addon, is
// stale, so a clean clone (no build directory) always builds, and so does `--clean`.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, realpathSync, statSync, writeFileSync } from 'node:fs';
import { delimiter, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const STAMP = '.tandem-inputs';
const SKIP_DIRS = new Set(['build', 'node_modules', '.git']);

/** True when node_modules holds exactly what `lockText` (package-lock.json) asks for. */
export function npmUpToDate(lockText, hiddenLockText) {
  if (hiddenLockText === undefined) return false;
  let lock, hidden;
  try {
    lock = JSON.parse(lockText);
    hidden = JSON.parse(hiddenLockText);
  } catch {
    return false;
  }
  const installed = hidden.packages ?? {};
  for (const [path, want] of Object.entries(lock.packages ?? {})) {
    if (path === '' || want.link) continue;
    const have = installed[path];
    if (have === undefined) {
      if (want.optional) continue;
      return false;
    }
    if (have.version !== want.version || have.integrity !== want.integrity) return false;
  }
  return true;
}

/** Every file under `dir` (sorted, relative to `root`), skipping build outputs. */
function filesUnder(root, dir) {
  const out = [];
  const walk = (d) => {
    if (!existsSync(d)) return;
    for (const entry of readdirSync(d, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const p = join(d, entry.name);
      if (entry.isDirectory()) {
        if (!SKIP_DIRS.has(entry.name)) walk(p);
      } else if (entry.isFile()) out.push(relative(root, p));
    }
  };
  walk(dir);
  return out;
}

/** The first `name` on PATH, resolved through links, with its size and mtime: a new toolchain is a new input. */
function toolIdentity(name, path = process.env.PATH ?? '') {
  for (const dir of path.split(delimiter)) {
    if (!dir) continue;
    const p = join(dir, name);
    try {
      const real = realpathSync(p);
      const s = statSync(real);
      if (s.isFile()) return `${name}=${real}:${s.size}:${Math.trunc(s.mtimeMs)}`;
    } catch {
      // not in this PATH entry
    }
  }
  return `${name}=none`;
}

/**
 * The inputs of one native build: `inputs` are files or folders relative to `root`, `tools`
 * binaries looked up on PATH, `env` environment variables. Returns a sha256 over all of them.
 */
export function inputsHash({ root, inputs, tools = [], env = [], environ = process.env }) {
  const h = createHash('sha256');
  for (const input of inputs) {
    const abs = resolve(root, input);
    const files = existsSync(abs) && statSync(abs).isDirectory() ? filesUnder(root, abs) : [relative(root, abs)];
    for (const f of files) {
      h.update(`file ${f}\0`);
      const p = join(root, f);
      h.update(existsSync(p) ? readFileSync(p) : Buffer.from('<missing>'));
      h.update('\0');
    }
  }
  for (const t of tools) h.update(`tool ${toolIdentity(t, environ.PATH)}\0`);
  for (const e of env) h.update(`env ${e}=${environ[e] ?? '<unset>'}\0`);
  h.update(`napi ${process.versions.napi}\0`);
  return h.digest('hex');
}

/** The engine addon (native/scripts/build.js) and the UCX agent (native/ucx/build.js). */
export function nativeTargets(root) {
  const common = {
    tools: ['cmake', 'ninja', 'make', 'c++', 'g++', 'clang++'],
    env: ['CXX', 'CXXFLAGS', 'TANDEM_NATIVE_DEBUG'],
  };
  return {
    native: {
      buildDir: join(root, 'native/build'),
      artifacts: ['tandem_native.node'],
      hash: () =>
        inputsHash({
          root,
          inputs: ['native/src', 'native/tests', 'native/cmake', 'native/CMakeLists.txt', 'native/package.json', 'native/scripts'],
          tools: [...common.tools, 'nvcc'],
          env: [...common.env, 'TANDEM_MARCH', 'TANDEM_CUDA_ARCHS', 'CUDA_HOME', 'CUDA_PATH'],
        }),
    },
    ucx: {
      buildDir: join(root, 'native/ucx/build'),
      artifacts: ['tandem_ucx.node'],
      hash: () =>
        inputsHash({
          root,
          inputs: ['native/ucx', 'native/scripts/cmake-js-build.js', '/usr/include/ucp/api/version.h'],
          tools: [...common.tools, 'pkg-config'],
          env: [...common.env, 'PKG_CONFIG_PATH'],
        }),
    },
  };
}

function artifactPresent(target) {
  const debug = process.env.TANDEM_NATIVE_DEBUG === '1' ? 'Debug' : 'Release';
  return target.artifacts.every((a) => existsSync(join(target.buildDir, debug, a)));
}

/** True when `target`'s stamp matches its inputs now and its addon is in place. */
export function nativeUpToDate(target) {
  if (process.env.TANDEM_NATIVE_BUILD_ROOT) return false; // building elsewhere: never skip
  const stamp = join(target.buildDir, STAMP);
  if (!existsSync(stamp) || !artifactPresent(target)) return false;
  return readFileSync(stamp, 'utf8').trim() === target.hash();
}

/** Record `target`'s inputs after a build (only when the addon is there: a skipped build records nothing). */
export function recordNative(target) {
  if (process.env.TANDEM_NATIVE_BUILD_ROOT || !artifactPresent(target)) return false;
  writeFileSync(join(target.buildDir, STAMP), `${target.hash()}\n`);
  return true;
}

function main(argv) {
  const root = resolve(fileURLToPath(import.meta.url), '../..');
  const [verb, what] = argv;
  const readIf = (p) => (existsSync(p) ? readFileSync(p, 'utf8') : undefined);
  const targets = nativeTargets(root);
  if (verb === 'check' && what === 'npm') {
    const ok = npmUpToDate(readFileSync(join(root, 'package-lock.json'), 'utf8'), readIf(join(root, 'node_modules/.package-lock.json')));
    return ok ? 0 : 10;
  }
  if (verb === 'check' && what in targets) return nativeUpToDate(targets[what]) ? 0 : 10;
  if (verb === 'record' && what in targets) {
    recordNative(targets[what]);
    return 0;
  }
  console.error('usage: setup-state.mjs check npm|native|ucx | record native|ucx');
  return 2;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = main(process.argv.slice(2));
}
