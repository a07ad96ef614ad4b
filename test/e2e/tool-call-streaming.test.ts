/**
 * Tool calls streamed as OpenAI streams them, and cut calls (issue 23 item 10): `runtime up` with
 * the mocker over tiny random models, asked by the `openai` SDK and by LangChain JS
 * (`@langchain/openai` `bindTools`, `tool_choice: "any"`), in every parser format.
 *
 * `max_tokens` ends the output inside a forced call at various points. What must hold wherever it
 * ends: no call markup in `content`; a call whose name was complete arrives as a `tool_calls`
 * entry (partial arguments, `finish_reason: "length"`); the streamed argument deltas concatenate
 * to the unary arguments for the same seed (the mocker's tokens are a function of seed and
 * position, so a seed repeats an output).
 */
import { join } from 'node:path';
import type { AIMessageChunk } from '@langchain/core/messages';
import { ChatOpenAI } from '@langchain/openai';
import OpenAI from 'openai';
import { beforeAll, describe, expect, it } from 'vitest';
import { makeTinyModel } from '../../workers/models/index.js';
import { upForBlock } from './up.js';

const MOCKER = ['--engine', 'mocker', '--workers', '1', '--speedup-ratio', '100', '--log-level', 'warn'];
/** Every format's call markup: none of it may reach content. */
const MARKUP = /<tool_call>|<\/tool_call>|\[TOOL_CALLS\]|<\|python_tag\|>|"name"/;

const WEATHER = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'Weather forecast for a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', pattern: '^[A-Z][a-z]{1,11}$' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] }, days: { type: 'integer', minimum: 1, maximum: 7 } },
      required: ['city', 'unit', 'days'],
      additionalProperties: false,
    },
  },
};

/** A fleet under `runtime up` (one mocker worker) for one describe block. */
function fleet(args: (cacheDir: string) => Promise<string[]>): { url: () => string } {
  return upForBlock('tandem-tool-stream-', async (cacheDir) => [...(await args(cacheDir)), ...MOCKER]);
}

async function tinyModel(cacheDir: string, arch: 'qwen2' | 'llama', name: string): Promise<string> {
  const dir = join(cacheDir, name);
  await makeTinyModel({ arch, outDir: dir });
  return dir;
}

interface Streamed {
  calls: Array<{ id: string; name: string; arguments: string; deltas: number }>;
  content: string;
  finish: string | null;
}

async function streamCalls(client: OpenAI, params: OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming): Promise<Streamed> {
  const out: Streamed = { calls: [], content: '', finish: null };
  for await (const chunk of await client.chat.completions.create(params)) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    out.content += choice.delta.content ?? '';
    out.finish = choice.finish_reason ?? out.finish;
    for (const delta of choice.delta.tool_calls ?? []) {
      const call = out.calls[delta.index];
      if (call === undefined) {
        // OpenAI's shape: the first delta of a call carries index, id, type and name.
        expect(delta.index).toBe(out.calls.length);
        expect(delta.id).toMatch(/^call_/);
        expect(delta.type).toBe('function');
        out.calls[delta.index] = { id: delta.id!, name: delta.function!.name!, arguments: delta.function?.arguments ?? '', deltas: 1 };
      } else {
        expect(delta.id).toBeUndefined();
        expect(delta.function?.name).toBeUndefined();
        call.arguments += delta.function?.arguments ?? '';
        call.deltas++;
      }
    }
  }
  return out;
}

