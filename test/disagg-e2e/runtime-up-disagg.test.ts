/**
 * `runtime up --prefill 1 --decode 1` as a user runs it (mocker engine): the fleet has no
 * aggregated workers, a long prompt runs disaggregated (both worker ids in the headers), frontend
 * flags pass through (--disagg-min-prefill-tokens), and Ctrl-C stops everything.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { pollUntil } from '../harness/http.js';
import { freePort } from '../harness/ports.js';
import { startUp } from '../e2e/up.js';

describe('runtime up --prefill 1 --decode 1', () => {
  let cacheDir = '';
  afterAll(async () => {
    if (cacheDir) await rm(cacheDir, { recursive: true, force: true });
  });

  it('serves long prompts disaggregated, short ones aggregated on the decode pool, and stops on SIGINT', async () => {
    cacheDir = await mkdtemp(join(tmpdir(), 'tandem-up-disagg-'));
    const port = await freePort();
    const up = await startUp(
      cacheDir,
      ['--engine', 'mocker', '--model', 'tiny', '--prefill', '1', '--decode', '1', '--http-port', String(port), '--kv-bytes-per-token', '4096', '--num-gpu-blocks', '1024', '--disagg-min-prefill-tokens', '64'],
      { UCX_TLS: 'tcp' },
    );
    try {
      expect(up.proc.output()).toContain('workers: 1 prefill + 1 decode');
      const url = up.url;
      expect(url).toBe(`http://127.0.0.1:${port}`);
      const post = (prompt: number[]) =>
        fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny-llama', prompt, max_tokens: 8, ignore_eos: true }) });
      const prompt = Array.from({ length: 200 }, (_, i) => 3 + (i % 400));
      // The frontend learns of the prefill pool a moment after the worker says ready.
      let long = await post(prompt);
      await pollUntil('a disaggregated answer', async () => {
        if (long.headers.get('x-prefill-worker-id') !== null) return true;
        await long.body?.cancel();
        long = await post(prompt);
        return false;
      }, 10_000, 100);
      expect(long.status).toBe(200);
      expect(long.headers.get('x-prefill-worker-id')).toMatch(/^[0-9a-f]{16}$/);
      expect(long.headers.get('x-decode-worker-id')).toBe(long.headers.get('x-worker-instance-id'));
      const body = (await long.json()) as { usage: { completion_tokens: number }; nvext: { disagg_path: string } };
      expect(body.usage.completion_tokens).toBe(8);
      expect(body.nvext.disagg_path).toBe('disagg');
      // Below --disagg-min-prefill-tokens (passed through to the frontend): aggregated.
      const short = await post([3, 4, 5, 6]);
      expect(short.status).toBe(200);
      expect(short.headers.get('x-prefill-worker-id')).toBeNull();
    } finally {
      // Ctrl-C: SIGINT to the whole process group.
      if (up.proc.running) process.kill(-up.proc.pid!, 'SIGINT');
    }
    expect((await up.proc.exited()).code).toBe(0);
  }, 120_000);

  it('--kv-layer-streaming reaches the frontend and both workers: a long prompt is copied layer by layer and adopted', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tandem-up-stream-'));
    const port = await freePort();
    const up = await startUp(
      dir,
      ['--engine', 'mocker', '--model', 'tiny', '--prefill', '1', '--decode', '1', '--http-port', String(port), '--num-gpu-blocks', '1024', '--disagg-min-prefill-tokens', '64', '--kv-layer-streaming', '--speedup-ratio', '0.2'],
      { UCX_TLS: 'tcp' },
    );
    try {
      const post = (prompt: number[]) =>
        fetch(`${up.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny-llama', prompt, max_tokens: 4, ignore_eos: true }) });
      const prompt = Array.from({ length: 600 }, (_, i) => 3 + (i % 400));
      await pollUntil('a disaggregated answer', async () => {
        const res = await post(prompt);
        await res.text();
        return res.headers.get('x-prefill-worker-id') !== null;
      }, 10_000, 100);
      await pollUntil('the decode worker adopted a streamed hand-off', () => /KV adopted from the layer stream/.test(up.proc.output()), 10_000, 50);
      expect(up.proc.output()).toMatch(/KV streamed layer by layer/);
    } finally {
      if (up.proc.running) process.kill(-up.proc.pid!, 'SIGINT');
      await up.proc.exited();
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
