/**
 * Runs the C++ test binary (native/tests/engine_test.cc) so CI covers the Node-free path the
 * CUDA backend will reuse, including one golden fixture read by the C++ JSON reader, and the
 * CPU kernel checks against double-precision references (native/tests/*_checks.h).
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { tinyModel, withTempDir } from './helpers.js';

const BINARY = join(import.meta.dirname, '../../native/build/tandem_native_test');
const FIXTURE = join(import.meta.dirname, '../fixtures/goldens/qwen3-f32.json');

let tmp: Awaited<ReturnType<typeof withTempDir>>;
beforeAll(async () => {
  tmp = await withTempDir();
});
afterAll(async () => {
  await tmp.cleanup();
});

it('the C++ test binary passes its own checks and a golden fixture', async () => {
  expect(existsSync(BINARY), `${BINARY} missing: run npm run build:native`).toBe(true);
  const fixture = JSON.parse(readFileSync(FIXTURE, 'utf8')) as { make_tiny: string };
  const seed = Number(/--seed (\d+)/.exec(fixture.make_tiny)![1]);
  const model = await tinyModel(tmp.dir, 'qwen3', 'f32', seed);
  const { stdout } = await promisify(execFile)(BINARY, ['--golden', model, FIXTURE]);
  expect(stdout).toMatch(/golden case 3: 32 tokens/);
  // The kernel suites (GEMM edge shapes x tokens 1..37, paged attention layouts) ran.
  expect(stdout).toMatch(/gemm: 7 shapes x tokens 1\.\.37 x bias\/no bias x f32\/bf16 checked/);
  expect(stdout).toMatch(/attention: 6 layouts x 5 sequences checked/);
  expect(stdout).toMatch(/\d+ checks, 0 failures/);
});
