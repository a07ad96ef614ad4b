/**
 * Structured output, tool calls and reasoning through real client SDKs (issue 16): `runtime up`
 * with the mocker over a tiny random model, asked by the Vercel AI SDK (`ai` +
 * `@ai-sdk/openai-compatible`, zod schemas) and by the `openai` SDK.
 *
 * The model is random: only what a grammar forces is certain (a schema'd object, a call under
 * `tool_choice: required` or a named function, a `<think>` block under a grammar), so every
 * assertion is about shape and validity, never about which words came out. The mocker's tokens
 * are a function of (seed, position) within the mask, so a fixed seed repeats an output: a
 * stream and a unary answer with the same seed must agree exactly.
 *
 * Fleets: tiny-llama (Llama 3 JSON tool calls) for the AI SDK; a tiny Qwen3 (Hermes
 * `<tool_call>`, `<think>` reasoning) under `--reasoning-parser think` for the openai SDK.
 */
import { join } from 'node:path';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateObject, generateText, stepCountIs, streamObject, streamText, tool } from 'ai';
import OpenAI from 'openai';
import { zodFunction, zodResponseFormat } from 'openai/helpers/zod';
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { makeTinyModel } from '../../workers/models/index.js';
import { upForBlock } from './up.js';

/** A mocker worker that answers at once: these tests measure shapes, not timing. */
const MOCKER = ['--engine', 'mocker', '--workers', '1', '--speedup-ratio', '100', '--log-level', 'warn'];

/** An object a random model can only produce under the schema's grammar. */
const Recipe = z.object({
  name: z.string().regex(/^[a-z]+( [a-z]+)?$/),
  servings: z.number().int().min(1).max(12),
  vegetarian: z.boolean(),
  difficulty: z.enum(['easy', 'medium', 'hard']),
  ingredients: z.array(z.object({ item: z.string(), grams: z.number().min(0).max(1000) })).min(1).max(3),
  rating: z.number().int().min(1).max(5).nullable(),
  // The openai SDK writes a bare nullable string as OpenAPI's `nullable: true`.
  note: z.string().nullable(),
});

const WeatherInput = z.object({
  city: z.string().regex(/^[A-Z][a-z]{1,11}$/),
  unit: z.enum(['c', 'f']),
  days: z.number().int().min(1).max(7),
});
const TimeInput = z.object({ zone: z.enum(['utc', 'local']) });

/** A fleet under `runtime up` (one mocker worker), its cache dir removed afterwards. */
function fleet(prefix: string, args: (cacheDir: string) => Promise<string[]>): { url: () => string } {
  return upForBlock(prefix, async (cacheDir) => [...(await args(cacheDir)), ...MOCKER]);
}

