/**
 * A mixture of experts on the native CPU engine behind prefill and decode workers (issue 36):
 * the tiny Qwen3-MoE (a dense layer between two sparse ones, top-2 of 8 experts) prefilled on one
 * worker, its KV moved over UCX shared memory, decoded on another. Greedy output equals the
 * aggregated worker's token for token, prefix hits and chunked prompts included; the cards say
 * what the model is (architecture, total and active parameters).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isNativeBuilt } from '../../native/index.js';
import type { PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import { isUcxBuilt } from '../../workers/kv-transfer/index.js';
import { collect, disagg, greedy, startTrio, tokens, type WorkerTrio } from './helpers.js';

describe.skipIf(!isNativeBuilt() || !isUcxBuilt())('native MoE prefill + decode workers over UCX shared memory', () => {
  let trio: WorkerTrio | undefined;

  beforeAll(async () => {
    const ucx = { ucxConfig: { TLS: 'sm,self' } };
    trio = await startTrio({ tmpPrefix: 'tandem-disagg-moe-', tiny: { arch: 'qwen3_moe', dtype: 'f32', seed: 9 }, prefill: ucx, decode: ucx });
  }, 30_000);
  afterAll(async () => {
    await trio?.close();
  });

  it("cards name the architecture and its parameters: 8 experts' worth held, the router and 2 experts read per token", () => {
    const card = trio!.prefill.card;
    expect(card.architecture).toBe('Qwen3MoeForCausalLM');
    // Two sparse layers hold 8 experts of 3 x 64 x 32 each, and a token reads 2 of them.
    expect(card.parameters!.total - card.parameters!.active).toBe(2 * (8 - 2) * 3 * 64 * 32);
  });

  it('disaggregated greedy output equals aggregated, with prefix hits and chunked prompts', async () => {
    const { clients } = trio!;
    const shared = tokens(48, 2);
    const prompts = [[...shared, ...tokens(9, 3)], [...shared, ...tokens(21, 4)], tokens(150, 5), tokens(3, 7)];
    const requests = prompts.map((p, i) => greedy(p, 12 + i));
    const expected = await Promise.all(requests.map(async (r) => (await collect(clients.agg!.generate<PreprocessedRequest, TokenDelta>(r))).tokens));
    const first = await disagg(clients, requests[0]!);
    const second = await disagg(clients, requests[1]!);
    expect(second.prefill.usage!.cachedTokens).toBe(48);
    expect([first.tokens, second.tokens]).toEqual([expected[0], expected[1]]);
    const rest = await Promise.all(requests.slice(2).map((r) => disagg(clients, r)));
    expect(rest.map((r) => r.tokens)).toEqual(expected.slice(2));
    expect(trio!.decode.disagg!.importer!.numFallbacks).toBe(0);
  }, 60_000);
});