/** The openai SDK checks of one format, over `model` served at `url`. */
function sdkChecks(served: { url: () => string }, model: string): void {
  let client: OpenAI;
  beforeAll(() => {
    client = new OpenAI({ baseURL: `${served.url()}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
  });
  const params = (maxTokens: number, seed: number) => ({
    model,
    max_tokens: maxTokens,
    temperature: 0.8,
    seed,
    messages: [{ role: 'user' as const, content: 'What is the weather in Paris?' }],
    tools: [WEATHER],
    tool_choice: 'required' as const,
    parallel_tool_calls: false,
  });

  it('cut at any max_tokens: no markup in content, a partial call with finish_reason length, streamed deltas equal the unary call', async () => {
    let partial = 0;
    let complete = 0;
    for (const maxTokens of [2, 6, 10, 14, 20, 28, 36, 48, 64, 256]) {
      const seed = 100 + maxTokens;
      const unary = await client.chat.completions.create(params(maxTokens, seed));
      const choice = unary.choices[0]!;
      const streamed = await streamCalls(client, { ...params(maxTokens, seed), stream: true });
      const what = JSON.stringify({ maxTokens, unary: choice.message, streamed });
      expect(choice.message.content ?? '', what).not.toMatch(MARKUP);
      expect(streamed.content, what).not.toMatch(MARKUP);
      expect(streamed.finish, what).toBe(choice.finish_reason);
      const calls = (choice.message.tool_calls ?? []).map((c) => (c.type === 'function' ? { name: c.function.name, arguments: c.function.arguments } : c));
      expect(streamed.calls.map((c) => ({ name: c.name, arguments: c.arguments })), what).toEqual(calls);
      if (choice.finish_reason === 'length') {
        if (calls.length > 0) partial++;
        for (const c of calls) expect((c as { name: string }).name).toBe('get_weather');
      } else {
        expect(choice.finish_reason, what).toBe('tool_calls');
        expect(calls.length).toBe(1);
        JSON.parse((calls[0] as { arguments: string }).arguments);
        complete++;
        // Arguments are streamed as generated, not in one piece at the end.
        expect(streamed.calls[0]!.deltas, what).toBeGreaterThan(2);
      }
    }
    // The range covers both: calls cut partway and calls with room to finish.
    expect(partial).toBeGreaterThan(0);
    expect(complete).toBeGreaterThan(0);
  }, 120_000);
}

describe('hermes (tiny qwen2, <tool_call>)', () => {
  const served = fleet(async (cacheDir) => ['--model', await tinyModel(cacheDir, 'qwen2', 'tiny-qwen2')]);
  sdkChecks(served, 'tiny-qwen2');

  it('LangChain: bindTools with tool_choice "any", streamed at max_tokens 48: tool_call_chunks arrive, never markup in content', async () => {
    const cut: number[] = [];
    for (const seed of [1, 2, 3, 4, 5, 6]) {
      const chat = new ChatOpenAI({
        model: 'tiny-qwen2',
        apiKey: 'unused',
        configuration: { baseURL: `${served.url()}/v1` },
        maxTokens: 48,
        temperature: 0.8,
        streaming: true,
        maxRetries: 0,
        modelKwargs: { seed },
      }).bindTools([WEATHER], { tool_choice: 'any' });
      let content = '';
      let chunks = 0;
      let merged: AIMessageChunk | undefined;
      for await (const chunk of await chat.stream('What is the weather in Paris?')) {
        content += typeof chunk.content === 'string' ? chunk.content : '';
        chunks += chunk.tool_call_chunks?.length ?? 0;
        merged = merged === undefined ? chunk : merged.concat(chunk);
      }
      const what = JSON.stringify({ seed, content, merged: merged?.tool_call_chunks, meta: merged?.response_metadata });
      expect(content, what).not.toMatch(MARKUP);
      expect(chunks, what).toBeGreaterThan(0);
      const calls = merged!.tool_call_chunks ?? [];
      expect(calls.length, what).toBe(1);
      expect(calls[0]!.name, what).toBe('get_weather');
      expect(calls[0]!.id, what).toMatch(/^call_/);
      if (merged!.response_metadata.finish_reason === 'length') cut.push(seed);
      else expect(merged!.tool_calls?.[0]?.name, what).toBe('get_weather');
    }
    // The case: some of these outputs are cut inside the forced call.
    expect(cut.length).toBeGreaterThan(0);
  }, 120_000);
});

describe('llama3_json (tiny llama, bare JSON)', () => {
  const served = fleet(async (cacheDir) => ['--model', await tinyModel(cacheDir, 'llama', 'tiny-llama')]);
  sdkChecks(served, 'tiny-llama');
});

describe('mistral (tiny qwen2 under --tool-call-parser mistral, [TOOL_CALLS])', () => {
  const served = fleet(async (cacheDir) => ['--model', await tinyModel(cacheDir, 'qwen2', 'tiny-qwen2'), '--tool-call-parser', 'mistral']);
  sdkChecks(served, 'tiny-qwen2');
});
