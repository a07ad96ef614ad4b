/**
 * What the vendors' own clients read beyond the text, over a real socket (in-process frontend,
 * fake workers, the byte codec: one token per byte, so every count is known in advance):
 *   - Anthropic usage: the prompt is input_tokens + cache_read_input_tokens (+ creation), so a
 *     prefix-cache hit is not counted twice; the streamed message ends with the same usage;
 *   - Responses usage: reasoning_tokens counts the tokens of the `<think>` block;
 *   - Responses logprobs: `include: ["message.output_text.logprobs"]` returns the message text's
 *     tokens, with `top_logprobs` alternatives, and none for reasoning;
 *   - a 400 from chat validation or the pipeline names the client's API's field, and every path
 *     under `/v1/messages` answers in Anthropic's error shape.
 * Clients: `openai`, `@anthropic-ai/sdk`, and the AI SDK's OpenAI Responses and Anthropic providers.
 */
import Anthropic from '@anthropic-ai/sdk';
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText } from 'ai';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestFrontend, type TestFrontend } from './harness.js';

const THINK = '<think>abc</think>';
const ANSWER = 'Hi.';
const PLAIN = 'Hello there.';
const CACHED = 7;
/** A forced call's parameters schema the grammar engine refuses (uniqueItems). */
const BAD_SCHEMA = { type: 'array', uniqueItems: true };

type ResponseParams = OpenAI.Responses.ResponseCreateParamsNonStreaming;

