/**
 * KV tiers on the dashboard (issue 25), end to end: `runtime up` with one mocker worker whose pool
 * (24 blocks of 16 tokens) is smaller than the working set, and G2 (`--kv-host-cache-gb`) and a
 * simulated G3 (`--kv-disk-cache-gb`) below it. A prompt is served, other prompts push it out of
 * the pool into G2, and it comes back (its prefix onboarded from G2: `cached_tokens` > 0).
 * The Fleet panel in chromium then shows the worker's tier row with nonzero host occupancy and a
 * nonzero host hit rate (`tiers-<id>`: data-host-blocks, data-hit-host).
 */
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { attr, chromiumPath, dashboardOnUp, screenshot } from './browser.js';

const MODEL = 'tiny-llama';
const BLOCK = 16;
const POOL_BLOCKS = 24;
const CHROMIUM = chromiumPath();
const suite = CHROMIUM ? describe : describe.skip;
if (!CHROMIUM) process.stderr.write('kv tiers dashboard browser test SKIPPED: chromium not found (apt-get install chromium, or set CHROMIUM_BIN)\n');

/** A prompt of `words` words (about 7 tokens each with the tiny tokenizer) that shares no block with another `tag`'s. */
function text(tag: string, words: number): string {
  return Array.from({ length: words }, (_, i) => `${tag}${i}`).join(' ');
}

suite(`KV tiers on the dashboard (${CHROMIUM ?? 'missing'})`, () => {
  const dashboard = dashboardOnUp('tandem-kv-tiers-dashboard-', (port) => [
    '--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--http-port', String(port), '--speedup-ratio', '10',
    '--num-gpu-blocks', String(POOL_BLOCKS), '--block-size', String(BLOCK), '--kv-host-cache-gb', '0.001', '--kv-disk-cache-gb', '0.01',
  ]);

  it('a prefix driven out of the pool and back shows as host occupancy and a host hit rate in the Fleet panel', async () => {
    const page = dashboard.page();
    const up = dashboard.up();
    await expect.poll(() => attr(page, 'conn-status', 'data-state'), { timeout: 15_000 }).toBe('live');
    const client = new OpenAI({ baseURL: `${up.url}/v1`, apiKey: 'none', maxRetries: 0 });
    const complete = async (prompt: string) => {
      const { data, response } = await client.completions.create({ model: MODEL, prompt, max_tokens: 2 }).withResponse();
      return { usage: data.usage!, worker: response.headers.get('x-worker-instance-id')! };
    };

    const prompt = text('alpha', 20);
    const first = await complete(prompt);
    expect(first.usage.prompt_tokens).toBeGreaterThanOrEqual(8 * BLOCK);
    const worker = first.worker;
    // Before any eviction the tier row is there, with an empty host tier.
    await expect.poll(async () => Number(await attr(page, `tiers-${worker}`, 'data-host-capacity')), { timeout: 10_000 }).toBeGreaterThan(0);
    expect(Number(await attr(page, `tiers-${worker}`, 'data-disk-capacity'))).toBeGreaterThan(0);
    expect(await attr(page, `tiers-${worker}`, 'data-host-blocks')).toBe('0');

    // Other prompts (each fits the pool) until twice the 24-block pool went through it: the
    // first prompt's blocks, the least recently used, went to G2.
    let filled = 0;
    for (let i = 0; filled < 2 * POOL_BLOCKS * BLOCK; i++) filled += (await complete(text(`filler${i}x`, 30))).usage.prompt_tokens;
    const again = await complete(prompt);
    expect(again.worker).toBe(worker);
    // Its prefix came back from G2 instead of being recomputed.
    expect(again.usage.prompt_tokens_details?.cached_tokens ?? 0).toBeGreaterThanOrEqual(8 * BLOCK);

    await expect.poll(async () => Number(await attr(page, `tiers-${worker}`, 'data-hit-host')), { timeout: 10_000 }).toBeGreaterThan(0);
    const hostBlocks = Number(await attr(page, `tiers-${worker}`, 'data-host-blocks'));
    expect(hostBlocks).toBeGreaterThan(0);
    expect(hostBlocks).toBeLessThanOrEqual(Number(await attr(page, `tiers-${worker}`, 'data-host-capacity')));
    expect(await page.locator(`[data-testid="tiers-${worker}"]`).isVisible()).toBe(true);
    // The host hit rate is the onboarded tokens' share of all the worker's lookups: below 1.
    const hitHost = Number(await attr(page, `tiers-${worker}`, 'data-hit-host'));
    expect(hitHost).toBeLessThan(1);
    expect(Number(await attr(page, `tiers-${worker}`, 'data-hit-disk'))).toBe(0);
    await screenshot(page, 'dashboard-kv-tiers');

    // The tier row wraps instead of widening its pool: no sideways scroll down to a 400 px pool.
    await page.setViewportSize({ width: 460, height: 1000 });
    await expect.poll(() => page.locator('[data-testid="pool-aggregated"]').evaluate((el) => Math.round(el.getBoundingClientRect().width)), { timeout: 5_000 }).toBeLessThanOrEqual(430);
    const overflow = await page.locator(`[data-testid="tiers-${worker}"]`).evaluate((row) => {
      const pool = row.closest('.pool')!;
      return { pool: pool.scrollWidth - pool.clientWidth, row: row.getBoundingClientRect().right - pool.getBoundingClientRect().right };
    });
    expect(overflow.pool).toBeLessThanOrEqual(0);
    expect(overflow.row).toBeLessThanOrEqual(0);
  }, 90_000);
});
