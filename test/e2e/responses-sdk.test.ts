/**
 * OpenAI's Responses API (`/v1/responses`) through the vendor's own clients — the `openai` SDK
 * and the Vercel AI SDK's OpenAI Responses provider — against `runtime up`: one mocker worker
 * over a tiny random Qwen3 (Hermes `<tool_call>`, `<think>`) under `--reasoning-parser think`.
 *
 * The model is random: what is certain is what a grammar forces (a forced call, a schema'd
 * object, a `<think>` block under a grammar), and that a fixed seed repeats an output, so a
 * stream and a unary answer with the same seed must agree exactly. `seed`,
 * `structured_outputs` and `chat_template_kwargs` are Tandem's extensions (docs/api-endpoints.md).
 */
import { join } from 'node:path';
import { createOpenAI } from '@ai-sdk/openai';
import OpenAI from 'openai';
import { zodTextFormat } from 'openai/helpers/zod';
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { makeTinyModel } from '../../workers/models/index.js';
import { upForBlock } from './up.js';
import { describeAiSdkProvider, WeatherInput } from './ai-sdk-provider.js';

const MODEL = 'tiny-qwen3';
const WEATHER_TOOL: OpenAI.Responses.FunctionTool = {
  type: 'function',
  name: 'get_weather',
  description: 'Weather forecast for a city',
  strict: true,
  parameters: { type: 'object', properties: { city: { type: 'string', pattern: '^[A-Z][a-z]{1,11}$' }, unit: { type: 'string', enum: ['c', 'f'] } }, required: ['city', 'unit'], additionalProperties: false },
};
const Recipe = z.object({ name: z.string().regex(/^[a-z]+( [a-z]+)?$/), servings: z.number().int().min(1).max(12), vegetarian: z.boolean() });
const THINK_GRAMMAR = 'root ::= "<think>" [a-z ]{1,20} "</think>" [a-z]{1,10}';

type Params = OpenAI.Responses.ResponseCreateParamsNonStreaming & { seed?: number; structured_outputs?: unknown; chat_template_kwargs?: unknown };
type EventType = OpenAI.Responses.ResponseStreamEvent['type'];

/** A text-only answer's events, in order, as the SDK's own types name them. */
const TEXT_SEQUENCE: EventType[] = ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added', 'response.output_text.delta'];
const TEXT_END: EventType[] = ['response.output_text.done', 'response.content_part.done', 'response.output_item.done'];

/** Consecutive repeats collapsed: the order of kinds of events. */
const runs = (types: string[]): string[] => types.filter((t, i) => t !== types[i - 1]);

