/**
 * Speculative decoding changes no output, end to end: one frontend and native workers over the
 * same tiny Llama (with a LoRA adapter), each worker serving it under its own name, as real
 * processes of the built CLI:
 *
 *   plain-cpu   --device cpu                      the reference
 *   ngram-cpu   --device cpu  --speculative ngram
 *   plain-simt  --device simt                     (the CUDA backend's kernels on the host: bf16,
 *   suffix-simt --device simt --speculative suffix  so it has its own reference)
 *
 * The same requests, sent to every pair concurrently (so batches mix kinds), must return the
 * same tokens and text with and without speculation: plain greedy completions, JSON schema and
 * regex structured output, a forced tool call, stop strings and short max_tokens (neither
 * overshot), presence/frequency/repetition penalties with logit_bias, a LoRA adapter (CPU: the
 * GPU backend has no LoRA kernels yet), and a
 * seeded sampled completion (the verify step draws each position as plain decoding does). The
 * random model's greedy output falls into cycles, which the drafters predict: the speculating
 * workers' vLLM-named counters show accepted drafts.
 */
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliStack } from '../harness/cli-stack.js';
import { makeTinyLora } from '../../workers/lora/index.js';
import { TINY_DIMS } from '../../workers/models/index.js';

const PAIRS = [
  ['plain-cpu', 'ngram-cpu'],
  ['plain-simt', 'suffix-simt'],
] as const;

