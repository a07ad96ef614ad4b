/**
 * Speculative decoding on the dashboard (issue 37), end to end: `runtime up --speculative ngram`
 * with one mocker worker, which models acceptance (`--spec-acceptance 0.8`: each draft is right
 * with probability 0.8). After a few completions the Fleet panel in chromium shows the worker's
 * speculative row (`spec-<id>`: data-drafts, data-acceptance as vLLM counts it). The worker's /metrics
 * counters are checked by test/e2e-native/speculative-equivalence.test.ts.
 */
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { attr, chromiumPath, dashboardOnUp, screenshot } from './browser.js';

const CHROMIUM = chromiumPath();
const suite = CHROMIUM ? describe : describe.skip;
if (!CHROMIUM) process.stderr.write('speculative dashboard browser test SKIPPED: chromium not found (apt-get install chromium, or set CHROMIUM_BIN)\n');

suite(`speculative decoding on the dashboard (${CHROMIUM ?? 'missing'})`, () => {
  const fleet = dashboardOnUp('tandem-spec-dashboard-', (port) => ['--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--http-port', String(port), '--speedup-ratio', '50', '--speculative', 'ngram', '--spec-acceptance', '0.8']);

  it('the worker row shows its acceptance: drafts right 0.8 of the time given the ones before', async () => {
    const page = fleet.page();
    await expect.poll(() => attr(page, 'conn-status', 'data-state'), { timeout: 15_000 }).toBe('live');
    const client = new OpenAI({ baseURL: `${fleet.up().url}/v1`, apiKey: 'none', maxRetries: 0 });
    let worker = '';
    for (let i = 0; i < 6; i++) {
      const { response } = await client.completions.create({ model: 'tiny-llama', prompt: `tell me a story ${i}`, max_tokens: 60, ignore_eos: true } as never).withResponse();
      worker = response.headers.get('x-worker-instance-id')!;
    }
    await expect.poll(async () => Number(await attr(page, `spec-${worker}`, 'data-drafts')), { timeout: 10_000 }).toBeGreaterThan(20);
    // Each draft is right with probability 0.8 given the ones before, so of k drafts about
    // 0.8 + 0.8^2 + ... + 0.8^k are accepted: 0.54 of them at k = 5 (vLLM's acceptance rate).
    const acceptance = Number(await attr(page, `spec-${worker}`, 'data-acceptance'));
    expect(acceptance).toBeGreaterThan(0.35);
    expect(acceptance).toBeLessThan(0.85);
    expect(await page.locator(`[data-testid="spec-${worker}"]`).isVisible()).toBe(true);
    await screenshot(page, 'dashboard-speculative');

  }, 90_000);
});
