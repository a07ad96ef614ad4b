/**
 * issue 23 item 5: a re-run of scripts/setup.sh skips what is up to date. The skip decisions
 * (scripts/setup-state.mjs) on temporary trees, and the TypeScript build exactly as
 * package.json's `build` script runs it, on a small project that extends the repository's
 * tsconfig.json: a second build emits nothing, an edit re-emits only the edited file.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
// @ts-expect-error plain .mjs script without types
import { inputsHash, nativeUpToDate, npmUpToDate, recordNative, STAMP } from '../../scripts/setup-state.mjs';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const temps: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'tandem-setup-'));
  temps.push(d);
  return d;
}
afterAll(() => {
  for (const d of temps) rmSync(d, { recursive: true, force: true });
});

describe('npm: package-lock.json against node_modules/.package-lock.json', () => {
  const lock = {
    lockfileVersion: 3,
    packages: {
      '': { name: 'tandem', dependencies: { a: '^1' } },
      'node_modules/a': { version: '1.0.0', integrity: 'sha512-a' },
      'node_modules/@esbuild/darwin-arm64': { version: '0.25.0', integrity: 'sha512-d', optional: true },
    },
  };
  const hidden = { packages: { 'node_modules/a': { version: '1.0.0', integrity: 'sha512-a' } } };

  it('is current when every package is installed at its locked version (absent optional ones aside)', () => {
    expect(npmUpToDate(JSON.stringify(lock), JSON.stringify(hidden))).toBe(true);
  });

  it('is stale when a package moved, is missing, or nothing was installed', () => {
    const moved = structuredClone(lock);
    moved.packages['node_modules/a'].version = '1.0.1';
    expect(npmUpToDate(JSON.stringify(moved), JSON.stringify(hidden))).toBe(false);
    const added = structuredClone(lock) as { packages: Record<string, unknown> };
    added.packages['node_modules/b'] = { version: '2.0.0', integrity: 'sha512-b' };
    expect(npmUpToDate(JSON.stringify(added), JSON.stringify(hidden))).toBe(false);
    expect(npmUpToDate(JSON.stringify(lock), undefined)).toBe(false);
  });

  it("holds for this checkout's own node_modules (a re-run here installs nothing)", () => {
    const hiddenText = readFileSync(join(repo, 'node_modules/.package-lock.json'), 'utf8');
    expect(npmUpToDate(readFileSync(join(repo, 'package-lock.json'), 'utf8'), hiddenText)).toBe(true);
  });
});

describe('native: a stamp of the build inputs in the build directory', () => {
  function tree() {
    const root = tempDir();
    mkdirSync(join(root, 'src'), { recursive: true });
    writeFileSync(join(root, 'src/a.cc'), 'int a() { return 1; }\n');
    writeFileSync(join(root, 'CMakeLists.txt'), 'project(x)\n');
    const buildDir = join(root, 'build');
    mkdirSync(join(buildDir, 'Release'), { recursive: true });
    const environ: Record<string, string | undefined> = { PATH: process.env.PATH, TANDEM_MARCH: undefined };
    const target = {
      buildDir,
      artifacts: ['x.node'],
      hash: () => inputsHash({ root, inputs: ['src', 'CMakeLists.txt'], tools: ['cmake'], env: ['TANDEM_MARCH'], environ }),
    };
    return { root, buildDir, target, environ };
  }

  it('a clean tree (no stamp, no addon) builds; after a recorded build a re-run skips', () => {
    const { buildDir, target } = tree();
    expect(nativeUpToDate(target)).toBe(false);
    expect(recordNative(target)).toBe(false); // nothing built, nothing recorded
    writeFileSync(join(buildDir, 'Release/x.node'), 'addon');
    expect(nativeUpToDate(target)).toBe(false);
    expect(recordNative(target)).toBe(true);
    expect(nativeUpToDate(target)).toBe(true);
  });

  it('a source edit, a new file, an env change or a lost addon makes it stale again', () => {
    const { root, buildDir, target, environ } = tree();
    writeFileSync(join(buildDir, 'Release/x.node'), 'addon');
    recordNative(target);
    // A fresh checkout touches every file: timestamps alone are no reason to rebuild.
    utimesSync(join(root, 'src/a.cc'), new Date(), new Date(Date.now() + 5000));
    expect(nativeUpToDate(target)).toBe(true);

    writeFileSync(join(root, 'src/a.cc'), 'int a() { return 2; }\n');
    expect(nativeUpToDate(target)).toBe(false);
    recordNative(target);
    writeFileSync(join(root, 'src/b.h'), '#pragma once\n');
    expect(nativeUpToDate(target)).toBe(false);
    recordNative(target);
    environ.TANDEM_MARCH = 'x86-64-v2';
    expect(nativeUpToDate(target)).toBe(false);
    recordNative(target);
    expect(nativeUpToDate(target)).toBe(true);
    rmSync(join(buildDir, 'Release/x.node'));
    expect(nativeUpToDate(target)).toBe(false);
    rmSync(join(buildDir, STAMP));
  });
});

describe("TypeScript: package.json's build script is incremental", () => {
  const buildScript: string = JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')).scripts.build;

  it('a second build emits nothing; an edit re-emits only the edited file', () => {
    const dir = tempDir();
    // The repository's compiler options, on two files of our own.
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({ extends: join(repo, 'tsconfig.json'), compilerOptions: { rootDir: '.', outDir: 'dist', tsBuildInfoFile: 'dist/.tsbuildinfo' }, include: ['src'] }),
    );
    mkdirSync(join(dir, 'src'));
    symlinkSync(join(repo, 'node_modules'), join(dir, 'node_modules'));
    writeFileSync(join(dir, 'src/a.ts'), 'export const a: number = 1;\n');
    writeFileSync(join(dir, 'src/b.ts'), "import { a } from './a.js';\nexport const b = a + 1;\n");
    const tsc = join(repo, 'node_modules/typescript/bin/tsc');
    // `tsc -b tsconfig.json` / `tsc -p tsconfig.json`: run the script's tsc with its own arguments.
    const args = buildScript.replace(/^tsc\s+/, '').split(/\s+/);
    expect(buildScript.startsWith('tsc ')).toBe(true);
    const build = () => execFileSync(process.execPath, [tsc, ...args], { cwd: dir, stdio: 'pipe' });
    const mtime = (f: string) => statSync(join(dir, 'dist/src', f)).mtimeMs;

    build();
    const first = { a: mtime('a.js'), b: mtime('b.js') };
    // Outputs are written with a later mtime if they are written at all.
    const past = new Date(Date.now() - 60_000);
    utimesSync(join(dir, 'dist/src/a.js'), past, past);
    utimesSync(join(dir, 'dist/src/b.js'), past, past);
    const aged = { a: mtime('a.js'), b: mtime('b.js') };
    expect(aged.a).toBeLessThan(first.a);

    build();
    expect({ a: mtime('a.js'), b: mtime('b.js') }).toEqual(aged);

    writeFileSync(join(dir, 'src/b.ts'), "import { a } from './a.js';\nexport const b = a + 2;\n");
    build();
    expect(mtime('a.js')).toBe(aged.a);
    expect(mtime('b.js')).toBeGreaterThan(aged.b);
    expect(readFileSync(join(dir, 'dist/src/b.js'), 'utf8')).toContain('a + 2');
  });

  it("the repository's build info lives in dist/ (ignored, and removed with it by a clean build)", () => {
    const cfg = JSON.parse(readFileSync(join(repo, 'tsconfig.json'), 'utf8'));
    expect(cfg.compilerOptions.incremental).toBe(true);
    expect(cfg.compilerOptions.tsBuildInfoFile).toMatch(/^dist\//);
    expect(readFileSync(join(repo, '.gitignore'), 'utf8')).toMatch(/^dist\/$/m);
  });
});
