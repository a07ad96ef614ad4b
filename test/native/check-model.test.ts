/**
 * scripts/goldens/check-model.ts (docs/real-model.md, "Check the output"): the engine on a model
 * directory against a golden fixture, as a process. A make-tiny model and its committed fixture
 * match (exit 0); a fixture with one greedy token changed, or made from other weights, fails (exit 1).
 */
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../harness/processes.js';
import { tinyModel, withTempDir } from './helpers.js';

const run = promisify(execFile);
const FIXTURE = join(REPO_ROOT, 'test/fixtures/goldens/qwen2-f32.json');

async function check(model: string, golden: string): Promise<{ code: number; out: string }> {
  try {
    const r = await run(process.execPath, ['--import', 'tsx', 'scripts/goldens/check-model.ts', '--model', model, '--golden', golden, '--threads', '1'], { cwd: REPO_ROOT });
    return { code: 0, out: r.stdout + r.stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, out: e.stdout + e.stderr };
  }
}

describe('scripts/goldens/check-model.ts', () => {
  let tmp: Awaited<ReturnType<typeof withTempDir>>;
  let model: string;
  beforeAll(async () => {
    tmp = await withTempDir();
    model = await tinyModel(tmp.dir, 'qwen2', 'f32', 12); // the fixture's make_tiny command
  });
  afterAll(() => tmp.cleanup());

  it('the fixture of these weights: every case matches, exit 0', async () => {
    const r = await check(model, FIXTURE);
    expect(r.out).toContain('all cases match');
    expect(r.out.match(/32 greedy tokens identical/g)).toHaveLength(4);
    expect(r.code).toBe(0);
  });

  it('one greedy token changed: that case fails, exit 1', async () => {
    const golden = JSON.parse(readFileSync(FIXTURE, 'utf8'));
    golden.cases[2].greedy[5] = (golden.cases[2].greedy[5] + 1) % golden.vocab_size;
    const path = join(tmp.dir, 'tampered.json');
    writeFileSync(path, JSON.stringify(golden));
    const r = await check(model, path);
    expect(r.out).toMatch(/case 2 .*greedy differs from token 5 .*FAIL/);
    expect(r.out).toContain('1 of 4 cases differ');
    expect(r.code).toBe(1);
  });

  it('a fixture made from other weights is refused', async () => {
    const other = await tinyModel(tmp.dir, 'qwen2', 'f32', 99);
    const r = await check(other, FIXTURE);
    expect(r.out).toContain('was made from other weights');
    expect(r.code).toBe(1);
  });
});
