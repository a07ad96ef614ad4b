/**
 * Prefill and decode worker processes with device KV pools (`--device simt`: the CUDA
 * backend's kernels on the host; its pool export is shared memory mapped by handle, as CUDA
 * IPC maps a GPU pool). Rows: simt → simt on one node (the IPC path: kvExportHandle,
 * kvOpenPeer once per prefill, one kvCopyFromPeer gather per hand-off), the same across block
 * sizes 32 → 16, and the staged paths between a device and a host pool (simt prefill →
 * cpu decode: device → host on the prefill, UCX read; cpu prefill at block 32 → simt decode at
 * 16: UCX read, host → device converting block size and dtype). The reference is an aggregated worker on the decode's device, in-process.
 * Faults are real: kill -9 of the prefill worker after its hand-off.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isNativeBuilt } from '../../native/index.js';
import type { PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import { DistributedRuntime } from '../../runtime/distributed-runtime.js';
import { isUcxBuilt } from '../../workers/kv-transfer/index.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { startWorker, type RunningWorker } from '../../workers/process/worker-process.js';
import { spawnTs, type Spawned } from '../harness/processes.js';
import { collect, disagg, greedy, openClients, tokens, waitFor, workerOptions, type Clients } from './helpers.js';

interface Child {
  proc: Spawned;
  statusUrl: string;
  instanceId: string;
}

/** Sum of a metric's samples whose labels contain every `labels` fragment. */
async function metric(url: string, name: string, ...labels: string[]): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => (l.startsWith(`${name}{`) || l.startsWith(`${name} `)) && labels.every((f) => l.includes(f)))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

const ROWS = [
  { name: 'simt → simt (shared-memory IPC)', prefill: 'simt', decode: 'simt', prefillBlock: 16, transport: 'cuda-ipc' },
  { name: 'simt block 32 → simt block 16 (IPC, converting)', prefill: 'simt', decode: 'simt', prefillBlock: 32, transport: 'cuda-ipc' },
  { name: 'simt → cpu (staged: device → host there)', prefill: 'simt', decode: 'cpu', prefillBlock: 16, transport: 'staged' },
  { name: 'cpu block 32 → simt block 16 (UCX host read, host → device here, converting f32 → bf16)', prefill: 'cpu', decode: 'simt', prefillBlock: 32, transport: 'ucx-host' },
] as const;

