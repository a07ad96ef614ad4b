/**
 * `--router-mode kv` with a prefill pool (real mocker processes): the prefill worker is chosen
 * KV-aware, so requests sharing a long prefix keep landing on the prefill worker that caches it
 * (round-robin would alternate), and their usage reports that prefill-side cache hit.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DisaggCluster, completeTokens } from './cluster.js';

describe('KV-aware prefill selection (frontend --router-mode kv, 2 prefill + 1 decode mocker workers)', () => {
  let cluster: DisaggCluster;

  beforeAll(async () => {
    cluster = await DisaggCluster.start({
      prefill: 2,
      decode: 1,
      engine: 'mocker',
      workerArgs: ['--kv-bytes-per-token', '1024', '--num-gpu-blocks', '512', '--speedup-ratio', '10'],
      frontendArgs: ['--router-mode', 'kv', '--disagg-min-prefill-tokens', '64'],
      env: { UCX_TLS: 'tcp' },
    });
  });
  afterAll(async () => {
    await cluster?.close();
  });

  it('requests sharing a prefix go to the prefill worker that caches it', async () => {
    const prefix = Array.from({ length: 256 }, (_, i) => 3 + ((i * 13) % 500));
    const chosen: string[] = [];
    const cached: number[] = [];
    for (let i = 0; i < 4; i++) {
      // A unique suffix past --disagg-min-prefill-tokens: even with the prefix cached on the
      // decode worker (it received it by transfer), enough stays uncached to disaggregate.
      const suffix = Array.from({ length: 80 }, (_, j) => 3 + ((i * 97 + j * 7) % 500));
      const r = await completeTokens(cluster.url, { prompt: prefix.concat(suffix), max_tokens: 4, ignore_eos: true });
      expect(r.status, r.body).toBe(200);
      expect(r.nvext?.disagg_path).toBe('disagg');
      chosen.push(r.nvext!.prefill_worker_id!);
      cached.push(r.cachedTokens);
      // Let the prefill worker's KV events reach the router before the next request.
      await new Promise((res) => setTimeout(res, 300));
    }
    expect(new Set(chosen).size).toBe(1);
    expect(cached[0]).toBe(0);
    for (const c of cached.slice(1)) expect(c).toBe(256);
    // The decode worker now holds the prefix too: a prompt whose uncached tail is below the
    // threshold runs aggregated there, from its cache.
    const short = await completeTokens(cluster.url, { prompt: prefix.concat([11, 22, 33]), max_tokens: 4, ignore_eos: true });
    expect(short.status, short.body).toBe(200);
    expect(short.nvext?.disagg_path).toBeUndefined();
    expect(short.cachedTokens).toBe(256);
    await cluster.waitForBaseline();
  });
});
