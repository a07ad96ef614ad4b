/**
 * `runtime worker --mode prefill` and `--mode decode` as real processes (native CPU engine,
 * tiny f32 model, file discovery), with UCX between them over tcp and over shared memory
 * (UCX_TLS in the children's environment). This test process plays the frontend and keeps an
 * aggregated reference worker in-process. Faults are real: kill -9 of either worker.
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

const RELEASE_TIMEOUT_S = 2;

async function metric(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
  if (line === undefined) throw new Error(`no ${name} in /metrics`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

// The last row runs the prefill worker at --block-size 32 against a decode worker at 16: every
// hand-off is read into staging and converted (workers/disagg/converting-pull.ts).
const TRANSPORTS = [
  { name: 'tcp', tls: 'tcp', prefillBlock: 16 },
  { name: 'shared memory', tls: 'sm,self', prefillBlock: 16 },
  { name: 'tcp, prefill block 32 → decode block 16', tls: 'tcp', prefillBlock: 32 },
];

describe.skipIf(!isNativeBuilt() || !isUcxBuilt()).each(TRANSPORTS)('prefill and decode worker processes over UCX $name', ({ tls, prefillBlock }) => {
  let dir: string;
  let modelDir: string;
  let driver: DistributedRuntime;
  let aggRt: DistributedRuntime;
  let agg: RunningWorker;
  let clients: Clients;
  const children: Child[] = [];

  const common = (): string[] => [
    '--discovery', 'file', '--discovery-dir', join(dir, 'discovery'), '--lease-ttl', '2', '--event-plane', 'direct', '--host', '127.0.0.1',
    '--engine', 'native', '--device', 'cpu', '--threads', '1', '--model', modelDir, '--model-name', 'tiny',
    '--num-gpu-blocks', '64', '--max-num-batched-tokens', '32', '--status-port', '0', '--log-level', 'info',
  ];

  const spawnWorker = async (mode: 'prefill' | 'decode', extra: string[] = []): Promise<Child> => {
    const proc = spawnTs('test/disagg-workers/fixtures/cli.ts', ['worker', ...common(), '--mode', mode, ...extra], { UCX_TLS: tls });
    const statusLine = await proc.waitForLine(/"msg":"status server listening"/, 30_000);
    const ready = await proc.waitForLine(/"msg":"worker ready"/, 30_000);
    const child = { proc, statusUrl: (JSON.parse(statusLine) as { url: string }).url, instanceId: (JSON.parse(ready) as { instanceId: string }).instanceId };
    children.push(child);
    return child;
  };

  const aggregated = async (request: PreprocessedRequest): Promise<number[]> =>
    (await collect(agg.loop.generate(request, new AbortController().signal))).tokens;

  let prefill: Child;
  let decode: Child;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tandem-disagg-proc-'));
    modelDir = join(dir, 'qwen2');
    await makeTinyModel({ arch: 'qwen2', outDir: modelDir, dtype: 'f32', seed: 11 });
    [prefill, decode] = await Promise.all([
      spawnWorker('prefill', ['--kv-release-timeout', String(RELEASE_TIMEOUT_S), '--block-size', String(prefillBlock)]),
      spawnWorker('decode', ['--kv-pull-timeout', '1']),
    ]);
    const fileRuntime = (name: string) =>
      DistributedRuntime.create({ name, discovery: 'file', discoveryDir: join(dir, 'discovery'), leaseTtlSeconds: 2, eventPlane: 'direct', host: '127.0.0.1', logLevel: 'silent' });
    driver = await fileRuntime('driver');
    aggRt = await fileRuntime('agg');
    agg = await startWorker(aggRt, workerOptions(modelDir, 'agg'));
    clients = await openClients(driver, false);
    await Promise.all([clients.prefill.waitForInstances(1, 10_000), clients.decode.waitForInstances(1, 10_000)]);
  }, 60_000);

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

  it('greedy output across processes equals aggregated: prefix hits, chunked prompts, several in flight', async () => {
    const shared = tokens(40, 21);
    const requests = [
      greedy([...shared, ...tokens(7, 22)], 9),
      greedy([...shared, ...tokens(30, 23)], 12),
      greedy(tokens(130, 24), 8),
      greedy(tokens(17, 25), 14),
    ];
    const expected = await Promise.all(requests.map(aggregated));
    const first = await disagg(clients, requests[0]!, decode.instanceId);
    expect(first.tokens).toEqual(expected[0]);
    const all = await Promise.all(requests.map((r) => disagg(clients, { ...r, requestId: `${r.requestId}-b` }, decode.instanceId)));
    all.forEach((got, i) => expect(got.tokens, `request ${i}`).toEqual(expected[i]));
    expect(all[1]!.prefill.usage!.cachedTokens).toBe(32); // the full shared blocks (2 × 16 or 1 × 32) hit on the prefill worker
    expect(await metric(decode.statusUrl, 'tandem_worker_kv_transfer_bytes_total')).toBeGreaterThan(0);
    expect(await metric(decode.statusUrl, 'tandem_worker_kv_recompute_fallbacks_total')).toBe(0);
    if (prefillBlock !== 16) expect(await metric(decode.statusUrl, 'tandem_worker_kv_layout_conversions_total')).toBe(5);
    // How a user checks the transport: the ready log line and the info gauge.
    const ready = JSON.parse(await prefill.proc.waitForLine(/"msg":"worker ready"/)) as { kvPool: string; kvTransports: string[]; kvLayout: string };
    expect(ready).toMatchObject({ kvPool: 'host', kvTransports: ['ucx-host'] });
    expect(ready.kvLayout).toContain(`block=${prefillBlock};f32`);
    expect(await metric(decode.statusUrl, 'tandem_worker_kv_transport_info')).toBe(1);
    await waitFor(async () => (await metric(prefill.statusUrl, 'tandem_worker_kv_pinned_blocks')) === 0, 3_000, 'pins released');
    expect(await metric(prefill.statusUrl, 'tandem_worker_kv_active_blocks')).toBe(0);
    expect(await metric(decode.statusUrl, 'tandem_worker_kv_active_blocks')).toBe(0);
    expect(await metric(prefill.statusUrl, 'tandem_worker_kv_release_timeouts_total')).toBe(0);
  }, 40_000);

  it('kill -9 of the decode worker after its pull leaks nothing on the prefill side', async () => {
    const request = greedy(tokens(50, 26), 400);
    const pre = await collect(clients.prefill.generate<PreprocessedRequest, TokenDelta>({ ...request, prefillOnly: true }));
    const params = pre.deltas[0]!.kvTransfer!;
    expect(await metric(prefill.statusUrl, 'tandem_worker_kv_pinned_blocks')).toBe(Math.ceil(50 / prefillBlock));
    const stream = clients.decode.generate<PreprocessedRequest, TokenDelta>(
      { ...request, tokenIds: [...request.tokenIds, ...pre.tokens], kvTransfer: params, stop: { ...request.stop, maxTokens: 399 }, numPriorOutputTokens: 1 },
      { routing: { mode: 'direct', instanceId: decode.instanceId } },
    );
    // A decoded token means the pull is done; kill the worker mid-decode.
    const it = stream[Symbol.asyncIterator]();
    const firstDecoded = await it.next();
    expect(firstDecoded.done).toBe(false);
    decode.proc.kill('SIGKILL');
    await decode.proc.exited();
    await expect((async () => { for (;;) if ((await it.next()).done) return; })()).rejects.toThrow();
    // The release went out after the pull (or the timeout frees the pin): either way, nothing stays.
    await waitFor(async () => (await metric(prefill.statusUrl, 'tandem_worker_kv_pinned_blocks')) === 0, (RELEASE_TIMEOUT_S + 2) * 1000, 'pins freed');
    await waitFor(async () => (await metric(prefill.statusUrl, 'tandem_worker_kv_active_blocks')) === 0, 2_000, 'prefill blocks freed');
    expect(await metric(prefill.statusUrl, 'tandem_worker_requests_running')).toBe(0);
  }, 30_000);

  it('kill -9 of the prefill worker after its hand-off: the decode worker recomputes and the request completes', async () => {
    decode = await spawnWorker('decode', ['--kv-pull-timeout', '1']);
    await waitFor(() => clients.decode.instance(decode.instanceId) !== undefined, 10_000, 'new decode worker');
    const request = greedy(tokens(45, 27), 10);
    const expected = await aggregated(request);
    const pre = await collect(clients.prefill.generate<PreprocessedRequest, TokenDelta>({ ...request, prefillOnly: true }));
    prefill.proc.kill('SIGKILL');
    await prefill.proc.exited();
    const dec = await collect(
      clients.decode.generate<PreprocessedRequest, TokenDelta>(
        { ...request, tokenIds: [...request.tokenIds, ...pre.tokens], kvTransfer: pre.deltas[0]!.kvTransfer!, stop: { ...request.stop, maxTokens: 9 }, numPriorOutputTokens: 1 },
        { routing: { mode: 'direct', instanceId: decode.instanceId } },
      ),
    );
    expect([...pre.tokens, ...dec.tokens]).toEqual(expected);
    expect(await metric(decode.statusUrl, 'tandem_worker_kv_recompute_fallbacks_total')).toBe(1);
    await waitFor(async () => (await metric(decode.statusUrl, 'tandem_worker_kv_active_blocks')) === 0, 2_000, 'decode blocks freed');
    expect(await metric(decode.statusUrl, 'tandem_worker_kv_transfers_inflight')).toBe(0);
  }, 40_000);
  // A frozen prefill process (SIGSTOP) holds a tcp pull in flight for as long as the test
  // wants, so the kill lands mid-pull every time. Over shared memory the decode side copies
  // without the prefill's CPU, so nothing freezes there.
  const prefillArgs = ['--kv-release-timeout', String(RELEASE_TIMEOUT_S), '--block-size', String(prefillBlock)];
  const pullingDecode = (request: PreprocessedRequest, pre: { tokens: number[]; deltas: TokenDelta[] }, maxTokens: number) =>
    collect(
      clients.decode.generate<PreprocessedRequest, TokenDelta>(
        { ...request, tokenIds: [...request.tokenIds, ...pre.tokens], kvTransfer: pre.deltas[0]!.kvTransfer!, stop: { ...request.stop, maxTokens }, numPriorOutputTokens: 1 },
        { routing: { mode: 'direct', instanceId: decode.instanceId } },
      ),
    );

  it.skipIf(tls !== 'tcp')('kill -9 of the prefill worker mid-pull: the decode worker recomputes and leaks no blocks', async () => {
    prefill = await spawnWorker('prefill', prefillArgs);
    await waitFor(() => clients.prefill.instance(prefill.instanceId) !== undefined, 10_000, 'new prefill worker');
    const request = greedy(tokens(70, 28), 6);
    const expected = await aggregated(request);
    const pre = await collect(clients.prefill.generate<PreprocessedRequest, TokenDelta>({ ...request, prefillOnly: true }, { routing: { mode: 'direct', instanceId: prefill.instanceId } }));
    const fallbacks = await metric(decode.statusUrl, 'tandem_worker_kv_recompute_fallbacks_total');
    prefill.proc.kill('SIGSTOP');
    const dec = pullingDecode(request, pre, 5);
    await waitFor(async () => (await metric(decode.statusUrl, 'tandem_worker_kv_transfers_inflight')) === 1, 2_000, 'pull in flight');
    prefill.proc.kill('SIGKILL');
    await prefill.proc.exited();
    expect([...pre.tokens, ...(await dec).tokens]).toEqual(expected);
    expect(await metric(decode.statusUrl, 'tandem_worker_kv_recompute_fallbacks_total')).toBe(fallbacks + 1);
    await waitFor(async () => (await metric(decode.statusUrl, 'tandem_worker_kv_active_blocks')) === 0, 2_000, 'decode blocks freed');
    expect(await metric(decode.statusUrl, 'tandem_worker_kv_transfers_inflight')).toBe(0);
  }, 40_000);

  it.skipIf(tls !== 'tcp')('kill -9 of the decode worker mid-pull: the prefill pins are freed by --kv-release-timeout', async () => {
    prefill = await spawnWorker('prefill', prefillArgs);
    await waitFor(() => clients.prefill.instance(prefill.instanceId) !== undefined, 10_000, 'new prefill worker');
    const request = greedy(tokens(70, 29), 6);
    const pre = await collect(clients.prefill.generate<PreprocessedRequest, TokenDelta>({ ...request, prefillOnly: true }, { routing: { mode: 'direct', instanceId: prefill.instanceId } }));
    expect(await metric(prefill.statusUrl, 'tandem_worker_kv_pinned_blocks')).toBe(Math.ceil(70 / prefillBlock));
    prefill.proc.kill('SIGSTOP');
    const dec = pullingDecode(request, pre, 5).catch((err: unknown) => err);
    await waitFor(async () => (await metric(decode.statusUrl, 'tandem_worker_kv_transfers_inflight')) === 1, 2_000, 'pull in flight');
    decode.proc.kill('SIGKILL');
    await decode.proc.exited();
    const killedAt = Date.now();
    prefill.proc.kill('SIGCONT');
    expect(await dec).toBeInstanceOf(Error);
    await waitFor(async () => (await metric(prefill.statusUrl, 'tandem_worker_kv_pinned_blocks')) === 0, (RELEASE_TIMEOUT_S + 2) * 1000, 'pins freed by timeout');
    expect(Date.now() - killedAt).toBeLessThan((RELEASE_TIMEOUT_S + 2) * 1000);
    expect(await metric(prefill.statusUrl, 'tandem_worker_kv_release_timeouts_total')).toBe(1);
    await waitFor(async () => (await metric(prefill.statusUrl, 'tandem_worker_kv_active_blocks')) === 0, 2_000, 'prefill blocks freed');
  }, 40_000);
});
