/**
 * Prefill and decode native CPU workers with different block sizes (prefill 32, decode 16),
 * over real UCX: the decode worker reads the prefill's 32-token blocks into staging and
 * converts them into its 16-token blocks (workers/disagg/converting-pull.ts) instead of
 * refusing the pull and recomputing. Greedy output equals the aggregated worker's.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isNativeBuilt } from '../../native/index.js';
import type { PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import type { DistributedRuntime } from '../../runtime/distributed-runtime.js';
import { isUcxBuilt, type UcxTransferAgent } from '../../workers/kv-transfer/index.js';
import type { RunningWorker } from '../../workers/process/worker-process.js';
import { collect, disagg, greedy, startTrio, tokens, waitFor, type Clients, type WorkerTrio } from './helpers.js';

describe.skipIf(!isNativeBuilt() || !isUcxBuilt())('native prefill at block 32, decode at block 16', () => {
  let trio: WorkerTrio | undefined;
  let prefill: RunningWorker;
  let decode: RunningWorker;
  let decodeRt: DistributedRuntime;
  let clients: Clients;

  const aggregated = async (request: PreprocessedRequest): Promise<number[]> =>
    (await collect(clients.agg!.generate<PreprocessedRequest, TokenDelta>(request))).tokens;

  const counter = async (name: string, labels: Record<string, string>): Promise<number> => {
    const data = await decodeRt.metrics.getSingleMetric(name)!.get();
    return data.values.find((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x))?.value ?? 0;
  };

  const expectBaseline = async (): Promise<void> => {
    await waitFor(() => prefill.disagg!.pinned!.size === 0, 5_000, 'pins released');
    await waitFor(() => prefill.loop.stats().activeBlocks === 0 && decode.loop.stats().activeBlocks === 0, 5_000, 'blocks freed');
    expect(decode.loop.stats().numTransferring).toBe(0);
    // Every staging region went back: only the pool is registered.
    expect((decode.disagg!.kv.agent as UcxTransferAgent).stats().regions).toBe(1);
  };

  beforeAll(async () => {
    const ucx = { ucxConfig: { TLS: 'tcp' } };
    trio = await startTrio({
      tmpPrefix: 'tandem-disagg-convert-',
      tiny: { arch: 'qwen2', dtype: 'f32', seed: 11 },
      prefill: { ...ucx, blockSize: 32, numGpuBlocks: 32 },
      decode: ucx,
    });
    ({ prefill, decode, decodeRt, clients } = trio);
  }, 30_000);

  afterAll(async () => {
    await trio?.close();
  });

  it('cards carry both layouts; the decode side converts 32-token blocks into 16-token ones', async () => {
    expect(prefill.card.kvLayout).toMatchObject({ order: 'block_major.v1', blockSize: 32, dtype: 'f32', tp: 1 });
    expect(decode.card.kvLayout).toMatchObject({ blockSize: 16 });
    expect(prefill.card.kvLayoutName).toBe(prefill.disagg!.kv.pool.layout);
    expect(prefill.card.kvTransports).toEqual(['ucx-host']);
    expect(decode.card.kvPlacement).toMatchObject({ pool: 'host' });

    const request = greedy(tokens(37, 1), 12);
    const bytesBefore = decode.disagg!.kv.agent.counters.bytesTotal;
    const got = await disagg(clients, request);
    const t = got.prefill.kvTransfer!;
    expect(t.blockIds).toHaveLength(2); // 32 + 5 tokens
    expect(t.kvLayout).toMatchObject({ blockSize: 32 });
    expect(got.tokens).toEqual(await aggregated(request));
    // Both prefill blocks were read (the bytes of 2 blocks of 32), none recomputed.
    expect(decode.disagg!.kv.agent.counters.bytesTotal - bytesBefore).toBe(2 * prefill.disagg!.kv.pool.blockBytes);
    expect(decode.disagg!.importer!.numFallbacks).toBe(0);
    expect(await counter('tandem_worker_kv_layout_conversions_total', { conversion: 'block_size', result: 'ok' })).toBe(1);
    expect(await counter('tandem_worker_kv_transfer_by_transport_total', { transport: 'ucx-host', result: 'ok' })).toBe(1);
    await expectBaseline();
  });

  it('matches aggregated output for decode-side prefix hits, odd lengths and many in flight', async () => {
    const shared = tokens(48, 2);
    const prompts = [[...shared, ...tokens(9, 3)], [...shared, ...tokens(30, 4)], tokens(150, 5), tokens(16, 6), tokens(32, 7), tokens(97, 8), tokens(3, 9)];
    const requests = prompts.map((p, i) => greedy(p, 8 + i));
    const expected = await Promise.all(requests.map(aggregated));
    // Sequential first: the second request's first 48 tokens (3 decode blocks) are cached on
    // the decode worker, so its import starts at block 3, token 48, inside prefill block 1.
    const first = await disagg(clients, requests[0]!);
    const before = decode.disagg!.kv.agent.counters.bytesTotal;
    const second = await disagg(clients, requests[1]!);
    expect(first.tokens).toEqual(expected[0]);
    expect(second.tokens).toEqual(expected[1]);
    expect(decode.disagg!.kv.agent.counters.bytesTotal - before).toBe(2 * prefill.disagg!.kv.pool.blockBytes); // tokens 48..78: blocks 1 and 2
    const all = await Promise.all(requests.map((r) => disagg(clients, { ...r, requestId: `${r.requestId}-again` })));
    all.forEach((got, i) => expect(got.tokens, `prompt ${i}`).toEqual(expected[i]));
    expect(decode.disagg!.importer!.numFallbacks).toBe(0);
    await expectBaseline();
  }, 60_000);

  it('another model shape is still refused and recomputed, and the prefill blocks are released', async () => {
    const request = greedy(tokens(40, 10), 6);
    const pre = await collect(clients.prefill.generate<PreprocessedRequest, TokenDelta>({ ...request, prefillOnly: true }));
    const params = pre.deltas[0]!.kvTransfer!;
    const fallbacks = decode.disagg!.importer!.numFallbacks;
    const dec = await collect(
      clients.decode.generate<PreprocessedRequest, TokenDelta>({
        ...request,
        tokenIds: [...request.tokenIds, ...pre.tokens],
        kvTransfer: { ...params, kvLayout: { ...params.kvLayout!, numLayers: params.kvLayout!.numLayers + 1 } },
        stop: { ...request.stop, maxTokens: 5 },
        numPriorOutputTokens: 1,
      }),
    );
    expect([...pre.tokens, ...dec.tokens]).toEqual(await aggregated(request));
    expect(decode.disagg!.importer!.numFallbacks).toBe(fallbacks + 1);
    await expectBaseline();
  });
});
