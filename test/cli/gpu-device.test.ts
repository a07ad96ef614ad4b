/**
 * The CUDA backend from the command line, on whatever machine runs the tests:
 *  - `runtime backends` lists cpu, cuda and simt; cuda is available exactly when the addon says
 *    so, and otherwise carries its reason (no driver, no GPU, a build without nvcc);
 *  - `runtime worker --device cuda` where cuda is unavailable prints that reason on one line and
 *    exits 4 (skipped, with the reason, on a machine with a usable GPU);
 *  - a malformed --device exits 2; prefill/decode on a GPU start like agg workers (KV moves
 *    between GPUs since issue 24), so without a usable GPU they exit 4 with the reason too;
 *  - `runtime up` splits one GPU's memory between the workers it starts on it.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gpuMemoryShare } from '../../cli/up.js';
import { isNativeBuilt, loadAddon } from '../../native/index.js';
import { EXIT_CODES } from '../../runtime/exit-codes.js';
import { CLI, spawnCli } from '../harness/processes.js';
import { tinyModel, withTempDir } from '../native/helpers.js';

const STACK_FRAME = /^\s+at /m;

async function run(args: string[]): Promise<{ code: number | null; output: string }> {
  const p = spawnCli(args, {});
  const exit = await Promise.race([p.exited(), new Promise<undefined>((r) => setTimeout(() => r(undefined), 60_000))]);
  if (!exit) {
    p.kill('SIGKILL');
    throw new Error(`runtime ${args.join(' ')} did not exit within 60 s:\n${p.output()}`);
  }
  return { code: exit.code, output: p.output() };
}

/** stdout alone (the JSON of `backends --json`). */
async function stdoutOf(args: string[]): Promise<string> {
  const { stdout } = await promisify(execFile)(process.execPath, [CLI, ...args]);
  return stdout;
}

const cuda = isNativeBuilt() ? loadAddon().backendStatus().find((b) => b.name === 'cuda') : undefined;

describe.skipIf(!isNativeBuilt())('the CUDA backend on the command line', () => {
  let tmp: Awaited<ReturnType<typeof withTempDir>>;
  let model = '';
  let local: string[];
  beforeAll(async () => {
    tmp = await withTempDir();
    model = await tinyModel(tmp.dir, 'llama', 'f32', 5);
    local = ['--discovery', 'file', '--discovery-dir', `${tmp.dir}/discovery`, '--event-plane', 'direct', '--host', '127.0.0.1', '--log-level', 'error'];
  });
  afterAll(async () => {
    await tmp.cleanup();
  });

  it('runtime backends: cpu and simt available; cuda as the addon reports it, with a reason when unavailable', async () => {
    const list = JSON.parse(await stdoutOf(['backends', '--json'])) as Array<{ name: string; available: boolean; reason?: string; detail?: string; fp8?: string }>;
    expect(list.map((b) => b.name)).toEqual(['cpu', 'cuda', 'simt']);
    expect(list[0]!.available).toBe(true);
    const c = list[1]!;
    expect(c.available).toBe(cuda!.available);
    if (c.available) expect(c.detail).toBeTruthy();
    else expect(c.reason).toMatch(/driver|GPU|nvcc|compute capability/);
    // The FP8 paths: the CPU's always; a GPU's by its compute capability (FP8 tensor cores from sm_89); none when unavailable.
    expect(list[0]!.fp8).toMatch(/FP8 weights kept as e4m3 .*e4m3 KV cache/);
    if (c.available) expect(c.fp8).toMatch(/^(FP8 tensor cores|no FP8 tensor cores) \(sm_\d+\)/);
    else expect(c.fp8).toBeUndefined();
    const table = await stdoutOf(['backends']);
    expect(table).toMatch(c.available ? /^cuda\s+available/m : /^cuda\s+unavailable: /m);
    expect(table).toMatch(/^cpu\s+available: host threads\n\s+FP8: FP8 weights kept as e4m3/m);
  }, 90_000);

  it.skipIf(cuda?.available === true)(`worker --device cuda without a usable GPU: the reason on one line, exit 4`, async () => {
    const { code, output } = await run(['worker', ...local, '--engine', 'native', '--device', 'cuda', '--model', model]);
    expect(code).toBe(EXIT_CODES.unavailable);
    expect(output).toContain(`runtime: device 'cuda:0': ${cuda!.reason}\n`);
    expect(output).not.toMatch(STACK_FRAME);
  }, 90_000);

  it('a malformed --device is a usage error (exit 2)', async () => {
    const { code, output } = await run(['worker', ...local, '--engine', 'native', '--device', 'gpu0', '--model', model]);
    expect(code).toBe(EXIT_CODES.config);
    expect(output).toMatch(/expected cpu, cuda or cuda:N, got 'gpu0'/);
  }, 90_000);

  it.skipIf(cuda?.available === true)('prefill on a GPU is no longer refused: without a usable GPU it fails like an agg worker (exit 4, the reason)', async () => {
    const { code, output } = await run(['worker', ...local, '--engine', 'native', '--device', 'cuda:1', '--mode', 'prefill', '--model', model]);
    expect(code).toBe(EXIT_CODES.unavailable);
    expect(output).toContain(`runtime: device 'cuda:1': `);
    expect(output).not.toMatch(/not built yet/);
    expect(output).not.toMatch(STACK_FRAME);
  }, 90_000);
});

describe('runtime up on one GPU: --gpu-memory-utilization per worker', () => {
  const base = { engine: 'native' as const, device: 'cuda', prefill: 0, decode: 0 };
  it('0.9 split evenly: one worker 0.9, two 0.45 each, three 0.3', () => {
    expect(gpuMemoryShare({ ...base, workers: 1, gpuMemoryUtilization: undefined })).toBe('0.9000');
    expect(gpuMemoryShare({ ...base, workers: 2, gpuMemoryUtilization: undefined })).toBe('0.4500');
    expect(gpuMemoryShare({ ...base, workers: 3, gpuMemoryUtilization: undefined })).toBe('0.3000');
  });
  it('an explicit share is for all the workers together: 0.8 over 4 is 0.2 each', () => {
    expect(gpuMemoryShare({ ...base, workers: 4, gpuMemoryUtilization: '0.8' })).toBe('0.2000');
  });
  it('on the CPU or the mocker the flag passes through unchanged (or not at all)', () => {
    expect(gpuMemoryShare({ ...base, device: 'cpu', workers: 2, gpuMemoryUtilization: undefined })).toBeUndefined();
    expect(gpuMemoryShare({ ...base, engine: 'mocker', workers: 2, gpuMemoryUtilization: '0.5' })).toBe('0.5');
  });
  it('a share outside (0, 1] is a configuration error', () => {
    expect(() => gpuMemoryShare({ ...base, workers: 1, gpuMemoryUtilization: '1.5' })).toThrow(/must be in \(0, 1\]/);
  });
});
