/**
 * OpenAI compatibility, checked with the official `openai` npm client against a real socket:
 * chat and completions, streaming and unary, the models list and error classes.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestFrontend, type TestFrontend } from './harness.js';

const TEXT = 'The quick brown fox jumps over the lazy dog.';

describe('frontend: OpenAI client compatibility', () => {
  let t: TestFrontend;
  let client: OpenAI;

  beforeAll(async () => {
    t = await startTestFrontend({}, async (cluster) => {
      await cluster.addWorker({ text: TEXT, cachedTokens: 3 });
    });
    client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(() => t.close());

  it('lists the model from discovery', async () => {
    const page = await client.models.list();
    expect(page.data.map((m) => m.id)).toEqual(['fake-model']);
    expect(page.data[0]!.object).toBe('model');
  });

  it('unary chat returns the whole text, finish stop, and usage with cached tokens', async () => {
    const res = await client.chat.completions.create({ model: 'fake-model', messages: [{ role: 'user', content: 'hi' }] });
    expect(res.object).toBe('chat.completion');
    expect(res.choices[0]!.message).toMatchObject({ role: 'assistant', content: TEXT });
    expect(res.choices[0]!.finish_reason).toBe('stop');
    // '<user>hi\n<assistant>' is 20 bytes = 20 tokens; the text plus EOS is generated.
    expect(res.usage).toMatchObject({ prompt_tokens: 20, completion_tokens: TEXT.length + 1, total_tokens: 20 + TEXT.length + 1 });
    expect(res.usage!.prompt_tokens_details!.cached_tokens).toBe(3);
  });

  it('streaming chat opens with the role, concatenates to the text, and ends with usage when asked', async () => {
    const stream = await client.chat.completions.create({
      model: 'fake-model',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let role: string | undefined;
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      expect(chunk.object).toBe('chat.completion.chunk');
      if (chunk.choices.length === 0) {
        usage = chunk.usage;
        continue;
      }
      role ??= chunk.choices[0]!.delta.role;
      text += chunk.choices[0]!.delta.content ?? '';
      finish = chunk.choices[0]!.finish_reason ?? finish;
    }
    expect(role).toBe('assistant');
    expect(text).toBe(TEXT);
    expect(finish).toBe('stop');
    expect(usage).toMatchObject({ prompt_tokens: 20, completion_tokens: TEXT.length + 1 });
  });

  it('unary completion honours max_tokens with finish length', async () => {
    const res = await client.completions.create({ model: 'fake-model', prompt: 'Say', max_tokens: 9 });
    expect(res.object).toBe('text_completion');
    expect(res.choices[0]!.text).toBe(TEXT.slice(0, 9));
    expect(res.choices[0]!.finish_reason).toBe('length');
    expect(res.usage).toMatchObject({ prompt_tokens: 3, completion_tokens: 9 });
  });

  it('streaming completion with a token-id prompt takes the ids as they are', async () => {
    const stream = await client.completions.create({ model: 'fake-model', prompt: [1, 2, 3, 4, 5], max_tokens: 4, stream: true });
    let text = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]!.text;
      finish = chunk.choices[0]!.finish_reason ?? finish;
    }
    expect(text).toBe(TEXT.slice(0, 4));
    expect(finish).toBe('length');
    const call = t.cluster.allCalls().at(-1)!;
    expect(call.request.tokenIds).toEqual([1, 2, 3, 4, 5]);
  });

  it('maps errors to the client error classes with OpenAI bodies', async () => {
    const notFound = await client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }).catch((e: unknown) => e);
    expect(notFound).toBeInstanceOf(OpenAI.NotFoundError);
    expect((notFound as InstanceType<typeof OpenAI.NotFoundError>).code).toBe('model_not_found');

    const bad = await client.chat.completions.create({ model: 'fake-model', messages: [{ role: 'user', content: 'x' }], temperature: 7 }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(OpenAI.BadRequestError);
    expect((bad as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('temperature');

    const tooLong = await client.completions.create({ model: 'fake-model', prompt: 'x'.repeat(200), max_tokens: 100 }).catch((e: unknown) => e);
    expect(tooLong).toBeInstanceOf(OpenAI.BadRequestError);
    expect((tooLong as Error).message).toContain("maximum context length is 256 tokens");
    expect((tooLong as Error).message).toContain('300 tokens (200 in the prompt, 100 in the completion)');
  });
});
