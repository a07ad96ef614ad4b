/**
 * Prefill and decode workers on the mocker with a real host KV pool (--kv-bytes-per-token):
 * the mocker stamps every token it "computes", the decode worker pulls the blocks over UCX
 * and checks every stamp before it trusts them, and outputs match an aggregated mocker.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import { MOCKER_EOS_SEED_BASE } from '../../workers/engines/mocker/index.js';
import { isUcxBuilt } from '../../workers/kv-transfer/index.js';
import type { RunningWorker } from '../../workers/process/worker-process.js';
import { collect, disagg, greedy, startTrio, tokens, waitFor, type Clients, type WorkerTrio } from './helpers.js';

const BYTES_PER_TOKEN = 256;

describe.skipIf(!isUcxBuilt())('mocker prefill + decode workers with a stamped host KV pool', () => {
  let trio: WorkerTrio | undefined;
  let agg: RunningWorker;
  let prefill: RunningWorker;
  let decode: RunningWorker;
  let clients: Clients;

  const mocker = { engine: 'mocker' as const, speedupRatio: 1000, kvBytesPerToken: BYTES_PER_TOKEN, ucxConfig: { TLS: 'sm,self' } };

  beforeAll(async () => {
    trio = await startTrio({ tmpPrefix: 'tandem-disagg-mocker-', tiny: { arch: 'llama' }, all: mocker, prefill: { kvReleaseTimeoutMs: 2000 } });
    ({ agg, prefill, decode, clients } = trio);
  }, 30_000);

  afterAll(async () => {
    await trio?.close();
  });

  const aggregated = async (request: PreprocessedRequest): Promise<TokenDelta[]> =>
    (await collect(clients.agg!.generate<PreprocessedRequest, TokenDelta>(request))).deltas;

  it('moves real, verified bytes: a pool of numBlocks x blockSize x kvBytesPerToken', async () => {
    expect(prefill.card.kvBytesPerToken).toBe(BYTES_PER_TOKEN);
    expect(prefill.disagg!.kv.pool.byteLength).toBe(64 * 16 * BYTES_PER_TOKEN);
    const requests = [greedy(tokens(70, 1), 20), greedy(tokens(16, 2), 5), greedy(tokens(129, 3), 9)];
    const before = decode.disagg!.kv.agent.counters.bytesTotal;
    const got = await Promise.all(requests.map((r) => disagg(clients, r)));
    for (let i = 0; i < requests.length; i++) {
      expect(got[i]!.tokens).toEqual((await aggregated(requests[i]!)).flatMap((d) => d.tokenIds));
    }
    const blocks = 5 + 1 + 9;
    expect(decode.disagg!.kv.agent.counters.bytesTotal - before).toBe(blocks * 16 * BYTES_PER_TOKEN);
    expect(decode.disagg!.importer!.numVerifyFailures).toBe(0);
    expect(decode.disagg!.importer!.numFallbacks).toBe(0);
    await waitFor(() => prefill.disagg!.pinned!.size === 0 && prefill.loop.stats().activeBlocks === 0 && decode.loop.stats().activeBlocks === 0, 3000, 'baseline');
  });

  it('the first token counts as output on the decode worker: EOS after n tokens lands where aggregated puts it', async () => {
    const request: PreprocessedRequest = {
      ...greedy(tokens(30, 4), 50),
      sampling: { temperature: 0, seed: MOCKER_EOS_SEED_BASE + 6 },
      stop: { maxTokens: 50, stopTokenIds: agg.card.eosTokenIds, ignoreEos: false },
    };
    const expected = await aggregated(request);
    expect(expected.at(-1)!.finishReason).toBe('stop');
    const got = await disagg(clients, request);
    expect(got.tokens).toEqual(expected.flatMap((d) => d.tokenIds));
    expect(got.tokens).toHaveLength(7);
    expect(got.decodeDeltas.at(-1)!.finishReason).toBe('stop');
    expect(got.decodeDeltas.at(-1)!.usage!.completionTokens).toBe(6);
  });

  it('blocks pulled into the wrong place fail verification and the prompt is recomputed', async () => {
    const request = greedy(tokens(48, 5), 6);
    const pre = await collect(clients.prefill.generate<PreprocessedRequest, TokenDelta>({ ...request, prefillOnly: true }));
    const params = pre.deltas[0]!.kvTransfer!;
    const failures = decode.disagg!.importer!.numVerifyFailures;
    // Swap two remote blocks: every byte moves, but the stamps no longer match their positions.
    const swapped = [params.blockIds[1]!, params.blockIds[0]!, ...params.blockIds.slice(2)];
    const dec = await collect(
      clients.decode.generate<PreprocessedRequest, TokenDelta>({
        ...request,
        tokenIds: [...request.tokenIds, ...pre.tokens],
        kvTransfer: { ...params, blockIds: swapped },
        stop: { ...request.stop, maxTokens: 5 },
        numPriorOutputTokens: 1,
      }),
    );
    expect(decode.disagg!.importer!.numVerifyFailures).toBe(failures + 1);
    expect([...pre.tokens, ...dec.tokens]).toEqual((await aggregated(request)).flatMap((d) => d.tokenIds));
    await waitFor(() => prefill.disagg!.pinned!.size === 0, 1000, 'release after the failed import');
  });
});
