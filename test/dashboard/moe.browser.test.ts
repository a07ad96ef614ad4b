/**
 * A mixture-of-experts model on the dashboard, in chromium (issue 36): `runtime up --engine
 * mocker` over a make-tiny Qwen3-MoE (8 experts, top-2), `--router-mode kv --router-cost
 * latency`. The model's header names its architecture and parameter counts from the workers'
 * cards (`arch-<model>`: `data-architecture`, `data-params-total`, `data-params-active`, equal to
 * what workers/models `parameterCounts` reads from config.json; the text says "active"), and the
 * Routing panel's predicted TTFT of a first request on the idle fleet is the default fit charged
 * the model's active share (perf-model `stepTimeModel`), as the mocker itself charges. About 15 s.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PolynomialPerfModel, stepTimeModel } from '../../perf-model/index.js';
import { makeTinyModel, parameterCounts, readModelConfig } from '../../workers/models/index.js';
import { attr, chromiumPath, dashboardOnUp, screenshot } from './browser.js';

const CHROMIUM = chromiumPath();
const suite = CHROMIUM ? describe : describe.skip;
if (!CHROMIUM) process.stderr.write('MoE dashboard browser test SKIPPED: chromium not found (apt-get install chromium, or set CHROMIUM_BIN)\n');

suite(`a MoE model on the dashboard (${CHROMIUM ?? 'missing'})`, () => {
  let modelRoot: string;
  let modelDir: string;
  // Registered before dashboardOnUp's beforeAll, so the model exists when `up` starts.
  beforeAll(async () => {
    modelRoot = await mkdtemp(join(tmpdir(), 'tandem-moe-model-'));
    modelDir = join(modelRoot, 'tiny-qwen3-moe');
    await makeTinyModel({ arch: 'qwen3_moe', outDir: modelDir });
  });
  afterAll(async () => {
    if (modelRoot) await rm(modelRoot, { recursive: true, force: true });
  });
  const dash = dashboardOnUp('tandem-moe-dashboard-', (port) => [
    '--engine', 'mocker', '--model', modelDir, '--workers', '1', '--http-port', String(port),
    '--router-mode', 'kv', '--router-cost', 'latency',
  ]);

  it('the header shows Qwen3MoeForCausalLM with its total and active parameters, and routing predicts with the active share', async () => {
    const page = dash.page();
    const up = dash.up();
    await expect.poll(() => attr(page, 'conn-status', 'data-state'), { timeout: 15_000 }).toBe('live');
    const params = parameterCounts(await readModelConfig(modelDir));
    expect(params.active).toBeLessThan(params.total);
    const models = (await (await fetch(`${up.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
    const name = models.data[0]!.id;
    const arch = `arch-${name}`;
    await expect.poll(() => attr(page, arch, 'data-architecture'), { timeout: 15_000 }).toBe('Qwen3MoeForCausalLM');
    expect(await attr(page, arch, 'data-params-total')).toBe(String(params.total));
    expect(await attr(page, arch, 'data-params-active')).toBe(String(params.active));
    const span = page.locator(`[data-testid="${arch}"]`);
    expect(await span.isVisible()).toBe(true);
    const k = (n: number) => `${(n / 1e3).toFixed(1)}K`; // the tiny model's counts are thousands
    expect(await span.textContent()).toBe(`Qwen3MoeForCausalLM · ${k(params.total)} params, ${k(params.active)} active`);

    // The first request on the idle fleet: nothing queued, nothing cached, calibration at 1, so
    // the predicted TTFT is the step-time model's prefill of the prompt.
    const client = new OpenAI({ baseURL: `${up.url}/v1`, apiKey: 'none', maxRetries: 0 });
    const { data: reply, response } = await client.chat.completions
      .create({ model: name, max_tokens: 8, messages: [{ role: 'user', content: 'how do experts share tokens?' }] })
      .withResponse();
    const promptTokens = reply.usage!.prompt_tokens;
    const requestId = response.headers.get('x-request-id')!;
    const decision = `decision-${requestId}`;
    await expect.poll(() => attr(page, decision, 'data-predicted-ttft-ms'), { timeout: 15_000 }).toBeDefined();
    const predicted = Number(await attr(page, decision, 'data-predicted-ttft-ms'));
    const moe = stepTimeModel(params).prefillMs(promptTokens);
    const dense = new PolynomialPerfModel().prefillMs(promptTokens);
    expect(predicted).toBeCloseTo(moe, 2);
    expect(predicted).toBeLessThan(dense * 0.9);
    await screenshot(page, 'dashboard-moe');
  });
});
