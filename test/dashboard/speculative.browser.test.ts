/**
 * Speculative decoding on the dashboard (issue 37), end to end: `runtime up --speculative ngram`
 * with one mocker worker, which models acceptance (`--spec-acceptance 0.8`: each draft is right
 * with probability 0.8). After a few completions the Fleet panel in chromium shows the worker's
 * speculative row (`spec-<id>`: data-drafts, data-acceptance as vLLM counts it). The worker's /metrics
 * counters are checked by test/e2e-native/speculative-equivalence.test.ts.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../harness/ports.js';
import { startUp, stopAll, type Up } from '../e2e/up.js';
import { attr, chromiumPath, launchChromium, screenshot } from './browser.js';

const CHROMIUM = chromiumPath();
const suite = CHROMIUM ? describe : describe.skip;
if (!CHROMIUM) process.stderr.write('speculative dashboard browser test SKIPPED: chromium not found (apt-get install chromium, or set CHROMIUM_BIN)\n');

suite(`speculative decoding on the dashboard (${CHROMIUM ?? 'missing'})`, () => {
  let cacheDir: string;
  let browser: Browser;
  let page: Page;
  let up: Up;

  beforeAll(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), 'tandem-spec-dashboard-'));
    browser = await launchChromium();
    up = await startUp(cacheDir, ['--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--http-port', String(await freePort()), '--speedup-ratio', '50', '--speculative', 'ngram', '--spec-acceptance', '0.8']);
    page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on('pageerror', (err) => process.stderr.write(`dashboard page error: ${err.message}\n`));
    await page.goto(`${up.url}/dashboard`);
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    if (up) await stopAll([up]);
    if (cacheDir) await rm(cacheDir, { recursive: true, force: true });
  }, 60_000);

  it('the worker row shows its acceptance: drafts right 0.8 of the time given the ones before', async () => {
    await expect.poll(() => attr(page, 'conn-status', 'data-state'), { timeout: 15_000 }).toBe('live');
    const client = new OpenAI({ baseURL: `${up.url}/v1`, apiKey: 'none', maxRetries: 0 });
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
