/**
 * bench/fleet: the fleet a benchmark starts is real, routable through the frontend and
 * directly, and leaves nothing behind. Needs the compiled CLI (`npm run build`, as CI does).
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderHeadlines, type Headline } from '../../bench/fleet/headline.js';
import { startFleet, type Fleet } from '../../bench/fleet/index.js';
import { DirectStreamClient, FrontendStreamClient } from '../../bench/fleet/stream-clients.js';
import { isAlive } from '../harness/processes.js';

describe('startFleet', () => {
  let fleet: Fleet;
  beforeAll(async () => {
    fleet = await startFleet({ workers: 2, speedupRatio: 100, numGpuBlocks: 512, logLevel: 'info' });
  });
  afterAll(async () => {
    await fleet?.stop();
  });

  it('serves the model through the frontend and exposes each worker', async () => {
    expect(fleet.workers).toHaveLength(2);
    expect(new Set(fleet.workers.map((w) => w.instanceId)).size).toBe(2);
    const models = (await (await fetch(`${fleet.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(models.data.map((m) => m.id)).toEqual([fleet.model]);
    for (const url of fleet.workerStatusUrls) {
      const metrics = await (await fetch(`${url}/metrics`)).text();
      expect(metrics).toContain('vllm:num_requests_running');
    }
  });

  it('frontend and direct gRPC paths return the same token count for the same request', async () => {
    const frontend = new FrontendStreamClient(fleet.url, fleet.model);
    const direct = await DirectStreamClient.open(fleet);
    try {
      const job = { tokenIds: Array.from({ length: 32 }, (_, i) => 100 + i), maxTokens: 24, seed: 3 };
      const [viaFrontend, viaDirect] = [await frontend.stream(job), await direct.stream(job)];
      expect(viaFrontend).toMatchObject({ ok: true, tokens: 24 });
      expect(viaDirect).toMatchObject({ ok: true, tokens: 24 });
      expect(viaFrontend.ttftMs).toBeGreaterThan(0);
      expect(viaDirect.ttftMs).toBeGreaterThan(0);
      expect(viaDirect.e2eMs).toBeGreaterThanOrEqual(viaDirect.ttftMs);
    } finally {
      await frontend.close();
      await direct.close();
    }
  });

  it('stop() ends every process and removes the discovery directory', async () => {
    const pids = fleet.workers.map((w) => w.pid);
    const dir = fleet.discoveryDir!;
    expect(pids.every(isAlive)).toBe(true);
    await fleet.stop();
    expect(pids.some(isAlive)).toBe(false);
    expect(existsSync(dir)).toBe(false);
    await expect(fetch(`${fleet.url}/v1/models`)).rejects.toThrow();
  });
});

describe('renderHeadlines', () => {
  it('prints one aligned Markdown row per phase with the issue-4 numbers', () => {
    const row: Headline = { phase: 'sp-80', load: 'rate 8/s', requests: 64, errors: 0, requests_per_s: 7.5, output_tokens_per_s: 960, ttft_p50_ms: 41.25, ttft_p90_ms: 90, itl_p50_ms: 12.345, itl_p99_ms: 80, cached_ratio: 0.5, loadavg_1m: 2 };
    const lines = renderHeadlines([row, { ...row, phase: 'trace', cached_ratio: null }]).trimEnd().split('\n');
    expect(lines).toHaveLength(4);
    expect(new Set(lines.map((l) => l.length)).size).toBe(1);
    expect(lines[2]).toMatch(/\| sp-80 +\| rate 8\/s +\| 64 +\| 0 +\| 7\.50 +\| 960 +\| 41\.3 +\| 90\.0 +\| 12\.35 +\| 80\.00 +\| 0\.500 +\| 2\.00 +\|/);
    expect(lines[3]).toContain('| n/a ');
  });
});