describe.skipIf(!isNativeBuilt() || !isUcxBuilt()).each(ROWS)('device KV pools across worker processes: $name', ({ prefill: prefillDevice, decode: decodeDevice, prefillBlock, transport }) => {
  let dir: string;
  let modelDir: string;
  let driver: DistributedRuntime;
  let aggRt: DistributedRuntime;
  let agg: RunningWorker;
  let clients: Clients;
  const children: Child[] = [];

  const common = (device: string): string[] => [
    '--discovery', 'file', '--discovery-dir', join(dir, 'discovery'), '--lease-ttl', '2', '--event-plane', 'direct', '--host', '127.0.0.1',
    '--engine', 'native', '--device', device, '--threads', '1', '--model', modelDir, '--model-name', 'tiny',
    '--num-gpu-blocks', '64', '--max-num-batched-tokens', '32', '--max-num-seqs', '8', '--status-port', '0', '--log-level', 'info',
  ];

  const spawnWorker = async (mode: 'prefill' | 'decode', device: string, extra: string[] = []): Promise<Child> => {
    const proc = spawnTs('test/disagg-workers/fixtures/cli.ts', ['worker', ...common(device), '--mode', mode, ...extra], { UCX_TLS: 'tcp' });
    const statusLine = await proc.waitForLine(/"msg":"status server listening"/, 60_000);
    const ready = await proc.waitForLine(/"msg":"worker ready"/, 60_000);
    const child = { proc, statusUrl: (JSON.parse(statusLine) as { url: string }).url, instanceId: (JSON.parse(ready) as { instanceId: string }).instanceId };
    children.push(child);
    return child;
  };

  const aggregated = async (request: PreprocessedRequest): Promise<number[]> =>
    (await collect(agg.loop.generate(request, new AbortController().signal))).tokens;

  let prefill: Child;
  let decode: Child;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tandem-device-disagg-'));
    modelDir = join(dir, 'qwen2');
    await makeTinyModel({ arch: 'qwen2', outDir: modelDir, dtype: 'f32', seed: 11 });
    [prefill, decode] = await Promise.all([
      spawnWorker('prefill', prefillDevice, ['--kv-release-timeout', '2', '--block-size', String(prefillBlock)]),
      spawnWorker('decode', decodeDevice, ['--kv-pull-timeout', '2']),
    ]);
    const fileRuntime = (name: string) =>
      DistributedRuntime.create({ name, discovery: 'file', discoveryDir: join(dir, 'discovery'), leaseTtlSeconds: 2, eventPlane: 'direct', host: '127.0.0.1', logLevel: 'silent' });
    driver = await fileRuntime('driver');
    aggRt = await fileRuntime('agg');
    agg = await startWorker(aggRt, workerOptions(modelDir, 'agg', { device: decodeDevice, maxNumSeqs: 8 }));
    clients = await openClients(driver, false);
    await Promise.all([clients.prefill.waitForInstances(1, 10_000), clients.decode.waitForInstances(1, 10_000)]);
  }, 120_000);

  afterAll(async () => {
    for (const c of children) c.proc.kill('SIGKILL');
    await Promise.all(children.map((c) => c.proc.exited()));
    clients?.prefill.close();
    clients?.decode.close();
    await agg?.close();
    await aggRt?.shutdown();
    await driver?.shutdown();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('greedy output equals aggregated, over the transport the placements call for', async () => {
    // 50 shared tokens: the second request hits 48 of them on the decode worker (3 blocks of
    // 16), which ends inside a source block of 32, so its copy starts mid-block (srcFirstToken).
    const shared = tokens(50, 31);
    const requests = [greedy([...shared, ...tokens(9, 32)], 8), greedy([...shared, ...tokens(25, 33)], 6), greedy(tokens(70, 34), 6)];
    const expected = await Promise.all(requests.map(aggregated));
    const got = [await disagg(clients, requests[0]!, decode.instanceId)];  // caches the shared prefix on both sides
    got.push(...(await Promise.all(requests.slice(1).map((r) => disagg(clients, r, decode.instanceId)))));
    got.forEach((g, i) => expect(g.tokens, `request ${i}`).toEqual(expected[i]));
    expect(await metric(decode.statusUrl, 'tandem_worker_kv_recompute_fallbacks_total')).toBe(0);
    expect(await metric(decode.statusUrl, 'tandem_worker_kv_transfer_by_transport_total', `transport="${transport}"`, 'result="ok"')).toBe(3);
    await waitFor(async () => (await metric(prefill.statusUrl, 'tandem_worker_kv_pinned_blocks')) === 0, 4_000, 'pins released');
    await waitFor(async () => (await metric(decode.statusUrl, 'tandem_worker_kv_active_blocks')) === 0, 2_000, 'decode blocks freed');
  }, 120_000);

  it('kill -9 of the prefill worker after its hand-off: the decode worker finishes the request, equal to aggregated, leaking no blocks', async () => {
    const request = greedy(tokens(45, 35), 6);
    const expected = await aggregated(request);
    const pre = await collect(clients.prefill.generate<PreprocessedRequest, TokenDelta>({ ...request, prefillOnly: true }, { routing: { mode: 'direct', instanceId: prefill.instanceId } }));
    prefill.proc.kill('SIGKILL');
    await prefill.proc.exited();
    const dec = await collect(
      clients.decode.generate<PreprocessedRequest, TokenDelta>(
        { ...request, tokenIds: [...request.tokenIds, ...pre.tokens], kvTransfer: pre.deltas[0]!.kvTransfer!, stop: { ...request.stop, maxTokens: 5 }, numPriorOutputTokens: 1 },
        { routing: { mode: 'direct', instanceId: decode.instanceId } },
      ),
    );
    // Either the copy still read the pool (a mapped peer pool outlives its exporter on SIMT)
    // or the pull failed and the prompt was recomputed: the output is the same.
    expect([...pre.tokens, ...dec.tokens]).toEqual(expected);
    await waitFor(async () => (await metric(decode.statusUrl, 'tandem_worker_kv_active_blocks')) === 0, 2_000, 'decode blocks freed');
    expect(await metric(decode.statusUrl, 'tandem_worker_kv_transfers_inflight')).toBe(0);
  }, 60_000);

  // The staged import into a device pool, killed mid-read: a frozen (SIGSTOP) prefill process
  // holds the UCX tcp read in flight until the kill lands. Nothing reaches the device pool
  // (kvWriteBlocks runs only after a whole read), the prompt is recomputed, nothing leaks.
  it.skipIf(transport !== 'ucx-host')('kill -9 of the prefill worker mid-read: the device decode worker recomputes and leaks no blocks', async () => {
    prefill = await spawnWorker('prefill', prefillDevice, ['--kv-release-timeout', '2', '--block-size', String(prefillBlock)]);
    await waitFor(() => clients.prefill.instance(prefill.instanceId) !== undefined, 10_000, 'new prefill worker');
    const request = greedy(tokens(70, 36), 6);
    const expected = await aggregated(request);
    const pre = await collect(clients.prefill.generate<PreprocessedRequest, TokenDelta>({ ...request, prefillOnly: true }, { routing: { mode: 'direct', instanceId: prefill.instanceId } }));
    const fallbacks = await metric(decode.statusUrl, 'tandem_worker_kv_recompute_fallbacks_total');
    prefill.proc.kill('SIGSTOP');
    const dec = collect(
      clients.decode.generate<PreprocessedRequest, TokenDelta>(
        { ...request, tokenIds: [...request.tokenIds, ...pre.tokens], kvTransfer: pre.deltas[0]!.kvTransfer!, stop: { ...request.stop, maxTokens: 5 }, numPriorOutputTokens: 1 },
        { routing: { mode: 'direct', instanceId: decode.instanceId } },
      ),
    );
    await waitFor(async () => (await metric(decode.statusUrl, 'tandem_worker_kv_transfers_inflight')) === 1, 3_000, 'read in flight');
    prefill.proc.kill('SIGKILL');
    await prefill.proc.exited();
    expect([...pre.tokens, ...(await dec).tokens]).toEqual(expected);
    expect(await metric(decode.statusUrl, 'tandem_worker_kv_recompute_fallbacks_total')).toBe(fallbacks + 1);
    await waitFor(async () => (await metric(decode.statusUrl, 'tandem_worker_kv_active_blocks')) === 0, 2_000, 'decode blocks freed');
    expect(await metric(decode.statusUrl, 'tandem_worker_kv_transfers_inflight')).toBe(0);
  }, 60_000);
});
