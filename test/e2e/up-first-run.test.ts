/**
 * A newcomer's first `runtime up` (issue 34 §3): what it prints fits the fleet it started, and
 * every worker can be looked at.
 *
 * - Keyed fleet (`--api-key`, one aggregated worker with KV tiers and a LoRA adapter, one
 *   embedding worker): the banner names the dashboard, the adapter, and each worker's /metrics;
 *   its chat and embeddings curls carry the key header (the key itself is never printed) and
 *   work as printed; every worker's /metrics answers with its own engine, tier and embedding
 *   metrics; workers log under `up`'s names (agg-0, embed-0), never `worker-agg` for an
 *   embedding worker; a worker killed with -9 comes back and `up` says where its metrics are now.
 * - Embedding-only fleet: the banner's curl is an embeddings request (a chat request there
 *   waits for a generation worker that never comes), and it works as printed.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { promSum } from '../../runtime/prom-text.js';
import { makeTinyModel, TINY_DIMS } from '../../workers/models/index.js';
import { makeTinyLora } from '../../workers/lora/index.js';
import { freePort } from '../harness/ports.js';
import { startUp, stopAll, upForBlock, type Up } from './up.js';

const KEY = 'sk-first-run';

/** The banner: everything from "Tandem is serving" to "Press Ctrl-C". */
function banner(out: string): string {
  const from = out.indexOf('Tandem is serving');
  return out.slice(from, out.indexOf('Press Ctrl-C', from));
}

/** The banner's curl commands, each as { path, headers, body } (the `$TANDEM_API_KEY` left in). */
function curls(text: string): Array<{ path: string; headers: Record<string, string>; body: string }> {
  return text
    .split(/\n(?=  curl )/)
    .filter((c) => c.startsWith('  curl '))
    .map((c) => {
      const headers: Record<string, string> = {};
      for (const h of c.matchAll(/-H (?:'([^']+)'|"([^"]+)")/g)) {
        const [name, ...value] = (h[1] ?? h[2])!.split(': ');
        headers[name!.toLowerCase()] = value.join(': ');
      }
      return { path: new URL(/curl (?:-N )?(\S+)/.exec(c)![1]!).pathname, headers, body: /-d '([^']+)'/.exec(c)![1]! };
    });
}

/** `NAME URL` pairs of the banner's metrics lines. */
function metricsUrls(text: string): Map<string, string> {
  return new Map([...text.matchAll(/^\s+(?:metrics:\s+)?(http:\/\/\S+\/metrics) \(([\w-]+)\)$/gm)].map((m) => [m[2]!, m[1]!]));
}

async function scrape(url: string): Promise<string> {
  const res = await fetch(url);
  expect(res.status).toBe(200);
  return res.text();
}

