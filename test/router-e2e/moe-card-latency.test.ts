/**
 * The KV router's latency cost learns the served model's size from its workers' model cards:
 * a real mocker worker serving a tiny Qwen3-MoE publishes `parameters` {total, active} on its
 * card; a `KvRouterService` (memory discovery, direct event plane) that sees the card predicts
 * from the default fit charged the active share, which is what the mocker itself sleeps
 * (perf-model `stepTimeModel`). Before the fix the router predicted the dense fit for any model.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PolynomialPerfModel, stepTimeModel } from '../../perf-model/index.js';
import { KvRouterService } from '../../router/adapters/kv-router-service.js';
import type { RouteResult } from '../../router/kv-router.js';
import { parameterCounts, readModelConfig } from '../../workers/models/index.js';
import { BLOCK, Stack, tokens, waitFor } from './stack.js';

const PROMPT = 1000;

function ttftOf(r: RouteResult): number | undefined {
  return r.kind === 'routed' ? r.decision.costs[0]?.latency?.ttftMs : undefined;
}

describe('latency cost from a MoE worker\'s card', () => {
  let stack: Stack;
  let service: KvRouterService;

  beforeAll(async () => {
    stack = await Stack.start(1, {}, 'qwen3_moe');
    service = await KvRouterService.start(await stack.runtime('router'), {
      namespace: 'tandem',
      component: 'backend',
      blockSize: BLOCK,
      router: { cost: 'latency', useKvEvents: false },
    });
  });
  afterAll(async () => {
    await service?.close();
    await stack?.close();
  });

  it('an idle worker\'s predicted TTFT is the active share of the dense fit, as the mocker charges', async () => {
    const params = parameterCounts(await readModelConfig(stack.modelDir));
    const share = params.active / params.total;
    expect(share).toBeLessThan(0.9); // the tiny MoE's 8 experts, top-2: the experts dominate
    const dense = new PolynomialPerfModel().prefillMs(PROMPT);
    const expected = stepTimeModel(params).prefillMs(PROMPT);
    expect(expected).toBeCloseTo(share * dense, 9);
    const id = stack.workers[0]!.id;
    let n = 0;
    // select books nothing: each probe sees the same idle worker; it waits for the card to arrive.
    const ttft = await waitFor('a prediction from the card', () => {
      const t = ttftOf(service.router.select({ requestId: `probe-${n++}`, tokens: tokens(5, PROMPT) }, [{ instanceId: id }]));
      return t !== undefined && Math.abs(t - expected) < 1e-6 ? t : undefined;
    });
    expect(ttft).toBeLessThan(dense);
  });
});
