/**
 * `runtime worker --engine mocker --perf-profile FILE`: perf-model's PerfProfileError reaches
 * the CLI as a ConfigError (a TandemError with `config_invalid`), which cli/main.ts turns into
 * exit code 2. The profile is loaded before the worker touches the runtime, so none is needed.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DistributedRuntime } from '../../runtime/distributed-runtime.js';
import { ConfigError } from '../../runtime/errors.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { startWorker, type WorkerOptions } from '../../workers/process/worker-process.js';

let dir: string;
let modelDir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tandem-profile-worker-'));
  modelDir = join(dir, 'model');
  await makeTinyModel({ arch: 'llama', outDir: modelDir });
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function options(perfProfile: string): WorkerOptions {
  return {
    engine: 'mocker',
    modelDir,
    mode: 'agg',
    namespace: 'tandem',
    blockSize: 16,
    maxNumBatchedTokens: 2048,
    maxNumSeqs: 64,
    speedupRatio: 1,
    perfProfile,
    device: 'cpu',
    loadMetricsIntervalMs: 0,
  };
}

/** Any use of the runtime fails the test: the profile must be refused before it. */
const untouchable = new Proxy({}, { get: (_t, key) => { throw new Error(`runtime.${String(key)} used before the profile was checked`); } }) as DistributedRuntime;

describe('worker --perf-profile', () => {
  it('a profile with an unsupported version is a ConfigError naming the file (exit 2)', async () => {
    const bad = join(dir, 'v2.json');
    await writeFile(bad, JSON.stringify({ version: 2, prefill: { tokens: [1], ms: [1] }, decode: { kvUsage: [0], ms: [1] } }));
    const err = await startWorker(untouchable, options(bad)).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect(err).toMatchObject({ code: 'config_invalid', message: expect.stringContaining('v2.json') });
  });

  it('a missing profile file is a ConfigError too', async () => {
    const err = await startWorker(untouchable, options(join(dir, 'nope.json'))).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(/cannot read/);
  });
});
