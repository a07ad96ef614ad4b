/**
 * Anthropic's Messages API (`/v1/messages`) through the vendor's own clients — `@anthropic-ai/sdk`
 * and the Vercel AI SDK's Anthropic provider — against `runtime up`: one mocker worker over a
 * tiny random Qwen3 (Hermes `<tool_call>`, `<think>`) under `--reasoning-parser think`, with an
 * API key, which the Anthropic clients send as `x-api-key`.
 *
 * The model is random: what is certain is what a grammar forces (a forced tool call, a `<think>`
 * block under a grammar), and that a fixed seed repeats an output, so a stream and a unary answer
 * with the same seed must agree exactly. `seed` and `structured_outputs` are Tandem's extensions
 * to the Messages body (docs/api-endpoints.md); the SDK passes unknown fields through.
 */
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { createAnthropic } from '@ai-sdk/anthropic';
import { beforeAll, describe, expect, it } from 'vitest';
import { makeTinyModel } from '../../workers/models/index.js';
import { upForBlock } from './up.js';
import { describeAiSdkProvider, WeatherInput } from './ai-sdk-provider.js';

const MODEL = 'tiny-qwen3';
const KEY = 'anthropic-test-key';
const WEATHER_TOOL = {
  name: 'get_weather',
  description: 'Weather forecast for a city',
  input_schema: { type: 'object' as const, properties: { city: { type: 'string', pattern: '^[A-Z][a-z]{1,11}$' }, unit: { type: 'string', enum: ['c', 'f'] } }, required: ['city', 'unit'], additionalProperties: false },
};
// Qwen3's template leaves opening <think> to the model; a random model only does under a grammar.
const THINK_GRAMMAR = 'root ::= "<think>" [a-z ]{1,20} "</think>" [a-z]{1,10}';

type Params = Anthropic.MessageCreateParamsNonStreaming & { seed?: number; structured_outputs?: unknown };