describe('runtime up: the first run of a keyed fleet with tiers, an adapter and an embedding worker', () => {
  let cacheDir: string;
  let up: Up;
  const ups: Up[] = [];

  beforeAll(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), 'tandem-first-run-'));
    const model = join(cacheDir, 'tiny-llama');
    await makeTinyModel({ arch: 'llama', outDir: model, dtype: 'f32', seed: 3 });
    const sql = await makeTinyLora({ dims: TINY_DIMS.llama, outDir: join(cacheDir, 'sql'), rank: 4, seed: 31 });
    up = await startUp(cacheDir, [
      '--engine', 'mocker', '--model', model, '--workers', '1', '--embedding-workers', '1', '--speedup-ratio', '100',
      '--kv-host-cache-gb', '0.001', '--lora', `sql=${sql}`, '--api-key', KEY, '--http-port', String(await freePort()),
    ]);
    ups.push(up);
  }, 120_000);
  afterAll(async () => {
    await stopAll(ups);
    await rm(cacheDir, { recursive: true, force: true });
  }, 60_000);

  it('prints the dashboard, the adapter, every worker\'s metrics, and keyed curls that work as printed', async () => {
    const text = banner(up.proc.output());
    expect(text).toContain(`dashboard: ${up.url}/dashboard`);
    expect(text).toMatch(/^ {2}adapters: sql /m);
    expect(text).not.toContain(KEY);
    expect([...metricsUrls(text).keys()]).toEqual(['frontend', 'agg-0', 'embed-0']);

    const printed = curls(text);
    expect(printed.map((c) => c.path)).toEqual(['/v1/chat/completions', '/v1/embeddings']);
    for (const c of printed) {
      expect(c.headers.authorization).toBe('Bearer $TANDEM_API_KEY');
      const res = await fetch(`${up.url}${c.path}`, { method: 'POST', headers: { ...c.headers, authorization: `Bearer ${KEY}` }, body: c.body });
      expect(res.status, `${c.path}: ${await res.clone().text()}`).toBe(200);
      await res.text();
      // As printed but without the key: refused, so the header is what made it work.
      const { authorization: _, ...withoutKey } = c.headers;
      expect((await fetch(`${up.url}${c.path}`, { method: 'POST', headers: withoutKey, body: c.body })).status).toBe(401);
    }
  });

  it("every worker's /metrics answers on its printed port with its own engine, tier and embedding metrics", async () => {
    const urls = metricsUrls(banner(up.proc.output()));
    const agg = await scrape(urls.get('agg-0')!);
    // Engine: the chat request above ran here; tiers: the G2 host tier it was started with.
    expect(promSum(agg, 'tandem_worker_requests_total')).toBeGreaterThanOrEqual(1);
    expect(promSum(agg, 'vllm:num_requests_running')).toBeDefined();
    expect(promSum(agg, 'tandem_worker_kv_tier_capacity_blocks', { tier: 'host' })).toBeGreaterThan(0);
    const embed = await scrape(urls.get('embed-0')!);
    expect(promSum(embed, 'tandem_worker_embedding_requests_total')).toBeGreaterThanOrEqual(1);
    expect(promSum(embed, 'tandem_worker_requests_total')).toBeUndefined();
  });

  it("workers log under up's names: embed-0 is never worker-agg", () => {
    const out = up.proc.output();
    const names = (child: string) => new Set([...out.matchAll(new RegExp(`^\\[${child}\\] \\{.*?"name":"([^"]+)"`, 'gm'))].map((m) => m[1]));
    expect(names('agg-0')).toEqual(new Set(['agg-0']));
    expect(names('embed-0')).toEqual(new Set(['embed-0']));
  });

  it('a worker killed with -9 comes back, and up says where its metrics are now', async () => {
    const before = up.proc.output().length;
    const pid = Number(/runtime up: agg-0 started \(pid (\d+)\)/.exec(up.proc.output())![1]);
    process.kill(pid, 'SIGKILL');
    const line = await up.proc.waitForLine(/^runtime up: agg-0 metrics at http:\/\/\S+\/metrics$/, 60_000);
    expect(up.proc.output().indexOf(line)).toBeGreaterThan(before);
    // The status server listens first; the tier's gauges appear once the worker has set its tiers up.
    const url = line.split(' at ')[1]!;
    await expect.poll(async () => promSum(await scrape(url), 'tandem_worker_kv_tier_capacity_blocks', { tier: 'host' }) ?? 0, { timeout: 30_000 }).toBeGreaterThan(0);
  });
});

describe('runtime up: an embedding-only fleet', () => {
  const served = upForBlock('tandem-first-run-embed-', async () => ['--engine', 'mocker', '--model', 'tiny', '--embedding-workers', '1']);

  it('prints an embeddings curl (no chat request it cannot serve) that works as printed', async () => {
    const text = banner(served.output());
    const printed = curls(text);
    expect(printed.map((c) => c.path)).toEqual(['/v1/embeddings']);
    expect(printed[0]!.headers.authorization).toBeUndefined();
    const res = await fetch(`${served.url()}${printed[0]!.path}`, { method: 'POST', headers: printed[0]!.headers, body: printed[0]!.body });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { data: Array<{ embedding: number[] }> }).data[0]!.embedding.length).toBeGreaterThan(0);
    expect([...metricsUrls(text).keys()]).toEqual(['frontend', 'embed-0']);
  });
});
