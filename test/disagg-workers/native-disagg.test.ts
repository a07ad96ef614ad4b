/**
 * Prefill and decode workers on the native CPU engine (tiny f32 model), driven over the real
 * request plane the way the frontend drives them, with the KV moved by UCX between the two
 * workers' registered engine pools. The invariant: greedy output disaggregated equals the
 * aggregated worker's, token for token. Runs once over tcp and once over shared memory.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isNativeBuilt } from '../../native/index.js';
import type { PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import type { DistributedRuntime } from '../../runtime/distributed-runtime.js';
import type { NativeEngine } from '../../workers/engines/native/index.js';
import { isUcxBuilt } from '../../workers/kv-transfer/index.js';
import type { RunningWorker } from '../../workers/process/worker-process.js';
import { collect, disagg, gauge, greedy, startTrio, tokens, waitFor, type Clients, type WorkerTrio } from './helpers.js';

const TRANSPORTS = [
  { name: 'tcp', tls: 'tcp' },
  { name: 'shared memory', tls: 'sm,self' },
];

describe.skipIf(!isNativeBuilt() || !isUcxBuilt()).each(TRANSPORTS)('native prefill + decode workers over UCX $name', ({ tls }) => {
  let trio: WorkerTrio | undefined;
  let agg: RunningWorker;
  let prefill: RunningWorker;
  let decode: RunningWorker;
  let prefillRt: DistributedRuntime;
  let decodeRt: DistributedRuntime;
  let clients: Clients;

  const aggregated = async (request: PreprocessedRequest): Promise<number[]> =>
    (await collect(clients.agg!.generate<PreprocessedRequest, TokenDelta>(request))).tokens;

  /** Every hand-off is over: nothing pinned, no blocks held, no pulls in flight. */
  const expectBaseline = async (): Promise<void> => {
    await waitFor(() => prefill.disagg!.pinned!.size === 0, 5_000, 'pins released');
    await waitFor(() => prefill.loop.stats().activeBlocks === 0 && decode.loop.stats().activeBlocks === 0, 5_000, 'blocks freed');
    expect(await gauge(prefillRt, 'tandem_worker_kv_pinned_blocks')).toBe(0);
    expect(await gauge(decodeRt, 'tandem_worker_kv_transfers_inflight')).toBe(0);
    expect(decode.loop.stats().numTransferring).toBe(0);
    expect(prefill.loop.stats().numPinnedSequences).toBe(0);
  };

  beforeAll(async () => {
    const ucx = { ucxConfig: { TLS: tls } };
    trio = await startTrio({ tmpPrefix: 'tandem-disagg-native-', tiny: { arch: 'qwen2', dtype: 'f32', seed: 7 }, prefill: { ...ucx, kvReleaseTimeoutMs: 400 }, decode: ucx });
    ({ agg, prefill, decode, prefillRt, decodeRt, clients } = trio);
  }, 30_000);

  afterAll(async () => {
    await trio?.close();
  });

  it('cards carry the UCX address and KV bytes per token; a hand-off names every prompt block', async () => {
    expect(prefill.card.role).toBe('prefill');
    expect(prefill.card.ucxWorkerAddress).toMatch(/^[0-9a-f]+$/);
    expect(decode.card.ucxWorkerAddress).toMatch(/^[0-9a-f]+$/);
    expect(prefill.card.kvBytesPerToken).toBeGreaterThan(0);
    expect(agg.card.ucxWorkerAddress).toBeUndefined();
    // Both engines compute in their agent's allocation (mapped by the peer over shm), not in
    // memory of their own that the agent would have to serve with its progress thread.
    for (const w of [prefill, decode]) {
      const kv = w.disagg!.kv;
      const engine = kv.engine as NativeEngine;
      expect(engine.kvPoolExternal).toBe(true);
      expect(engine.kvPool()).toBe(kv.pool.buffer);
      expect(kv.pool.numBlocks).toBe(engine.info.numBlocks);
    }

    const request = greedy(tokens(37, 1), 12);
    const bytesBefore = decode.disagg!.kv.agent.counters.bytesTotal;
    const got = await disagg(clients, request);
    const t = got.prefill.kvTransfer!;
    expect(t.numTokens).toBe(37);
    expect(t.blockIds).toHaveLength(3); // 16 + 16 + 5: the last block is partial
    expect(t.prefillInstanceId).toBe(prefillRt.instanceId);
    expect(got.prefill.finishReason).toBe('length');
    expect(got.prefill.tokenIds).toHaveLength(1);
    expect(got.decodeDeltas.at(-1)!.usage!.completionTokens).toBe(11);
    expect(got.decodeDeltas.at(-1)!.usage!.promptTokens).toBe(37);
    expect(got.tokens).toEqual(await aggregated(request));
    // The decode side really pulled the three blocks (no compute of the prompt there).
    expect(decode.disagg!.kv.agent.counters.bytesTotal - bytesBefore).toBe(3 * decode.disagg!.kv.pool.blockBytes);
    expect(decode.disagg!.importer!.numFallbacks).toBe(0);
    expect(await gauge(decodeRt, 'tandem_worker_kv_transfer_gbps')).toBeGreaterThan(0);
    await expectBaseline();
  });

  it('matches aggregated output for prefix hits on the prefill side, chunked prompts, and many in flight', async () => {
    const shared = tokens(48, 2);
    const prompts = [
      [...shared, ...tokens(9, 3)],
      [...shared, ...tokens(21, 4)], // 48 tokens (3 blocks) of prefix hit on the prefill worker
      tokens(150, 5), // 150 tokens at 32 per step: five chunks
      tokens(16, 6), // exactly one block
      tokens(3, 7),
      tokens(97, 8),
    ];
    const requests = prompts.map((p, i) => greedy(p, 10 + i));
    const expected = await Promise.all(requests.map(aggregated));

    // Sequential first, so the second shared-prefix request hits the first one's blocks.
    const first = await disagg(clients, requests[0]!);
    const second = await disagg(clients, requests[1]!);
    expect(second.prefill.usage!.cachedTokens).toBe(48);
    expect(first.tokens).toEqual(expected[0]);
    expect(second.tokens).toEqual(expected[1]);

    // Then all of them at once.
    const all = await Promise.all(requests.map((r) => disagg(clients, { ...r, requestId: `${r.requestId}-again` })));
    all.forEach((got, i) => expect(got.tokens, `prompt ${i}`).toEqual(expected[i]));
    expect(decode.disagg!.importer!.numFallbacks).toBe(0);
    await expectBaseline();
  }, 30_000);

  it('a first token that ends the request hands nothing off', async () => {
    const request = greedy(tokens(20, 9), 1);
    const got = await disagg(clients, request);
    expect(got.prefill.kvTransfer).toBeUndefined();
    expect(got.prefill.finishReason).toBe('length');
    expect(got.tokens).toEqual(await aggregated(request));
    expect(prefill.disagg!.pinned!.size).toBe(0);
    await expectBaseline();
  });

  it('a pull that fails falls back to computing the prompt, and still releases the prefill blocks', async () => {
    const request = greedy(tokens(40, 10), 8);
    const pre = await collect(clients.prefill.generate<PreprocessedRequest, TokenDelta>({ ...request, prefillOnly: true }));
    const params = pre.deltas[0]!.kvTransfer!;
    expect(prefill.disagg!.pinned!.size).toBe(1);
    const fallbacks = decode.disagg!.importer!.numFallbacks;
    // A descriptor the agent refuses (layout mismatch) makes the pull fail before any byte moves.
    const dec = await collect(
      clients.decode.generate<PreprocessedRequest, TokenDelta>({
        ...request,
        tokenIds: [...request.tokenIds, ...pre.tokens],
        kvTransfer: { ...params, layout: `${params.layout};other` },
        stop: { ...request.stop, maxTokens: 7 },
        numPriorOutputTokens: 1,
      }),
    );
    expect([...pre.tokens, ...dec.tokens]).toEqual(await aggregated(request));
    expect(decode.disagg!.importer!.numFallbacks).toBe(fallbacks + 1);
    // Released by the decode worker's call, well before the 400 ms timeout would.
    await waitFor(() => prefill.disagg!.pinned!.size === 0, 300, 'release after a failed pull');
    expect(prefill.disagg!.pinned!.numTimeouts).toBe(0);
    await expectBaseline();
  });

  it('unclaimed blocks are freed by the release timeout', async () => {
    const pre = await collect(clients.prefill.generate<PreprocessedRequest, TokenDelta>({ ...greedy(tokens(33, 11), 8), prefillOnly: true }));
    expect(pre.deltas[0]!.kvTransfer!.blockIds).toHaveLength(3);
    expect(await gauge(prefillRt, 'tandem_worker_kv_pinned_blocks')).toBe(3);
    expect(prefill.loop.stats().activeBlocks).toBe(3);
    const pinnedAt = Date.now();
    await waitFor(() => prefill.disagg!.pinned!.size === 0, 2_000, 'release timeout');
    const heldMs = Date.now() - pinnedAt;
    expect(heldMs).toBeGreaterThanOrEqual(300);
    expect(prefill.disagg!.pinned!.numTimeouts).toBe(1);
    expect(await gauge(prefillRt, 'tandem_worker_kv_release_timeouts_total')).toBe(1);
    await expectBaseline();
  });
});