describe('OpenAI clients against runtime up, Responses API (tiny-qwen3, --reasoning-parser think, mocker)', () => {
  const served = upForBlock('tandem-responses-', async (cacheDir) => {
    const dir = join(cacheDir, MODEL);
    await makeTinyModel({ arch: 'qwen3', outDir: dir });
    return ['--model', dir, '--reasoning-parser', 'think', '--engine', 'mocker', '--workers', '1', '--speedup-ratio', '100', '--log-level', 'warn'];
  });
  let client: OpenAI;
  beforeAll(() => {
    client = new OpenAI({ baseURL: `${served.url()}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
  });
  const base = { model: MODEL, max_output_tokens: 24, temperature: 0.8 } as const;

  it('responses.create, unary: a completed (or incomplete) response with a message item and usage', async () => {
    const response = await client.responses.create({ ...base, input: 'Say something.', seed: 1 } as Params);
    expect(response.id).toMatch(/^resp_/);
    expect(['completed', 'incomplete']).toContain(response.status);
    if (response.status === 'incomplete') expect(response.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    expect(response.output.map((o) => o.type)).toEqual(['message']);
    expect(response.output_text.length).toBeGreaterThan(0);
    expect(response.usage!.input_tokens).toBeGreaterThan(5);
    expect(response.usage!.total_tokens).toBe(response.usage!.input_tokens + response.usage!.output_tokens);
  });

  it('responses.create, streamed: the event sequence in order, numbered from 0, ending in the unary response for the same seed', async () => {
    const params = { ...base, input: 'Stream something.', seed: 2 } as Params;
    const unary = await client.responses.create(params);
    const stream = await client.responses.create({ ...params, stream: true });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const last = unary.status === 'completed' ? 'response.completed' : 'response.incomplete';
    expect(runs(events.map((e) => e.type))).toEqual([...TEXT_SEQUENCE, ...TEXT_END, last]);
    const end = events.at(-1) as OpenAI.Responses.ResponseCompletedEvent;
    const text = events.flatMap((e) => (e.type === 'response.output_text.delta' ? [e.delta] : [])).join('');
    expect(text).toBe(unary.output_text);
    // The second run may hit the first's prefix cache: cached_tokens is the one field that may differ.
    expect({ ...end.response.usage, input_tokens_details: null }).toEqual({ ...unary.usage, input_tokens_details: null });
    expect(end.response.output.map((o) => o.type)).toEqual(['message']);
  });

  it('responses.stream helper: finalResponse() has the same output text as unary', async () => {
    const params = { ...base, input: 'Helpers.', seed: 3 } as Params;
    const unary = await client.responses.create(params);
    const stream = client.responses.stream(params);
    let deltas = '';
    stream.on('response.output_text.delta', (e) => (deltas += e.delta));
    const final = await stream.finalResponse();
    expect(final.output_text).toBe(unary.output_text);
    expect(deltas).toBe(unary.output_text);
  });

  it('a two-turn tool loop through previous_response_id: a forced function_call, then its output, then text', async () => {
    const first = await client.responses.create({ ...base, max_output_tokens: 128, input: 'Weather in Oslo?', tools: [WEATHER_TOOL], tool_choice: { type: 'function', name: 'get_weather' }, seed: 4 } as Params);
    const calls = first.output.filter((o): o is OpenAI.Responses.ResponseFunctionToolCall => o.type === 'function_call');
    expect(calls.length).toBe(1);
    expect(calls[0]!.name).toBe('get_weather');
    const args = JSON.parse(calls[0]!.arguments) as unknown;
    expect(WeatherInput.safeParse(args).success, calls[0]!.arguments).toBe(true);

    const second = await client.responses.create({
      ...base,
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: calls[0]!.call_id, output: JSON.stringify({ forecast: 'rain', tempC: 7 }) }],
      tools: [WEATHER_TOOL],
      tool_choice: 'none',
      seed: 5,
    } as Params);
    expect(second.previous_response_id).toBe(first.id);
    expect(second.output.some((o) => o.type === 'function_call')).toBe(false);
    expect(second.output_text.length).toBeGreaterThan(0);
    // The first turn, its call and the call's output are all in the second prompt.
    expect(second.usage!.input_tokens).toBeGreaterThan(first.usage!.input_tokens + 10);
    expect((await client.responses.retrieve(first.id)).output).toEqual(first.output);
  });

  it('a streamed forced call: function_call_arguments.delta pieces and .done carry the arguments', async () => {
    const stream = await client.responses.create({ ...base, max_output_tokens: 128, input: 'Weather, streamed.', tools: [WEATHER_TOOL], tool_choice: 'required', parallel_tool_calls: false, stream: true, seed: 6 } as unknown as OpenAI.Responses.ResponseCreateParamsStreaming);
    const types: EventType[] = [];
    let deltas = '';
    let done = '';
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === 'response.function_call_arguments.delta') deltas += e.delta;
      if (e.type === 'response.function_call_arguments.done') done = e.arguments;
    }
    expect(runs(types)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added', 'response.function_call_arguments.delta', 'response.function_call_arguments.done', 'response.output_item.done', 'response.completed']);
    expect(deltas).toBe(done);
    expect(WeatherInput.safeParse(JSON.parse(done)).success, done).toBe(true);
  });

  it('responses.parse with a zod text format: output_parsed validates', async () => {
    const response = await client.responses.parse({ ...base, max_output_tokens: 200, input: 'A recipe.', text: { format: zodTextFormat(Recipe, 'recipe') }, seed: 7 } as Params & { text: { format: ReturnType<typeof zodTextFormat<typeof Recipe>> } });
    expect(Recipe.safeParse(response.output_parsed).success, response.output_text).toBe(true);
  });

  it('a reasoning item from the reasoning parser, unary and streamed (reasoning_text.delta) alike', async () => {
    const params = { ...base, max_output_tokens: 64, input: 'Think, then answer.', chat_template_kwargs: { enable_thinking: true }, structured_outputs: { grammar: THINK_GRAMMAR }, seed: 8 } as Params;
    const unary = await client.responses.create(params);
    expect(unary.output.map((o) => o.type)).toEqual(['reasoning', 'message']);
    const reasoning = (unary.output[0] as OpenAI.Responses.ResponseReasoningItem).content![0]!.text;
    expect(reasoning).toMatch(/^[a-z ]{1,20}$/);
    expect(unary.output_text).toMatch(/^[a-z]{1,10}$/);
    const stream = await client.responses.create({ ...params, stream: true });
    let streamed = '';
    const types: EventType[] = [];
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === 'response.reasoning_text.delta') streamed += e.delta;
    }
    expect(streamed).toBe(reasoning);
    // The <think> block's tokens, tags included: some, and fewer than the whole output.
    expect(unary.usage!.output_tokens_details.reasoning_tokens).toBeGreaterThan(0);
    expect(unary.usage!.output_tokens_details.reasoning_tokens).toBeLessThan(unary.usage!.output_tokens);
    expect(runs(types).slice(0, 5)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added', 'response.reasoning_text.delta']);
  });

  it('bad input: an unknown previous_response_id, an input_image and a built-in tool are 400s naming the field', async () => {
    const cases: Array<[Params, string]> = [
      [{ ...base, input: 'x', previous_response_id: 'resp_unknown' }, 'previous_response_id'],
      [{ ...base, input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://example.com/a.png', detail: 'auto' }] }] }, 'input[0].content[0]'],
      [{ ...base, input: 'x', tools: [{ type: 'web_search_preview' }] }, 'tools[0]'],
    ];
    for (const [params, param] of cases) {
      const err = await client.responses.create(params).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe(param);
    }
  });

  it('responses.delete forgets a stored response; retrieve is then a 404', async () => {
    const response = await client.responses.create({ ...base, input: 'Forget me.', seed: 9 } as Params);
    await client.responses.delete(response.id);
    expect(await client.responses.retrieve(response.id).catch((e: unknown) => e)).toBeInstanceOf(OpenAI.NotFoundError);
  });

  describeAiSdkProvider('Vercel AI SDK, OpenAI Responses provider', () => createOpenAI({ baseURL: `${served.url()}/v1`, apiKey: 'unused' }).responses(MODEL));
});

describe('Responses API under --router-mode kv (two mocker workers), --responses-store-size 1', () => {
  const served = upForBlock('tandem-responses-kv-', async () => ['--model', 'tiny', '--engine', 'mocker', '--workers', '2', '--speedup-ratio', '100', '--log-level', 'warn', '--router-mode', 'kv', '--responses-store-size', '1']);

  it('a follow-up turn through previous_response_id goes to the worker that holds the previous turn’s KV', async () => {
    const client = new OpenAI({ baseURL: `${served.url()}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
    // A long first turn: its prompt's blocks are the overlap the router scores the second turn by.
    const long = Array.from({ length: 60 }, (_, i) => `fact ${i}: the river runs north past the mill.`).join(' ');
    const firsts: string[] = [];
    for (let trial = 0; trial < 4; trial++) {
      const first = await client.responses.create({ model: 'tiny-llama', input: `${trial} ${long}`, max_output_tokens: 8, seed: trial } as Params).withResponse();
      const second = await client.responses
        .create({ model: 'tiny-llama', input: 'And the mill?', previous_response_id: first.data.id, max_output_tokens: 8, seed: trial } as Params)
        .withResponse();
      expect(second.response.headers.get('x-worker-instance-id')).toBe(first.response.headers.get('x-worker-instance-id'));
      // The second prompt begins with the first: most of it is served from that worker's cache.
      expect(second.data.usage!.input_tokens_details.cached_tokens).toBeGreaterThan(first.data.usage!.input_tokens / 2);
      firsts.push(first.data.id);
    }
    // The store holds one response (the flag reached the frontend through `up`): every first turn was evicted by its follow-up.
    for (const id of firsts) expect(await client.responses.retrieve(id).catch((e: unknown) => e)).toBeInstanceOf(OpenAI.NotFoundError);
  });
});

