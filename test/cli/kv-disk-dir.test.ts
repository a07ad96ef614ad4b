/**
 * A `--kv-disk-cache-dir` that cannot be a directory (issue 34, item 1.5): a file there, or a
 * file on its path. It used to crash-loop the worker with a raw `EEXIST … mkdir` stack, exit 1
 * ("a bug"). Now the worker's own parser refuses the value (exit 2, no stack), from the flag or
 * from TANDEM_KV_DISK_CACHE_DIR, and so does `runtime up`, which parses its workers' flags with
 * that parser before it starts anything; the tiers check again when built from options. A
 * directory that does not exist yet is still fine (it is created).
 * Spawns the built CLI (`npm run build` first).
 */
import { mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT_CODES } from '../../runtime/exit-codes.js';
import { diskCacheDirProblem } from '../../workers/kv-tiers/index.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { freePort } from '../harness/ports.js';
import { runCliToExit as run } from '../harness/processes.js';

const STACK_FRAME = /^\s+at /m;

describe('a --kv-disk-cache-dir that is not a directory', () => {
  let dir: string;
  let file: string;
  let modelDir: string;
  let local: string[];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tandem-kv-disk-dir-'));
    file = join(dir, 'a-file');
    await writeFile(file, 'not a directory\n');
    modelDir = join(dir, 'tiny');
    await makeTinyModel({ arch: 'llama', outDir: modelDir, dtype: 'f32' });
    local = ['--discovery', 'file', '--discovery-dir', join(dir, 'discovery'), '--event-plane', 'direct', '--host', '127.0.0.1', '--log-level', 'error'];
  }, 60_000);
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const tiers = (path: string) => ['--kv-host-cache-gb', '0.01', '--kv-disk-cache-gb', '0.1', '--kv-disk-cache-dir', path];

  it('says what is wrong with the path, in words', () => {
    expect(diskCacheDirProblem(file)).toBe(`${file} is not a directory (it is a file)`);
    expect(diskCacheDirProblem(join(file, 'sub'))).toBe(`${join(file, 'sub')} is not a directory: part of its path is a file`);
    expect(diskCacheDirProblem(join(dir, 'not-yet', 'made'))).toBeUndefined();
    expect(diskCacheDirProblem(dir)).toBeUndefined();
  });

  for (const engine of ['mocker', 'native'] as const) {
    it(`runtime worker --engine ${engine}: one line refusing the --kv-disk-cache-dir value, naming the path, exit 2, no stack`, async () => {
      const { code, output } = await run(['worker', ...local, '--engine', engine, '--model', modelDir, ...tiers(file)]);
      expect(code, output).toBe(EXIT_CODES.config);
      const lines = output.trimEnd().split('\n');
      expect(lines, output).toHaveLength(1);
      expect(lines[0]).toMatch(/^runtime: .*--kv-disk-cache-dir/);
      expect(lines[0]).toContain(`${file} is not a directory (it is a file)`);
      expect(output).not.toMatch(STACK_FRAME);
    }, 90_000);
  }

  it('runtime worker with a file on the path: exit 2, naming it', async () => {
    const { code, output } = await run(['worker', ...local, '--engine', 'mocker', '--model', modelDir, ...tiers(join(file, 'sub'))]);
    expect(code, output).toBe(EXIT_CODES.config);
    expect(output).toContain(`${join(file, 'sub')} is not a directory: part of its path is a file`);
    expect(output).not.toMatch(STACK_FRAME);
  }, 90_000);

  it('TANDEM_KV_DISK_CACHE_DIR is checked the same way', async () => {
    const { code, output } = await run(['worker', ...local, '--engine', 'mocker', '--model', modelDir, '--kv-host-cache-gb', '0.01', '--kv-disk-cache-gb', '0.1'], { TANDEM_KV_DISK_CACHE_DIR: file });
    expect(code, output).toBe(EXIT_CODES.config);
    expect(output).toContain(`${file} is not a directory (it is a file)`);
  }, 90_000);

  it('the tiers refuse it too when built from options (no command line)', async () => {
    const { createKvTiers, simulatedTierTarget } = await import('../../workers/kv-tiers/index.js');
    const { PolynomialPerfModel } = await import('../../perf-model/index.js');
    const target = { ...simulatedTierTarget(4096, 1, new PolynomialPerfModel()), disk: undefined };
    await expect(createKvTiers({ hostCacheBytes: 1 << 20, diskCacheBytes: 1 << 20, diskCacheDir: file }, target)).rejects.toMatchObject({ code: 'config_invalid', message: `--kv-disk-cache-dir ${file} is not a directory (it is a file)` });
  });

  it('runtime up: exit 2 with one line naming it, before starting anything', async () => {
    const cacheDir = await mkdtemp(join(tmpdir(), 'tandem-kv-disk-dir-up-'));
    try {
      const port = await freePort();
      const { code, output } = await run(['up', '--engine', 'native', '--model', 'tiny', '--http-port', String(port), ...tiers(file)], { TANDEM_CACHE_DIR: cacheDir });
      expect(code, output).toBe(EXIT_CODES.config);
      const lines = output.trimEnd().split('\n');
      expect(lines, output).toHaveLength(1);
      expect(lines[0]).toMatch(/^runtime: .*--kv-disk-cache-dir.* is not a directory/);
      expect(output).not.toContain('started (pid');
      expect(await readdir(cacheDir)).toEqual([]); // not even the tiny model was made
      expect((await stat(file)).isFile()).toBe(true);
    } finally {
      await rm(cacheDir, { recursive: true, force: true });
    }
  }, 90_000);
});