describe('speculative decoding end to end: the same outputs with and without it (native cpu and simt)', () => {
  let stack: CliStack | undefined;
  let client: OpenAI;
  const statusUrl = new Map<string, string>();

  beforeAll(async () => {
    stack = await CliStack.create({ tmpPrefix: 'tandem-spec-e2e-', model: 'tiny-spec', tiny: { arch: 'llama', seed: 31 }, workerStartMs: 60_000 });
    const lora = await makeTinyLora({ dims: TINY_DIMS.llama, outDir: join(stack.dir, 'lora'), rank: 4, seed: 5 });
    await stack.startFrontend();
    const workers: Array<[string, string[]]> = [
      ['plain-cpu', ['--device', 'cpu']],
      ['ngram-cpu', ['--device', 'cpu', '--speculative', 'ngram', '--num-speculative-tokens', '4', '--prompt-lookup-min', '1']],
      ['plain-simt', ['--device', 'simt']],
      ['suffix-simt', ['--device', 'simt', '--speculative', 'suffix', '--num-speculative-tokens', '6']],
    ];
    for (const [name, args] of workers) {
      // The GPU backend has no LoRA kernels yet (native/README.md): adapters on the CPU pair only.
      const adapter = name.endsWith('-cpu') ? ['--lora', `${name}-lora=${lora}`] : [];
      const w = await stack.startWorker('agg', ['--engine', 'native', '--threads', '1', '--num-gpu-blocks', '512'], [...args, '--model-name', name, ...adapter]);
      statusUrl.set(name, w.statusUrl);
    }
    client = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    // Every model listed (its worker's card is routable).
    for (let i = 0; i < 200; i++) {
      const models = (await client.models.list()).data.map((m) => m.id);
      if (workers.every(([n]) => models.includes(n))) break;
      await new Promise((r) => setTimeout(r, 100));
    }
  }, 240_000);

  afterAll(async () => {
    await stack?.close();
  });

  /** Token ids of a completion (logprobs carry them), with its text and finish reason. */
  async function complete(model: string, body: Record<string, unknown>): Promise<{ ids: number[]; text: string; finish: string | null }> {
    const r = (await client.completions.create({ model, logprobs: 0, ...body, return_tokens_as_token_ids: true } as never)) as unknown as OpenAI.Completion;
    const c = r.choices[0]!;
    const ids = ((c.logprobs as { tokens?: string[] } | null)?.tokens ?? []).map((t) => Number(t.replace('token_id:', '')));
    return { ids, text: c.text, finish: c.finish_reason };
  }

  async function chat(model: string, body: Record<string, unknown>): Promise<{ content: string | null; tools: string; finish: string | null }> {
    const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'list three colours and their codes' }], ...body } as never) as unknown as OpenAI.ChatCompletion;
    const m = r.choices[0]!.message;
    // Call ids are random; the calls themselves must agree.
    const calls = (m.tool_calls ?? []).map((c) => (c.type === 'function' ? { name: c.function.name, arguments: c.function.arguments } : c));
    return { content: m.content, tools: JSON.stringify(calls), finish: r.choices[0]!.finish_reason };
  }

  const prompt = 'the cat sat on the mat and the dog sat on the log and the cat';
  type Case = [string, (model: string) => Promise<unknown>];
  const cases = (model: string): Case[] => [
    ['greedy completion, 48 tokens', () => complete(model, { prompt, max_tokens: 48, temperature: 0, ignore_eos: true })],
    ['a second prompt, 64 tokens', () => complete(model, { prompt: 'one two three one two three one two', max_tokens: 64, temperature: 0, ignore_eos: true })],
    ['max_tokens 1, 2, 3 and 7', () => Promise.all([1, 2, 3, 7].map((n) => complete(model, { prompt, max_tokens: n, temperature: 0, ignore_eos: true })))],
    ['penalties and logit_bias', () => complete(model, { prompt, max_tokens: 40, temperature: 0, ignore_eos: true, presence_penalty: 0.4, frequency_penalty: 0.3, repetition_penalty: 1.2, logit_bias: { '5': 3, '9': -100 } })],
    ['seeded sampling (temperature 1, top_p 0.9)', () => complete(model, { prompt, max_tokens: 40, temperature: 1, top_p: 0.9, seed: 1234, ignore_eos: true })],
    ['JSON schema', () => chat(model, { temperature: 0, max_tokens: 120, response_format: { type: 'json_schema', json_schema: { name: 'c', schema: { type: 'object', properties: { colour: { type: 'string', enum: ['red', 'green', 'blue'] }, code: { type: 'integer' }, tags: { type: 'array', items: { type: 'string' }, maxItems: 3 } }, required: ['colour', 'code', 'tags'] } } } })],
    ['regex', () => complete(model, { prompt, max_tokens: 40, temperature: 0, structured_outputs: { regex: '(ab|cd){3,8}[0-9]{2}' } })],
    ['a forced tool call', () => chat(model, { temperature: 0, max_tokens: 120, tool_choice: 'required', tools: [{ type: 'function', function: { name: 'paint', parameters: { type: 'object', properties: { colour: { type: 'string', enum: ['red', 'blue'] }, coats: { type: 'integer' } }, required: ['colour', 'coats'] } } }] })],
    ...(model.endsWith('-cpu') ? ([['the LoRA adapter', () => complete(`${model}-lora`, { prompt, max_tokens: 40, temperature: 0, ignore_eos: true })]] as Case[]) : []),
  ];

  it('every kind of request returns the same tokens with and without speculation, all sent at once', async () => {
    for (const [plain, spec] of PAIRS) {
      const a = cases(plain);
      const b = cases(spec);
      const results = await Promise.all([...a.map(([, run]) => run()), ...b.map(([, run]) => run())]);
      for (let i = 0; i < a.length; i++) expect(results[a.length + i], `${spec}: ${a[i]![0]}`).toEqual(results[i]);
    }
  }, 300_000);

  it('stop strings: the output ends where the plain output first shows the stop string, never after it', async () => {
    for (const [plain, spec] of PAIRS) {
      const ref = await complete(plain, { prompt, max_tokens: 48, temperature: 0, ignore_eos: true });
      // A stop string from the middle of the reference text: its first occurrence ends both outputs.
      const stop = ref.text.slice(Math.floor(ref.text.length / 2), Math.floor(ref.text.length / 2) + 3);
      expect(stop.length).toBe(3);
      const [a, b] = await Promise.all([plain, spec].map((m) => complete(m, { prompt, max_tokens: 48, temperature: 0, ignore_eos: true, stop: [stop] })));
      expect(b!.text).toBe(a!.text);
      expect(b!.finish).toBe('stop');
      expect(b!.text.includes(stop)).toBe(false);
      expect(ref.text.startsWith(b!.text + stop)).toBe(true);
    }
  }, 120_000);

  it('the speculating workers verified drafts and accepted some (vLLM-named counters on /metrics)', async () => {
    for (const [plain, spec] of PAIRS) {
      const text = await (await fetch(`${statusUrl.get(spec)}/metrics`)).text();
      const value = (name: string): number => Number(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
      expect(value('vllm:spec_decode_num_drafts_total')).toBeGreaterThan(0);
      expect(value('vllm:spec_decode_num_draft_tokens_total')).toBeGreaterThanOrEqual(value('vllm:spec_decode_num_drafts_total'));
      expect(value('vllm:spec_decode_num_accepted_tokens_total')).toBeGreaterThan(0);
      expect(text).toMatch(/^vllm:spec_decode_num_accepted_tokens_per_pos_total\{[^}]*position="0"[^}]*\} [1-9]/m);
      const plainText = await (await fetch(`${statusUrl.get(plain)}/metrics`)).text();
      expect(plainText).not.toContain('vllm:spec_decode_num_drafts_total');
    }
  }, 30_000);
});
