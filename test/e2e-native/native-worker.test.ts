/**
 * `runtime worker --engine native --device cpu` behind `runtime frontend`, as real processes:
 * greedy completions over HTTP reproduce the PyTorch goldens token for token.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTinyModel } from '../../workers/models/index.js';
import { freePort } from '../harness/ports.js';
import { REPO_ROOT, spawnCli, type Spawned } from '../harness/processes.js';

interface Golden {
  make_tiny: string;
  cases: Array<{ prompt: number[]; greedy: number[] }>;
}

const golden = JSON.parse(readFileSync(join(REPO_ROOT, 'test/fixtures/goldens/qwen2-f32.json'), 'utf8')) as Golden;
const seed = Number(/--seed (\d+)/.exec(golden.make_tiny)![1]);

describe('native worker end to end (CPU)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-native-e2e-'));
  const modelDir = join(dir, 'qwen2');
  const procs: Spawned[] = [];
  let url = '';

  beforeAll(async () => {
    await makeTinyModel({ arch: 'qwen2', outDir: modelDir, dtype: 'f32', seed });
    const port = await freePort();
    const common = ['--discovery', 'file', '--discovery-dir', join(dir, 'discovery'), '--lease-ttl', '3'];
    procs.push(spawnCli(['worker', '--engine', 'native', '--device', 'cpu', '--model', modelDir, '--model-name', 'qwen2-tiny', '--num-gpu-blocks', '256', ...common]));
    procs.push(spawnCli(['frontend', '--http-port', String(port), '--host', '127.0.0.1', ...common]));
    url = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 45_000;
    for (;;) {
      const res = await fetch(`${url}/v1/models`).catch(() => undefined);
      if (res?.ok && ((await res.json()) as { data: unknown[] }).data.length > 0) break;
      if (Date.now() > deadline) throw new Error(`stack did not come up:\n${procs.map((p) => p.output().slice(-2000)).join('\n')}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }, 60_000);

  afterAll(async () => {
    for (const p of procs) p.kill('SIGTERM');
    await Promise.all(procs.map((p) => p.exited()));
    rmSync(dir, { recursive: true, force: true });
  });

  it('greedy completions match the goldens, alone and concurrently', async () => {
    const complete = async (prompt: number[], steps: number) => {
      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'qwen2-tiny',
          prompt,
          max_tokens: steps,
          temperature: 0,
          ignore_eos: true,
          logprobs: 0,
          return_tokens_as_token_ids: true,
        }),
      });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { choices: Array<{ logprobs: { tokens: string[] } }>; usage: { completion_tokens: number } };
      expect(body.usage.completion_tokens).toBe(steps);
      return body.choices[0]!.logprobs.tokens.map((t) => Number(t.replace('token_id:', '')));
    };
    const first = golden.cases[0]!;
    expect(await complete(first.prompt, first.greedy.length)).toEqual(first.greedy);
    const all = await Promise.all(golden.cases.map((c) => complete(c.prompt, c.greedy.length)));
    all.forEach((tokens, i) => expect(tokens).toEqual(golden.cases[i]!.greedy));
  }, 60_000);
});
