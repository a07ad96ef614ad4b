/**
 * A `--kv-disk-cache-dir` that cannot be a directory (issue 34, item 1.5): a file there, or a
 * file on its path. It used to crash-loop the worker with a raw `EEXIST … mkdir` stack, exit 1
 * ("a bug"). Now `runtime worker` says so in one line and exits 2. A directory that does not
 * exist yet is still fine (it is created).
 * Spawns the built CLI (`npm run build` first).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT_CODES } from '../../runtime/exit-codes.js';
import { diskCacheDirProblem } from '../../workers/kv-tiers/index.js';
import { makeTinyModel } from '../../workers/models/index.js';
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
    it(`runtime worker --engine ${engine}: one line naming the flag and the path, exit 2, no stack`, async () => {
      const { code, output } = await run(['worker', ...local, '--engine', engine, '--model', modelDir, ...tiers(file)]);
      expect(code, output).toBe(EXIT_CODES.config);
      expect(output.trimEnd().split('\n'), output).toEqual([`runtime: --kv-disk-cache-dir ${file} is not a directory (it is a file)`]);
      expect(output).not.toMatch(STACK_FRAME);
    }, 90_000);
  }

  it('runtime worker with a file on the path: exit 2, one line', async () => {
    const { code, output } = await run(['worker', ...local, '--engine', 'mocker', '--model', modelDir, ...tiers(join(file, 'sub'))]);
    expect(code, output).toBe(EXIT_CODES.config);
    expect(output.trimEnd().split('\n'), output).toEqual([`runtime: --kv-disk-cache-dir ${join(file, 'sub')} is not a directory: part of its path is a file`]);
  }, 90_000);
});
