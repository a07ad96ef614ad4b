/**
 * issue 34 §3.6: scripts/setup.sh itself, run whole on a small tree that stands in for a fresh
 * clone: the real setup.sh and setup-state.mjs, a package-lock.json, and stand-ins for what
 * would take minutes, each as loud as the real thing (a `npm` first on PATH that records how it
 * was called; native/scripts/build.js and native/ucx/build.js that print cmake/ninja/nvcc-like
 * lines and leave their addon where the real build does). System packages are left alone
 * (TANDEM_SETUP_SKIP_SYSTEM=1).
 *
 * - A fresh tree: dependencies installed without the package's build scripts, the TypeScript
 *   build and both addons built, at once (each stand-in waits until it sees the other two
 *   started, so one after the other cannot pass), and all the tools printed stays out of sight:
 *   a few short `setup:` lines.
 * - A second run installs and builds nothing again and says the addons are up to date.
 * - A failing build: exit 1, its last lines (the error among them) and where its whole log is.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const temps: string[] = [];
afterAll(() => {
  for (const d of temps) rmSync(d, { recursive: true, force: true });
});

/** A loud stand-in for one build: announces itself, waits for the other builds to have started, prints `lines` of noise, leaves `artifact`. */
function fakeBuild(name: string, others: string[], artifact: string | undefined, lines: number): string {
  return `
import { appendFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
const root = process.cwd();
appendFileSync(root + '/calls.log', '${name}\\n');
writeFileSync(root + '/${name}.started', '');
const deadline = Date.now() + 60_000;
while (!${JSON.stringify(others)}.every((o) => existsSync(root + '/' + o + '.started'))) {
  if (Date.now() > deadline) { console.error('${name}: the other builds never started beside me'); process.exit(3); }
  await new Promise((r) => setTimeout(r, 50));
}
for (let i = 0; i < ${lines}; i++) console.log('[' + i + '/${lines}] ${name}: -- Configuring done / ninja: Building CXX object / nvcc -gencode=arch=compute_90a');
if (process.env.FAKE_FAIL === '${name}') { console.error('${name}: fatal error: boom.h: No such file or directory'); process.exit(1); }
${artifact !== undefined ? `mkdirSync(dirname(root + '/${artifact}'), { recursive: true }); writeFileSync(root + '/${artifact}', '');` : ''}
`;
}

/** A tree like a fresh clone, as far as setup.sh can tell; `npm` on PATH is the stand-in. */
function freshTree(): { root: string; bin: string } {
  const root = mkdtempSync(join(tmpdir(), 'tandem-setup-run-'));
  temps.push(root);
  mkdirSync(join(root, 'scripts'));
  copyFileSync(join(repo, 'scripts/setup.sh'), join(root, 'scripts/setup.sh'));
  copyFileSync(join(repo, 'scripts/setup-state.mjs'), join(root, 'scripts/setup-state.mjs'));
  const lock = { name: 'tandem', lockfileVersion: 3, packages: { '': { name: 'tandem' }, 'node_modules/a': { version: '1.0.0', integrity: 'sha512-a' } } };
  writeFileSync(join(root, 'package-lock.json'), JSON.stringify(lock));
  writeFileSync(join(root, 'package.json'), JSON.stringify({ name: 'tandem', type: 'module' }));
  mkdirSync(join(root, 'native/scripts'), { recursive: true });
  mkdirSync(join(root, 'native/ucx'), { recursive: true });
  writeFileSync(join(root, 'native/scripts/build.js'), fakeBuild('native', ['ucx', 'tsc'], 'native/build/Release/tandem_native.node', 150));
  writeFileSync(join(root, 'native/ucx/build.js'), fakeBuild('ucx', ['native', 'tsc'], 'native/ucx/build/Release/tandem_ucx.node', 40));
  writeFileSync(join(root, 'tsc-build.mjs'), fakeBuild('tsc', ['native', 'ucx'], 'dist/.tsbuildinfo', 20));
  // npm: `install` records its arguments, prints like npm does and fills node_modules as npm would;
  // `run --silent build` is package.json's build (tsc -b).
  const bin = join(root, 'fake-bin');
  mkdirSync(bin);
  writeFileSync(
    join(bin, 'npm'),
    `#!/bin/sh
echo "npm $*" >> calls.log
case "$1" in
  install)
    i=0; while [ $i -lt 120 ]; do echo "npm http fetch GET 200 https://registry.npmjs.org/pkg-$i 12ms (cache miss)"; i=$((i+1)); done
    mkdir -p node_modules/a && cp package-lock.json node_modules/.package-lock.json ;;
  run) exec node tsc-build.mjs ;;
esac
`,
  );
  chmodSync(join(bin, 'npm'), 0o755);
  return { root, bin };
}

