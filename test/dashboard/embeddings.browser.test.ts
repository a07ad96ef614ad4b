/**
 * The dashboard's request inspector lists embeddings requests (issue 26, item 5), in a real
 * chromium against `runtime up` with a mocker embedding worker: an `openai` SDK
 * `embeddings.create` of three inputs shows up in the Routing panel under its `x-request-id`,
 * with the worker the response header named, and the inspector shows endpoint `embeddings`,
 * 3 inputs and the prompt tokens the response's usage counted. Skipped without chromium.
 */
import { join } from 'node:path';
import OpenAI from 'openai';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTinyModel } from '../../workers/models/index.js';
import { upForBlock } from '../e2e/up.js';
import { attr, chromiumPath, launchChromium } from './browser.js';

const CHROMIUM = chromiumPath();
const suite = CHROMIUM ? describe : describe.skip;
if (!CHROMIUM) process.stderr.write('dashboard embeddings browser test SKIPPED: chromium not found (apt-get install chromium, or set CHROMIUM_BIN)\n');

suite('dashboard: embeddings requests in the request inspector', () => {
  const served = upForBlock('tandem-dashboard-embed-', async (cacheDir) => {
    const dir = join(cacheDir, 'tiny-embed');
    await makeTinyModel({ arch: 'qwen3', outDir: dir, dtype: 'f32', seed: 3, embedding: 'last' });
    return ['--engine', 'mocker', '--model', dir, '--workers', '1', '--embedding-workers', '1', '--speedup-ratio', '100', '--log-level', 'warn'];
  });
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    browser = await launchChromium();
    page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on('pageerror', (err) => process.stderr.write(`dashboard page error: ${err.message}\n`));
    await page.goto(`${served.url()}/dashboard`);
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
  });

  it('an embeddings.create of 3 inputs is listed with its worker, and inspected as endpoint embeddings, 3 inputs, its prompt tokens', async () => {
    await expect.poll(() => attr(page, 'conn-status', 'data-state'), { timeout: 15_000 }).toBe('live');
    const openai = new OpenAI({ baseURL: `${served.url()}/v1`, apiKey: 'unused', maxRetries: 0 });
    const { data, response } = await openai.embeddings
      .create({ model: 'tiny-embed', input: ['listed on the dashboard', 'second input', 'third one'], encoding_format: 'float' })
      .withResponse();
    expect(data.data).toHaveLength(3);
    const requestId = response.headers.get('x-request-id');
    const worker = response.headers.get('x-worker-instance-id');
    expect(requestId).toBeTruthy();
    expect(worker).toMatch(/^[0-9a-f]{16}$/);

    // Listed: the Routing panel shows the request, sent to the worker that answered.
    const decision = page.locator(`[data-testid="decision-${requestId}"]`);
    await expect.poll(() => decision.count(), { timeout: 15_000 }).toBe(1);
    expect(await decision.getAttribute('data-winner')).toBe(worker);

    // Inspected: opened from its link in that panel.
    await decision.locator(`a[data-inspect="${requestId}"]`).click();
    await expect.poll(() => attr(page, 'inspect-result', 'data-found'), { timeout: 10_000 }).toBe('true');
    expect(await page.locator('[data-testid="inspect-endpoint"]').textContent()).toBe('embeddings');
    expect(await page.locator('[data-testid="inspect-inputs"]').textContent()).toBe('3');
    expect((await attr(page, 'inspect-workers', 'data-workers'))?.split(',')).toEqual([worker]);
    expect(await page.locator('[data-testid="inspect-result"]').textContent()).toContain(`prompt ${data.usage.prompt_tokens} `);
  }, 60_000);
});