describe('Vercel AI SDK against runtime up (tiny-llama, mocker)', () => {
  const served = fleet('tandem-sdk-ai-', async () => ['--model', 'tiny']);
  /** Every request body the SDK sent, in order. */
  const sent: Array<Record<string, unknown>> = [];
  const model = () =>
    createOpenAICompatible({
      name: 'tandem',
      baseURL: `${served.url()}/v1`,
      apiKey: 'unused',
      supportsStructuredOutputs: true,
      fetch: async (input, init) => {
        if (typeof init?.body === 'string') sent.push(JSON.parse(init.body) as Record<string, unknown>);
        return fetch(input, init);
      },
    }).chatModel('tiny-llama');
  const common = { maxRetries: 0, temperature: 0.8, maxOutputTokens: 256 } as const;

  it('generateObject with a zod schema: the object validates, sent as a json_schema response_format', async () => {
    const result = await generateObject({ ...common, model: model(), schema: Recipe, prompt: 'A recipe, please.', seed: 11 });
    expect(Recipe.safeParse(result.object).success, JSON.stringify(result.object)).toBe(true);
    expect(result.finishReason).toBe('stop');
    expect(sent.at(-1)!.response_format).toMatchObject({ type: 'json_schema', json_schema: { schema: { type: 'object' } } });
  });

  it('streamObject: the last partial object is the final object, which validates', async () => {
    const result = streamObject({ ...common, model: model(), schema: Recipe, prompt: 'Another recipe.', seed: 12 });
    const partials: unknown[] = [];
    for await (const partial of result.partialObjectStream) partials.push(partial);
    const object = await result.object;
    expect(Recipe.safeParse(object).success, JSON.stringify(object)).toBe(true);
    // Streamed in pieces, ending in exactly the object generateObject-style parsing gives.
    expect(partials.length).toBeGreaterThan(1);
    expect(partials.at(-1)).toEqual(object);
  });

  it("generateText with tools and toolChoice 'required': a call whose input validates, executed by the SDK", async () => {
    const ran: unknown[] = [];
    const result = await generateText({
      ...common,
      model: model(),
      prompt: 'What is the weather in Paris?',
      seed: 21,
      tools: {
        get_weather: tool({ description: 'Weather forecast for a city', inputSchema: WeatherInput, execute: async (input) => (ran.push(input), { tempC: 21 }) }),
        get_time: tool({ description: 'The current time', inputSchema: TimeInput, execute: async () => ({ time: '12:00' }) }),
      },
      toolChoice: 'required',
    });
    expect(result.toolCalls.length).toBeGreaterThanOrEqual(1);
    for (const call of result.toolCalls) {
      const schema = call.toolName === 'get_weather' ? WeatherInput : TimeInput;
      expect(schema.safeParse(call.input).success, JSON.stringify(call)).toBe(true);
      expect(call.dynamic ?? false).toBe(false);
    }
    // Every call ran, and its result is the step's tool result.
    expect(result.toolResults.map((r) => r.toolCallId)).toEqual(result.toolCalls.map((c) => c.toolCallId));
    expect(ran).toEqual(result.toolCalls.filter((c) => c.toolName === 'get_weather').map((c) => c.input));
    expect(sent.at(-1)).toMatchObject({ tool_choice: 'required' });
  });

  it('a multi-step tool loop: step 1 calls the tool, step 2 gets its result back and answers in text', async () => {
    const ran: unknown[] = [];
    const before = sent.length;
    const result = await generateText({
      ...common,
      model: model(),
      prompt: 'Plan my trip to Oslo.',
      seed: 31,
      tools: { get_weather: tool({ description: 'Weather forecast for a city', inputSchema: WeatherInput, execute: async (input) => (ran.push(input), { forecast: 'rain', tempC: 7 }) }) },
      toolChoice: 'required',
      stopWhen: stepCountIs(4),
      // Forced once, then free: a random model would otherwise call tools until the step limit.
      prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: 'none' } : undefined),
    });
    expect(result.steps.length).toBe(2);
    const [first, second] = result.steps;
    expect(first!.finishReason).toBe('tool-calls');
    expect(first!.toolCalls.length).toBeGreaterThanOrEqual(1);
    expect(ran.length).toBe(first!.toolCalls.length);
    for (const input of ran) expect(WeatherInput.safeParse(input).success, JSON.stringify(input)).toBe(true);
    expect(second!.toolCalls).toEqual([]);
    expect(second!.text.length).toBeGreaterThan(0);
    expect(result.text).toBe(second!.text);

    // The second request carried the assistant's calls and each call's result, by id.
    const requests = sent.slice(before);
    expect(requests.length).toBe(2);
    expect(requests[1]!.tool_choice).toBe('none');
    const messages = requests[1]!.messages as Array<{ role: string; tool_calls?: Array<{ id: string; function: { name: string; arguments: string } }>; tool_call_id?: string; content?: unknown }>;
    const assistant = messages.find((m) => m.role === 'assistant');
    expect(assistant?.tool_calls?.map((c) => c.id)).toEqual(first!.toolCalls.map((c) => c.toolCallId));
    expect(assistant!.tool_calls!.map((c) => JSON.parse(c.function.arguments) as unknown)).toEqual(ran);
    const toolMessages = messages.filter((m) => m.role === 'tool');
    expect(toolMessages.map((m) => m.tool_call_id)).toEqual(first!.toolCalls.map((c) => c.toolCallId));
    expect(JSON.parse(toolMessages[0]!.content as string)).toEqual({ forecast: 'rain', tempC: 7 });
    // The tool result made it into the prompt: step 2's prompt is step 1's plus the call and its result.
    expect(second!.usage.inputTokens!).toBeGreaterThan(first!.usage.inputTokens! + 10);
  });

  it('streamText with tools: tool-call parts arrive, inputs validate, the SDK executes them', async () => {
    const ran: unknown[] = [];
    const result = streamText({
      ...common,
      model: model(),
      prompt: 'Weather in Rome, streamed.',
      seed: 41,
      tools: { get_weather: tool({ description: 'Weather forecast for a city', inputSchema: WeatherInput, execute: async (input) => (ran.push(input), { tempC: 25 }) }) },
      toolChoice: 'required',
    });
    const types = new Set<string>();
    const calls: Array<{ toolCallId: string; input: unknown }> = [];
    const results: string[] = [];
    for await (const part of result.fullStream) {
      types.add(part.type);
      if (part.type === 'error') throw part.error;
      if (part.type === 'tool-call') calls.push({ toolCallId: part.toolCallId, input: part.input });
      if (part.type === 'tool-result') results.push(part.toolCallId);
    }
    expect(calls.length).toBeGreaterThanOrEqual(1);
    for (const call of calls) expect(WeatherInput.safeParse(call.input).success, JSON.stringify(call.input)).toBe(true);
    // Argument text streamed as input deltas before each call was complete.
    expect(types).toContain('tool-input-start');
    expect(types).toContain('tool-input-delta');
    expect(results).toEqual(calls.map((c) => c.toolCallId));
    expect(ran).toEqual(calls.map((c) => c.input));
    expect(sent.at(-1)).toMatchObject({ stream: true, tool_choice: 'required' });
  });
});

