/**
 * Hostile adapter loads against a real `runtime up` fleet (two mocker workers, real processes),
 * over HTTP with real clients, watching the workers' memory from /proc:
 * - a weights file symlinked to /dev/zero, a FIFO, a 1 GiB sparse file: each answers 400 (no
 *   hang, no read of the bytes) and the workers' RSS stays where it was;
 * - eight concurrent loads of large valid adapters (sparse, 141 MB each, shaped for the 0.5B
 *   model the workers serve): all succeed, memory stays bounded, and no worker ever runs more
 *   loads at once than --max-lora-loads (from its own log);
 * - what a client reads of a refused load is one fixed sentence, whatever the path hit (missing,
 *   not a directory, a device): no path, no cwd, no errno; the worker's log keeps the detail;
 * - the load route takes only the admin key (--admin-api-key); an inference key gets 401.
 */
import { execFileSync } from 'node:child_process';
import { mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { makeTinyModel } from '../../workers/models/index.js';
import { LORA_TARGET_MODULES, loraTargetDims, loraTensorName, reshapeModelConfig, UNREADABLE_ADAPTER, type LoraModelDims } from '../../workers/lora/index.js';
import { reportedPids, upForBlock } from '../e2e/up.js';
import { writeSparseSafetensors } from './sparse-safetensors.js';

const KEY = 'sk-inference';
const ADMIN = 'sk-admin';
const MAX_LORA_LOADS = 1;
/** Qwen2-0.5B's shapes: the mocker only reads config.json, so its model can be this large for free. */
const DIMS_05B: LoraModelDims = { hiddenSize: 896, intermediateSize: 4864, numLayers: 24, numHeads: 14, numKvHeads: 2, headDim: 64 };
/** What a worker may grow by across a test: loads must not cost their files' size. */
const RSS_SLACK_KB = 200 * 1024;
const GiB = 1024 ** 3;

interface Files {
  model: string;
  zero: string;
  fifo: string;
  sparse: string;
  big: string[];
  valid: string;
}

/** A PEFT adapter for `dims` whose weights are a hole (sparse zeros): large, valid, no disk. */
async function sparseAdapter(dir: string, dims: LoraModelDims, rank: number): Promise<string> {
  await mkdir(dir, { recursive: true });
  const tensors: Record<string, number[]> = {};
  for (let l = 0; l < dims.numLayers; l++) {
    for (const t of LORA_TARGET_MODULES) {
      const { inF, outF } = loraTargetDims(dims, t);
      tensors[loraTensorName(l, t, 'A')] = [rank, inF];
      tensors[loraTensorName(l, t, 'B')] = [outF, rank];
    }
  }
  await writeSparseSafetensors(join(dir, 'adapter_model.safetensors'), tensors);
  await writeFile(join(dir, 'adapter_config.json'), JSON.stringify({ peft_type: 'LORA', r: rank, lora_alpha: 2 * rank, target_modules: [...LORA_TARGET_MODULES], bias: 'none' }));
  return dir;
}

async function fleetFiles(cacheDir: string): Promise<Files> {
  const model = join(cacheDir, 'qwen-05b-shaped');
  await makeTinyModel({ arch: 'qwen2', outDir: model, dtype: 'f32', seed: 3 });
  await reshapeModelConfig(model, DIMS_05B);
  const valid = await sparseAdapter(join(cacheDir, 'valid'), DIMS_05B, 4);
  const adapterConfig = await readFile(join(valid, 'adapter_config.json'));
  const withConfig = async (name: string): Promise<string> => {
    const dir = join(cacheDir, name);
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'adapter_config.json'), adapterConfig);
    return dir;
  };
  const zero = await withConfig('zero');
  await symlink('/dev/zero', join(zero, 'adapter_model.safetensors'));
  const fifo = await withConfig('fifo');
  execFileSync('mkfifo', [join(fifo, 'adapter_model.safetensors')]);
  const sparse = await withConfig('sparse');
  await writeSparseSafetensors(join(sparse, 'adapter_model.safetensors'), {}, GiB);
  const big: string[] = [];
  for (let i = 0; i < 8; i++) big.push(await sparseAdapter(join(cacheDir, `big-${i}`), DIMS_05B, 64 - i));
  return { model, zero, fifo, sparse, big, valid };
}

/** Resident set of a process, in kB, from /proc. */
async function rssKb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)![1]);
}

async function post(url: string, path: string, body: object, key: string | null): Promise<{ status: number; text: string }> {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key !== null ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify(body),
    // A load that hangs (a FIFO) or reads without end (/dev/zero) fails here instead of the suite.
    signal: AbortSignal.timeout(30_000),
  });
  return { status: res.status, text: await res.text() };
}