describe('Anthropic clients against runtime up (tiny-qwen3, --reasoning-parser think, mocker)', () => {
  const served = upForBlock('tandem-anthropic-', async (cacheDir) => {
    const dir = join(cacheDir, MODEL);
    await makeTinyModel({ arch: 'qwen3', outDir: dir });
    return ['--model', dir, '--reasoning-parser', 'think', '--engine', 'mocker', '--workers', '1', '--speedup-ratio', '100', '--log-level', 'warn', '--api-key', KEY];
  });
  let client: Anthropic;
  beforeAll(() => {
    client = new Anthropic({ baseURL: served.url(), apiKey: KEY, maxRetries: 0, timeout: 60_000 });
  });
  const base = { model: MODEL, max_tokens: 24, temperature: 0.8 } as const;
  const ask = (text: string) => [{ role: 'user' as const, content: text }];

  it('messages.create, unary: a message of text blocks, usage counted, stop_reason from the finish', async () => {
    const message = await client.messages.create({ ...base, messages: ask('Say something.'), seed: 1 } as Params);
    expect(message).toMatchObject({ type: 'message', role: 'assistant', model: MODEL, stop_sequence: null });
    expect(message.id).toMatch(/^msg_/);
    expect(['end_turn', 'max_tokens']).toContain(message.stop_reason);
    expect(message.content.every((b) => b.type === 'text')).toBe(true);
    expect(message.usage.input_tokens).toBeGreaterThan(5);
    expect(message.usage.output_tokens).toBeGreaterThan(0);
    if (message.stop_reason === 'max_tokens') expect(message.usage.output_tokens).toBe(24);
  });

  it('messages.create, streamed: the full event sequence in order, and the same text as unary for the same seed', async () => {
    const params = { ...base, messages: ask('Stream something.'), seed: 2 } as Params;
    const unary = await client.messages.create(params);
    const stream = await client.messages.create({ ...params, stream: true });
    const types: string[] = [];
    let text = '';
    let stopReason: string | null = null;
    let outputTokens = 0;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
      if (event.type === 'message_delta') {
        stopReason = event.delta.stop_reason;
        outputTokens = event.usage.output_tokens;
      }
    }
    expect(types.slice(0, 1)).toEqual(['message_start']);
    expect(types.slice(-2)).toEqual(['message_delta', 'message_stop']);
    expect(types).toContain('content_block_start');
    expect(types.indexOf('content_block_stop')).toBeGreaterThan(types.indexOf('content_block_delta'));
    const unaryText = unary.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
    expect({ text, stopReason, outputTokens }).toEqual({ text: unaryText, stopReason: unary.stop_reason, outputTokens: unary.usage.output_tokens });
  });

  it('messages.stream helpers: text events and finalMessage() equal the unary message', async () => {
    const params = { ...base, messages: ask('Helpers.'), seed: 3 } as Params;
    const unary = await client.messages.create(params);
    const stream = client.messages.stream(params);
    let text = '';
    stream.on('text', (delta) => (text += delta));
    const final = await stream.finalMessage();
    expect(final.content).toEqual(unary.content);
    expect(final.stop_reason).toBe(unary.stop_reason);
    expect(text).toBe(unary.content.map((b) => (b.type === 'text' ? b.text : '')).join(''));
  });

  it('a tool loop: a forced tool_use whose input validates, then the tool_result goes back and the model answers in text', async () => {
    const first = await client.messages.create({
      ...base,
      max_tokens: 128,
      messages: ask('Weather in Oslo?'),
      tools: [WEATHER_TOOL],
      tool_choice: { type: 'tool', name: 'get_weather' },
      seed: 4,
    } as Params);
    expect(first.stop_reason).toBe('tool_use');
    const uses = first.content.filter((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use');
    expect(uses.length).toBe(1);
    expect(uses[0]!.name).toBe('get_weather');
    expect(uses[0]!.id).toMatch(/^toolu_/);
    expect(WeatherInput.safeParse(uses[0]!.input).success, JSON.stringify(uses[0]!.input)).toBe(true);

    const second = await client.messages.create({
      ...base,
      messages: [
        ...ask('Weather in Oslo?'),
        { role: 'assistant', content: first.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: uses[0]!.id, content: '{"forecast":"rain","tempC":7}' }] },
      ],
      tools: [WEATHER_TOOL],
      tool_choice: { type: 'none' },
      seed: 5,
    } as Params);
    expect(second.content.some((b) => b.type === 'tool_use')).toBe(false);
    expect(['end_turn', 'max_tokens']).toContain(second.stop_reason);
    // The call and its result are in the second prompt (whose first turn the prefix cache may serve).
    const prompt = (u: Anthropic.Usage): number => u.input_tokens + (u.cache_read_input_tokens ?? 0);
    expect(prompt(second.usage)).toBeGreaterThan(prompt(first.usage) + 10);
  });

  it("tool_choice 'any' streamed: tool_use block with input_json_delta pieces that parse to a valid input", async () => {
    const stream = client.messages.stream({ ...base, max_tokens: 128, messages: ask('Weather, streamed.'), tools: [WEATHER_TOOL], tool_choice: { type: 'any' }, seed: 6 } as Params);
    let jsonDeltas = 0;
    stream.on('streamEvent', (event) => {
      if (event.type === 'content_block_delta' && event.delta.type === 'input_json_delta') jsonDeltas++;
    });
    const final = await stream.finalMessage();
    expect(final.stop_reason).toBe('tool_use');
    const use = final.content.find((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use');
    expect(WeatherInput.safeParse(use?.input).success, JSON.stringify(final.content)).toBe(true);
    expect(jsonDeltas).toBeGreaterThan(0);
  });

  it('a thinking model: the <think> block is a thinking block, unary and streamed (thinking_delta) alike', async () => {
    const params = { ...base, max_tokens: 64, messages: ask('Think, then answer.'), thinking: { type: 'enabled', budget_tokens: 1024 }, structured_outputs: { grammar: THINK_GRAMMAR }, seed: 7 } as Params;
    const unary = await client.messages.create(params);
    expect(unary.content.map((b) => b.type)).toEqual(['thinking', 'text']);
    const [thinking, text] = unary.content as [Anthropic.ThinkingBlock, Anthropic.TextBlock];
    expect(thinking.thinking).toMatch(/^[a-z ]{1,20}$/);
    expect(text.text).toMatch(/^[a-z]{1,10}$/);
    const stream = client.messages.stream(params);
    let thinkingDeltas = '';
    stream.on('thinking', (delta) => (thinkingDeltas += delta));
    const final = await stream.finalMessage();
    expect(final.content.map((b) => (b.type === 'thinking' ? { type: b.type, thinking: b.thinking } : b))).toEqual([{ type: 'thinking', thinking: thinking.thinking }, text]);
    expect(thinkingDeltas).toBe(thinking.thinking);
  });

  it('messages.countTokens equals the prompt of the same request: input_tokens + cache_read_input_tokens', async () => {
    const params = { model: MODEL, system: 'You are terse.', messages: ask('Count me.'), tools: [WEATHER_TOOL] };
    const count = await client.messages.countTokens(params);
    // Twice: the second hits the prefix cache, which Anthropic counts apart from input_tokens.
    for (let i = 0; i < 2; i++) {
      const { usage } = await client.messages.create({ ...params, max_tokens: 4 });
      expect(usage.input_tokens + (usage.cache_read_input_tokens ?? 0) + (usage.cache_creation_input_tokens ?? 0)).toBe(count.input_tokens);
      if (i === 1) expect(usage.cache_read_input_tokens).toBeGreaterThan(0);
    }
  });

  it('bad input: a missing max_tokens and an image are 400s in Anthropic’s error shape naming the field; a wrong key is a 401', async () => {
    const missing = await client.messages.create({ model: MODEL, messages: ask('x') } as unknown as Params).catch((err: unknown) => err);
    expect(missing).toBeInstanceOf(Anthropic.BadRequestError);
    expect((missing as InstanceType<typeof Anthropic.BadRequestError>).error).toMatchObject({ type: 'error', error: { type: 'invalid_request_error', message: expect.stringContaining('max_tokens') } });
    const image = await client.messages
      .create({ ...base, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }] }] })
      .catch((err: unknown) => err);
    expect(image).toBeInstanceOf(Anthropic.BadRequestError);
    expect((image as InstanceType<typeof Anthropic.BadRequestError>).error).toMatchObject({ error: { type: 'invalid_request_error', message: expect.stringMatching(/messages\[0\]\.content\[0\].*image/) } });
    const wrongKey = new Anthropic({ baseURL: served.url(), apiKey: 'wrong', maxRetries: 0 });
    const denied = await wrongKey.messages.create({ ...base, messages: ask('x') }).catch((err: unknown) => err);
    expect(denied).toBeInstanceOf(Anthropic.AuthenticationError);
    expect((denied as InstanceType<typeof Anthropic.AuthenticationError>).error).toMatchObject({ type: 'error', error: { type: 'authentication_error' } });
  });

  describeAiSdkProvider('Vercel AI SDK, Anthropic provider', () => createAnthropic({ baseURL: `${served.url()}/v1`, apiKey: KEY }).languageModel(MODEL));
});