describe('openai SDK against runtime up (tiny-qwen3, --reasoning-parser think, mocker)', () => {
  const MODEL = 'tiny-qwen3';
  const served = fleet('tandem-sdk-openai-', async (cacheDir) => {
    const dir = join(cacheDir, MODEL);
    await makeTinyModel({ arch: 'qwen3', outDir: dir });
    return ['--model', dir, '--reasoning-parser', 'think'];
  });
  let client: OpenAI;
  beforeAll(() => {
    client = new OpenAI({ baseURL: `${served.url()}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
  });
  const base = { model: MODEL, max_tokens: 256, temperature: 0.8 } as const;

  const weather = zodFunction({ name: 'get_weather', description: 'Weather forecast for a city', parameters: WeatherInput });
  const time = zodFunction({ name: 'get_time', description: 'The current time', parameters: TimeInput });
  const argsSchema = (name: string) => (name === 'get_weather' ? WeatherInput : TimeInput);

  describe('structured output and tool calls', () => {
    it('chat.completions.parse with zodResponseFormat: message.parsed validates', async () => {
      const completion = await client.chat.completions.parse({
        ...base,
        messages: [{ role: 'user', content: 'A recipe as JSON.' }],
        response_format: zodResponseFormat(Recipe, 'recipe'),
        seed: 51,
      });
      const choice = completion.choices[0]!;
      expect(choice.finish_reason).toBe('stop');
      expect(choice.message.parsed).not.toBeNull();
      expect(Recipe.safeParse(choice.message.parsed).success, choice.message.content ?? '').toBe(true);
      expect(choice.message.parsed).toEqual(JSON.parse(choice.message.content!));
    });

    it("unary, a named function: one call whose arguments parse and validate, finish_reason 'tool_calls'", async () => {
      const completion = await client.chat.completions.create({
        ...base,
        messages: [{ role: 'user', content: 'Weather in Lyon?' }],
        tools: [weather, time],
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
        seed: 61,
      });
      const choice = completion.choices[0]!;
      expect(choice.finish_reason).toBe('tool_calls');
      const calls = choice.message.tool_calls!;
      expect(calls.length).toBe(1);
      const call = calls[0]!;
      expect(call.type).toBe('function');
      expect(call.id).toMatch(/^call_/);
      if (call.type !== 'function') throw new Error('not a function call');
      expect(call.function.name).toBe('get_weather');
      expect(WeatherInput.safeParse(JSON.parse(call.function.arguments)).success, call.function.arguments).toBe(true);
      // The call's text is not left in content.
      expect(choice.message.content ?? '').not.toContain('<tool_call>');
    });

    it('chat.completions.parse with zodFunction tools fills parsed_arguments from the forced call', async () => {
      const completion = await client.chat.completions.parse({
        ...base,
        messages: [{ role: 'user', content: 'What time is it?' }],
        tools: [weather, time],
        tool_choice: { type: 'function', function: { name: 'get_time' } },
        seed: 62,
      });
      const call = completion.choices[0]!.message.tool_calls![0]!;
      if (call.type !== 'function') throw new Error('not a function call');
      expect(call.function.name).toBe('get_time');
      expect(TimeInput.safeParse(call.function.parsed_arguments).success).toBe(true);
      expect(call.function.parsed_arguments).toEqual(JSON.parse(call.function.arguments));
    });

    /** A streamed response's calls reassembled by index, checking OpenAI's delta shape on the way. */
    async function streamedCalls(params: OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming) {
      const stream = await client.chat.completions.create(params);
      const calls: Array<{ id: string; name: string; arguments: string; deltas: number }> = [];
      let finish: string | null = null;
      let content = '';
      for await (const chunk of stream) {
        const choice = chunk.choices[0];
        if (!choice) continue;
        content += choice.delta.content ?? '';
        finish = choice.finish_reason ?? finish;
        for (const delta of choice.delta.tool_calls ?? []) {
          const call = calls[delta.index];
          if (call === undefined) {
            // The first delta of a call names it: id, type and function name.
            expect(delta.index).toBe(calls.length);
            expect(delta.id).toMatch(/^call_/);
            expect(delta.type).toBe('function');
            expect(delta.function?.name).toBeTruthy();
            calls[delta.index] = { id: delta.id!, name: delta.function!.name!, arguments: delta.function?.arguments ?? '', deltas: 1 };
          } else {
            // Later deltas carry argument text only.
            expect(delta.id).toBeUndefined();
            expect(delta.function?.name).toBeUndefined();
            call.arguments += delta.function?.arguments ?? '';
            call.deltas++;
          }
        }
      }
      return { calls, finish, content };
    }

    it('streamed, a named function: deltas by index reassemble into the unary call for the same seed', async () => {
      const params = { ...base, messages: [{ role: 'user' as const, content: 'Weather in Nice?' }], tools: [weather, time], tool_choice: { type: 'function' as const, function: { name: 'get_weather' } }, seed: 71 };
      const unary = await client.chat.completions.create(params);
      const streamed = await streamedCalls({ ...params, stream: true });
      expect(streamed.finish).toBe('tool_calls');
      expect(streamed.calls.length).toBe(1);
      const want = unary.choices[0]!.message.tool_calls!.map((c) => (c.type === 'function' ? { name: c.function.name, arguments: c.function.arguments } : c));
      expect(streamed.calls.map((c) => ({ name: c.name, arguments: c.arguments }))).toEqual(want);
      expect(streamed.calls[0]!.deltas).toBeGreaterThan(1);
      expect(WeatherInput.safeParse(JSON.parse(streamed.calls[0]!.arguments)).success).toBe(true);
      expect(streamed.content).not.toContain('<tool_call>');
    });

    it("streamed, tool_choice 'required': every call validates against its tool and equals the unary calls", async () => {
      const params = { ...base, max_tokens: 384, messages: [{ role: 'user' as const, content: 'Weather and time in Bern.' }], tools: [weather, time], tool_choice: 'required' as const, seed: 72 };
      const unary = await client.chat.completions.create(params);
      const streamed = await streamedCalls({ ...params, stream: true });
      expect(streamed.calls.length).toBeGreaterThanOrEqual(1);
      for (const call of streamed.calls) expect(argsSchema(call.name).safeParse(JSON.parse(call.arguments)).success, JSON.stringify(call)).toBe(true);
      const want = unary.choices[0]!.message.tool_calls!.map((c) => (c.type === 'function' ? { name: c.function.name, arguments: c.function.arguments } : c));
      expect(streamed.calls.map((c) => ({ name: c.name, arguments: c.arguments }))).toEqual(want);
      expect(streamed.finish).toBe(unary.choices[0]!.finish_reason);
      expect(streamed.finish).toBe('tool_calls');
    });

    it("tool_choice 'required' with parallel_tool_calls false: exactly one call, unary and streamed", async () => {
      for (const seed of [81, 82, 83]) {
        const params = { ...base, messages: [{ role: 'user' as const, content: `Weather or time? (${seed})` }], tools: [weather, time], tool_choice: 'required' as const, parallel_tool_calls: false, seed };
        const unary = await client.chat.completions.create(params);
        expect(unary.choices[0]!.finish_reason).toBe('tool_calls');
        expect(unary.choices[0]!.message.tool_calls!.length).toBe(1);
        const streamed = await streamedCalls({ ...params, stream: true });
        expect(streamed.calls.length).toBe(1);
        expect(streamed.finish).toBe('tool_calls');
      }
    });
  });

  describe('reasoning_content (--reasoning-parser think)', () => {
    // Qwen3's template leaves opening <think> to the model; a random model only does under a grammar.
    const THINK_GRAMMAR = 'root ::= "<think>" [a-z ]{1,20} "</think>" [a-z]{1,10}';
    const params = {
      ...base,
      max_tokens: 64,
      messages: [{ role: 'user' as const, content: 'Think, then answer.' }],
      chat_template_kwargs: { enable_thinking: true },
      structured_outputs: { grammar: THINK_GRAMMAR },
    };

    it('unary: the <think> block is reasoning_content, the rest is content, neither holds a tag', async () => {
      for (const seed of [91, 92]) {
        const completion = await client.chat.completions.create({ ...params, seed } as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming);
        const message = completion.choices[0]!.message as OpenAI.Chat.Completions.ChatCompletionMessage & { reasoning_content?: string | null };
        expect(completion.choices[0]!.finish_reason).toBe('stop');
        expect(message.reasoning_content).toMatch(/^[a-z ]{1,20}$/);
        // Both parts are trimmed, so a reasoning of spaces only would be empty.
        expect(message.reasoning_content!.trim()).toBe(message.reasoning_content);
        expect(message.content).toMatch(/^[a-z]{1,10}$/);
      }
    });

    it('streamed: reasoning_content and content deltas concatenate to the unary split for the same seed', async () => {
      for (const seed of [93, 94]) {
        const unary = await client.chat.completions.create({ ...params, seed } as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming);
        const message = unary.choices[0]!.message as OpenAI.Chat.Completions.ChatCompletionMessage & { reasoning_content?: string | null };
        const stream = await client.chat.completions.create({ ...params, seed, stream: true } as OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming);
        let reasoning = '';
        let content = '';
        let reasoningChunks = 0;
        let finish: string | null = null;
        for await (const chunk of stream) {
          const choice = chunk.choices[0];
          if (!choice) continue;
          const delta = choice.delta as typeof choice.delta & { reasoning_content?: string | null };
          if (delta.reasoning_content) {
            // Reasoning all comes before the answer.
            expect(content).toBe('');
            reasoning += delta.reasoning_content;
            reasoningChunks++;
          }
          content += delta.content ?? '';
          finish = choice.finish_reason ?? finish;
        }
        expect(reasoningChunks).toBeGreaterThan(0);
        expect({ reasoning, content, finish }).toEqual({ reasoning: message.reasoning_content, content: message.content, finish: 'stop' });
        expect(reasoning + content).not.toMatch(/<\/?think>/);
      }
    });
  });

  describe('bad input: a 400 whose message names the problem', () => {
    async function badRequest(body: Record<string, unknown>): Promise<{ message: string; param: unknown }> {
      const err = await client.chat.completions
        .create({ ...base, max_tokens: 8, messages: [{ role: 'user', content: 'Hi' }], ...body } as unknown as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming)
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      const bad = err as InstanceType<typeof OpenAI.BadRequestError>;
      expect(bad.status).toBe(400);
      return { message: bad.message, param: bad.param };
    }
    const schemaFormat = (schema: unknown) => ({ response_format: { type: 'json_schema', json_schema: { name: 'bad', schema } } });

    it('an invalid schema', async () => {
      const wrongType = await badRequest(schemaFormat({ type: 'object', properties: { a: { type: 'nonsense' } } }));
      expect(wrongType.message).toMatch(/"nonsense" is not a JSON Schema type \(at #\/properties\/a\)/);
      expect(wrongType.param).toBe('response_format');
      const dangling = await badRequest(schemaFormat({ $ref: '#/$defs/missing' }));
      expect(dangling.message).toMatch(/\$ref.*#\/\$defs\/missing does not exist/);
      const notSchema = await badRequest(schemaFormat('a string'));
      expect(notSchema.message).toContain("'response_format.json_schema.schema' must be a JSON Schema");
    });

    it('an unsupported feature (uniqueItems), in response_format and in a forced tool', async () => {
      const tags = { type: 'object', properties: { tags: { type: 'array', items: { type: 'string' }, uniqueItems: true } } };
      const inFormat = await badRequest(schemaFormat(tags));
      expect(inFormat.message).toMatch(/"uniqueItems" is not supported \(at #\/properties\/tags\)/);
      const inTool = await badRequest({ tools: [{ type: 'function', function: { name: 'tag', parameters: tags } }], tool_choice: 'required' });
      expect(inTool.message).toMatch(/'tools\[0\]\.function\.parameters' \(function 'tag'\).*"uniqueItems" is not supported/);
      expect(inTool.param).toBe('tools[0].function.parameters');
    });

    it('a tool without a name', async () => {
      const noName = await badRequest({ tools: [weather, { type: 'function', function: { description: 'nameless', parameters: { type: 'object' } } }] });
      expect(noName.message).toContain("'tools[1].function.name' is required");
      expect(noName.param).toBe('tools[1]');
    });

    it('tool_choice naming an unknown function', async () => {
      const unknown = await badRequest({ tools: [weather, time], tool_choice: { type: 'function', function: { name: 'book_flight' } } });
      expect(unknown.message).toContain("'tool_choice' names a function that is not in 'tools': 'book_flight'");
      expect(unknown.param).toBe('tool_choice');
    });
  });
});