describe('vendor SDKs over a real socket: usage, reasoning tokens, logprobs, error fields', () => {
  let t: TestFrontend;
  let openai: OpenAI;
  let anthropic: Anthropic;
  beforeAll(async () => {
    t = await startTestFrontend({ reasoningParser: 'think', toolCallParser: 'hermes' }, async (cluster) => {
      await cluster.addWorker({ text: PLAIN, cachedTokens: CACHED }, { name: 'cached-model' });
      await cluster.addWorker({ text: `${THINK}${ANSWER}` }, { name: 'think-model' });
      await cluster.addWorker({ text: PLAIN }, { name: 'plain-model' });
    });
    openai = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    anthropic = new Anthropic({ baseURL: t.url, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(() => t.close());

  describe('Anthropic usage: input_tokens excludes the prefix-cache hit', () => {
    const params = { model: 'cached-model', max_tokens: 32, messages: [{ role: 'user' as const, content: 'Count my prompt.' }] };

    it('unary and streamed: input_tokens + cache_read_input_tokens is the prompt count_tokens gives', async () => {
      const prompt = (await anthropic.messages.countTokens({ model: params.model, messages: params.messages })).input_tokens;
      expect(prompt).toBeGreaterThan(CACHED);
      const unary = await anthropic.messages.create(params);
      expect(unary.usage).toMatchObject({ input_tokens: prompt - CACHED, cache_read_input_tokens: CACHED, cache_creation_input_tokens: 0, output_tokens: PLAIN.length + 1 });
      // message_start cannot know the hit yet; message_delta's totals overwrite its counts.
      const streamed = await anthropic.messages.stream(params).finalMessage();
      expect(streamed.usage).toMatchObject({ input_tokens: unary.usage.input_tokens, cache_read_input_tokens: CACHED, output_tokens: unary.usage.output_tokens });
    });

    it('the AI SDK Anthropic provider reads the same split', async () => {
      const model = createAnthropic({ baseURL: `${t.url}/v1`, apiKey: 'unused' }).languageModel('cached-model');
      const prompt = (await anthropic.messages.countTokens({ model: params.model, messages: params.messages })).input_tokens;
      const result = await generateText({ model, maxRetries: 0, maxOutputTokens: 32, prompt: 'Count my prompt.' });
      expect(result.usage.cachedInputTokens).toBe(CACHED);
      expect(result.usage.inputTokens).toBe(prompt - CACHED);
    });
  });

  describe('Responses: reasoning tokens', () => {
    it('output_tokens_details.reasoning_tokens counts the <think> block, unary and streamed', async () => {
      const params: ResponseParams = { model: 'think-model', input: 'Think first.', max_output_tokens: 64 };
      const unary = await openai.responses.create(params);
      expect(unary.output.map((o) => o.type)).toEqual(['reasoning', 'message']);
      expect(unary.output_text).toBe(ANSWER);
      // One byte, one token: the tags count (as Anthropic's thinking_tokens), the answer and EOS do not.
      expect(unary.usage).toMatchObject({ output_tokens: THINK.length + ANSWER.length + 1, output_tokens_details: { reasoning_tokens: THINK.length } });
      const stream = await openai.responses.create({ ...params, stream: true });
      let completed: OpenAI.Responses.Response | undefined;
      for await (const event of stream) if (event.type === 'response.completed') completed = event.response;
      expect(completed!.usage).toEqual(unary.usage);
    });

    it('no reasoning, no reasoning tokens', async () => {
      const response = await openai.responses.create({ model: 'plain-model', input: 'Answer.', max_output_tokens: 64 });
      expect(response.usage!.output_tokens_details.reasoning_tokens).toBe(0);
    });

    it('the AI SDK OpenAI Responses provider reports them as usage.reasoningTokens', async () => {
      const model = createOpenAI({ baseURL: `${t.url}/v1`, apiKey: 'unused' }).responses('think-model');
      const result = await generateText({ model, maxRetries: 0, maxOutputTokens: 64, prompt: 'Think first.' });
      expect(result.text).toBe(ANSWER);
      expect(result.usage.reasoningTokens).toBe(THINK.length);
    });
  });

  describe('Responses: logprobs', () => {
    const include: OpenAI.Responses.ResponseIncludable[] = ['message.output_text.logprobs'];

    it('include message.output_text.logprobs: one entry per token of the text, with top_logprobs alternatives; streamed the same', async () => {
      const params: ResponseParams = { model: 'plain-model', input: 'Answer.', max_output_tokens: 64, include, top_logprobs: 2 };
      const unary = await openai.responses.create(params);
      const part = (unary.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as OpenAI.Responses.ResponseOutputText;
      expect(part.text).toBe(PLAIN);
      expect(part.logprobs!.map((l) => l.token).join('')).toBe(PLAIN);
      for (const l of part.logprobs!) {
        expect(l.logprob).toBe(-0.25);
        expect(l.bytes).toEqual([...Buffer.from(l.token)]);
        expect(l.top_logprobs).toHaveLength(2);
      }
      expect(unary.top_logprobs).toBe(2);
      expect(t.cluster.allCalls().at(-1)!.request.logprobs).toBe(2);

      const stream = await openai.responses.create({ ...params, stream: true });
      const deltas: OpenAI.Responses.ResponseTextDeltaEvent.Logprob[] = [];
      let done: OpenAI.Responses.ResponseTextDoneEvent | undefined;
      for await (const event of stream) {
        if (event.type === 'response.output_text.delta') deltas.push(...event.logprobs);
        if (event.type === 'response.output_text.done') done = event;
      }
      expect(deltas).toEqual(part.logprobs);
      expect(done!.logprobs).toEqual(part.logprobs);
    });

    it('reasoning tokens and the </think> tag carry none: the logprobs are the answer’s tokens', async () => {
      const response = await openai.responses.create({ model: 'think-model', input: 'Think first.', max_output_tokens: 64, include });
      const message = response.output.find((o): o is OpenAI.Responses.ResponseOutputMessage => o.type === 'message')!;
      const logprobs = (message.content[0] as OpenAI.Responses.ResponseOutputText).logprobs!;
      expect(logprobs.map((l) => l.token).join('')).toBe(ANSWER);
      expect(logprobs.every((l) => l.top_logprobs.length === 0)).toBe(true);
    });

    it('without include there are none, and the worker is not asked for them; top_logprobs alone is echoed, as OpenAI does', async () => {
      for (const extra of [{}, { top_logprobs: 3 }]) {
        const response = await openai.responses.create({ model: 'plain-model', input: 'Answer.', max_output_tokens: 64, ...extra });
        expect(((response.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as OpenAI.Responses.ResponseOutputText).logprobs).toEqual([]);
        expect(response.top_logprobs).toBe('top_logprobs' in extra ? 3 : null);
        expect(t.cluster.allCalls().at(-1)!.request.logprobs).toBeUndefined();
      }
    });

    it('the AI SDK OpenAI Responses provider gets them in providerMetadata', async () => {
      const model = createOpenAI({ baseURL: `${t.url}/v1`, apiKey: 'unused' }).responses('plain-model');
      const result = await generateText({ model, maxRetries: 0, maxOutputTokens: 64, prompt: 'Answer.', providerOptions: { openai: { logprobs: 2 } } });
      const logprobs = (result.providerMetadata?.openai?.logprobs as Array<Array<{ token: string; top_logprobs: unknown[] }>>)[0]!;
      expect(logprobs.map((l) => l.token).join('')).toBe(result.text);
      expect(logprobs.every((l) => l.top_logprobs.length === 2)).toBe(true);
    });

    it('a bad include or top_logprobs is a 400 naming it', async () => {
      for (const [extra, param] of [
        [{ include: ['message.output_text.everything'] }, 'include[0]'],
        [{ include, top_logprobs: 21 }, 'top_logprobs'],
      ] as const) {
        const err = await openai.responses.create({ model: 'plain-model', input: 'x', ...(extra as object) } as ResponseParams).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(OpenAI.BadRequestError);
        expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe(param);
      }
    });
  });

  describe('400s name the client API’s fields', () => {
    it('Responses: context length on max_output_tokens, a forced tool’s schema on tools[0].parameters, an output schema on text.format', async () => {
      const cases: Array<[ResponseParams, string, RegExp]> = [
        [{ model: 'plain-model', input: 'x', max_output_tokens: 100_000 }, 'max_output_tokens', /maximum context length/],
        [{ model: 'plain-model', input: 'x', tools: [{ type: 'function', name: 'tag', parameters: BAD_SCHEMA, strict: false }], tool_choice: 'required' }, 'tools[0].parameters', /'tools\[0\]\.parameters' \(function 'tag'\)/],
        [{ model: 'plain-model', input: 'x', text: { format: { type: 'json_schema', name: 'tags', schema: BAD_SCHEMA } } }, 'text.format', /uniqueItems/],
      ];
      for (const [params, param, message] of cases) {
        const err = await openai.responses.create(params).catch((e: unknown) => e);
        expect(err, param).toBeInstanceOf(OpenAI.BadRequestError);
        const bad = err as InstanceType<typeof OpenAI.BadRequestError>;
        expect(bad.param).toBe(param);
        expect(bad.message).toMatch(message);
        expect(bad.message).not.toMatch(/max_tokens|function\.parameters|response_format/);
      }
    });

    it('Messages: a forced tool’s schema is named tools[0].input_schema, as the client sent it', async () => {
      const err = await anthropic.messages
        .create({ model: 'plain-model', max_tokens: 16, messages: [{ role: 'user', content: 'x' }], tools: [{ name: 'tag', input_schema: BAD_SCHEMA as unknown as Anthropic.Tool.InputSchema }], tool_choice: { type: 'any' } })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(Anthropic.BadRequestError);
      const message = (err as InstanceType<typeof Anthropic.BadRequestError>).error as { error: { type: string; message: string } };
      expect(message.error.type).toBe('invalid_request_error');
      expect(message.error.message).toMatch(/^'tools\[0\]\.input_schema' \(function 'tag'\)/);
    });

    it('every path under /v1/messages answers in Anthropic’s shape: count_tokens’ 400, an unknown route’s 404', async () => {
      const count = await anthropic.messages.countTokens({ model: 'plain-model', messages: [] }).catch((e: unknown) => e);
      expect(count).toBeInstanceOf(Anthropic.BadRequestError);
      expect((count as InstanceType<typeof Anthropic.BadRequestError>).error).toMatchObject({ type: 'error', error: { type: 'invalid_request_error', message: expect.stringContaining('messages') } });
      const batches = await anthropic.messages.batches.list().catch((e: unknown) => e);
      expect(batches).toBeInstanceOf(Anthropic.NotFoundError);
      expect((batches as InstanceType<typeof Anthropic.NotFoundError>).error).toMatchObject({ type: 'error', error: { type: 'not_found_error' } });
    });
  });
});
