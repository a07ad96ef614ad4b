/**
 * `runtime worker --engine native --device cpu` behind `runtime frontend`, as real processes:
 * greedy completions over HTTP reproduce the PyTorch goldens token for token.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliStack } from '../harness/cli-stack.js';
import { REPO_ROOT } from '../harness/processes.js';

interface Golden {
  make_tiny: string;
  cases: Array<{ prompt: number[]; greedy: number[] }>;
}

const golden = JSON.parse(readFileSync(join(REPO_ROOT, 'test/fixtures/goldens/qwen2-f32.json'), 'utf8')) as Golden;
const seed = Number(/--seed (\d+)/.exec(golden.make_tiny)![1]);

describe('native worker end to end (CPU)', () => {
  let stack: CliStack | undefined;
  let url = '';

  beforeAll(async () => {
    // The directory name is the served model name.
    stack = await CliStack.create({ tmpPrefix: 'tandem-native-e2e-', model: 'qwen2-tiny', tiny: { arch: 'qwen2', seed }, leaseTtl: 3 });
    await stack.startFrontend();
    await stack.startWorker('agg', ['--engine', 'native', '--device', 'cpu', '--num-gpu-blocks', '256']);
    await stack.waitForRoutable(1, { timeoutMs: 45_000 });
    url = stack.url;
  }, 60_000);

  afterAll(async () => {
    await stack?.close();
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