function setup(tree: { root: string; bin: string }, env: NodeJS.ProcessEnv = {}): { code: number | null; stdout: string; stderr: string } {
  for (const name of ['native', 'ucx', 'tsc']) rmSync(join(tree.root, `${name}.started`), { force: true });
  const r = spawnSync('bash', [join(tree.root, 'scripts/setup.sh')], {
    cwd: tree.root,
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...process.env, PATH: `${tree.bin}:${process.env.PATH}`, TANDEM_SETUP_SKIP_SYSTEM: '1', TMPDIR: tree.root, ...env },
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const calls = (root: string) => (existsSync(join(root, 'calls.log')) ? readFileSync(join(root, 'calls.log'), 'utf8').trim().split('\n') : []);

describe('scripts/setup.sh', () => {
  it('a fresh tree: npm without the build scripts, the three builds at once, and only a few short progress lines', () => {
    const tree = freshTree();
    const r = setup(tree);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    const lines = (r.stdout + r.stderr).trimEnd().split('\n');
    for (const line of lines) {
      expect(line).toMatch(/^setup: /);
      expect(line.length).toBeLessThanOrEqual(100);
    }
    expect(lines.length).toBeLessThanOrEqual(8);
    expect(r.stdout + r.stderr).not.toMatch(/registry\.npmjs|ninja|nvcc|Configuring/);
    expect(lines[lines.length - 1]).toMatch(/^setup: ready in \d+ s$/);
    // npm ran once, without `prepare` (which would build everything again, aloud, one at a time).
    const npm = calls(tree.root).filter((c) => c.startsWith('npm install'));
    expect(npm).toHaveLength(1);
    expect(npm[0]).toContain('--ignore-scripts');
    expect(calls(tree.root).filter((c) => ['native', 'ucx', 'tsc'].includes(c)).sort()).toEqual(['native', 'tsc', 'ucx']);
    // Stamped: the next run knows both addons are current.
    expect(existsSync(join(tree.root, 'native/build/.tandem-inputs'))).toBe(true);
    expect(existsSync(join(tree.root, 'native/ucx/build/.tandem-inputs'))).toBe(true);
    // Nothing left behind: the logs go when setup succeeds.
    expect(spawnSync('sh', ['-c', `ls -d ${tree.root}/tandem-setup.* 2>/dev/null`]).stdout.toString()).toBe('');
  }, 150_000);

  it('a second run installs and builds nothing again, and says so', () => {
    const tree = freshTree();
    expect(setup(tree).code).toBe(0);
    const before = calls(tree.root).length;
    // The TypeScript step always runs (tsc -b itself skips what is current); it needs no company now.
    writeFileSync(join(tree.root, 'tsc-build.mjs'), fakeBuild('tsc', [], 'dist/.tsbuildinfo', 5));
    const r = setup(tree);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(calls(tree.root).slice(before)).toEqual(['npm run --silent build', 'tsc']);
    expect(r.stdout).toMatch(/^setup: native engine up to date$/m);
    expect(r.stdout).toMatch(/^setup: UCX agent up to date$/m);
    expect(r.stdout).not.toMatch(/installing npm/);
  }, 150_000);

  it('a failing build: exit 1, its last lines with the error, and where its whole log is', () => {
    const tree = freshTree();
    const r = setup(tree, { FAKE_FAIL: 'native' });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^setup: native engine build failed; the last lines of its output:$/m);
    expect(r.stderr).toContain('  | native: fatal error: boom.h: No such file or directory');
    const log = /^setup: whole log: (\S+)$/m.exec(r.stderr)?.[1];
    expect(log).toBeDefined();
    expect(readFileSync(log!, 'utf8')).toContain('[0/150] native:');
    expect(r.stdout).not.toMatch(/^setup: ready/m);
    expect(existsSync(join(tree.root, 'native/build/.tandem-inputs'))).toBe(false);
  }, 150_000);
});