describe('adapter loads against a real fleet: files that are not adapters', () => {
  const files: { current?: Files } = {};
  const up = upForBlock('tandem-lora-faults-', async (cacheDir) => {
    files.current = await fleetFiles(cacheDir);
    return [
      '--engine', 'mocker', '--model', files.current.model, '--workers', '2', '--max-cpu-loras', '16',
      '--max-lora-loads', String(MAX_LORA_LOADS), '--api-key', KEY, '--admin-api-key', ADMIN, '--log-level', 'info',
    ];
  });
  const workerPids = (): number[] => ['agg-0', 'agg-1'].map((n) => reportedPids(up.output(), n).at(-1)!);
  const load = (name: string, path: string, key: string | null = ADMIN) => post(up.url(), '/v1/load_lora_adapter', { lora_name: name, lora_path: path }, key);

  it('/dev/zero as the weights file: 400 at once, and neither worker grows', async () => {
    const before = await Promise.all(workerPids().map(rssKb));
    const r = await load('zero', files.current!.zero);
    expect(r.status).toBe(400);
    expect(JSON.parse(r.text)).toMatchObject({ error: { message: UNREADABLE_ADAPTER, param: 'lora_path' } });
    const after = await Promise.all(workerPids().map(rssKb));
    after.forEach((kb, i) => expect(kb - before[i]!).toBeLessThan(RSS_SLACK_KB));
  }, 60_000);

  it('a FIFO as the weights file: 400, the load does not wait for a writer', async () => {
    const r = await load('fifo', files.current!.fifo);
    expect(r.status).toBe(400);
    expect(JSON.parse(r.text)).toMatchObject({ error: { message: UNREADABLE_ADAPTER } });
  }, 60_000);

  it('a 1 GiB sparse file is refused from its header; eight such loads at once cost the workers nothing', async () => {
    const before = await Promise.all(workerPids().map(rssKb));
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => load(`sparse-${i}`, files.current!.sparse)));
    for (const r of answers) {
      expect(r.status).toBe(400);
      expect(JSON.parse(r.text).error.message).toMatch(/^adapter_model\.safetensors: invalid safetensors file \(data section is \d+ bytes, tensors need 0\)$/);
    }
    const after = await Promise.all(workerPids().map(rssKb));
    after.forEach((kb, i) => expect(kb - before[i]!).toBeLessThan(RSS_SLACK_KB));
  }, 120_000);

  it('eight concurrent loads of 141 MB adapters: all load, memory stays bounded, at most --max-lora-loads run at once', async () => {
    const before = await Promise.all(workerPids().map(rssKb));
    const answers = await Promise.all(files.current!.big.map((dir, i) => load(`big-${i}`, dir)));
    expect(answers.map((r) => r.status)).toEqual(answers.map(() => 200));
    const after = await Promise.all(workerPids().map(rssKb));
    after.forEach((kb, i) => expect(kb - before[i]!).toBeLessThan(RSS_SLACK_KB));
    // Each worker logged every start with the loads running at that moment (itself included).
    const starts = up.output().split('\n').filter((l) => l.includes('LoRA adapter load started') && /"lora":"big-\d"/.test(l));
    expect(starts).toHaveLength(2 * files.current!.big.length);
    for (const line of starts) expect(Number(/"running":(\d+)/.exec(line)![1])).toBeLessThanOrEqual(MAX_LORA_LOADS);
    const client = new OpenAI({ baseURL: `${up.url()}/v1`, apiKey: KEY, maxRetries: 0 });
    expect((await client.models.list()).data.map((m) => m.id)).toEqual(expect.arrayContaining(files.current!.big.map((_, i) => `big-${i}`)));
  }, 180_000);

  it('a refused load answers one sentence whatever the path hit; the worker log has the detail', async () => {
    const f = files.current!;
    const client = new OpenAI({ baseURL: `${up.url()}/v1`, apiKey: ADMIN, maxRetries: 0 });
    const paths = [join(f.valid, 'missing-dir'), join(f.valid, 'adapter_config.json', 'below-a-file'), '/dev', f.zero, '/proc/self'];
    const bodies: unknown[] = [];
    for (const path of paths) {
      const err = await client.post('/load_lora_adapter', { body: { lora_name: 'probe', lora_path: path } }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      bodies.push((err as InstanceType<typeof OpenAI.APIError>).error);
    }
    expect(bodies).toEqual(paths.map(() => ({ message: UNREADABLE_ADAPTER, type: 'invalid_request_error', param: 'lora_path', code: 'invalid_argument' })));
    const text = JSON.stringify(bodies);
    for (const leak of ['ENOENT', 'ENOTDIR', process.cwd(), f.valid]) expect(text).not.toContain(leak);
    // The operator sees what happened.
    expect(up.output()).toMatch(/ENOTDIR.*"msg":"LoRA adapter refused"/);
    // A relative path would be read against each worker's working directory: refused before any worker sees it.
    await expect(client.post('/load_lora_adapter', { body: { lora_name: 'rel', lora_path: 'loras/x' } })).rejects.toMatchObject({ status: 400, error: { param: 'lora_path' } });
  }, 60_000);

  it('the load route takes the admin key only: an inference key gets 401; both keys run inference', async () => {
    const f = files.current!;
    expect((await load('ok', f.valid, null)).status).toBe(401);
    const withInferenceKey = await load('ok', f.valid, KEY);
    expect(withInferenceKey.status).toBe(401);
    expect(JSON.parse(withInferenceKey.text).error.message).toMatch(/insufficient permissions.*--admin-api-key/);
    expect((await post(up.url(), '/v1/unload_lora_adapter', { lora_name: 'big-0' }, KEY)).status).toBe(401);
    expect((await load('ok', f.valid)).status).toBe(200);
    for (const key of [KEY, ADMIN]) {
      const client = new OpenAI({ baseURL: `${up.url()}/v1`, apiKey: key, maxRetries: 0 });
      const r = await client.completions.create({ model: 'ok', prompt: 'hello', max_tokens: 2 });
      expect(r.choices).toHaveLength(1);
    }
  }, 60_000);
});
