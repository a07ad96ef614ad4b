import { describe, expect, it } from 'vitest';
import type { ModelCodec } from '../../frontend/codec.js';
import { ChatOutputParser, chatOutputParser } from '../../frontend/openai/chat-output.js';
import { ChunkWriter, UnaryCollector } from '../../frontend/openai/format.js';
import type { ChatGenerationRequest, GenerationRequest } from '../../frontend/openai/validate.js';
import type { PreparedGeneration } from '../../frontend/pipeline/generation.js';

function chatInput(extra: Partial<ChatGenerationRequest> = {}): ChatGenerationRequest {
  return {
    kind: 'chat',
    model: 'm',
    stream: true,
    includeUsage: false,
    sampling: {},
    stop: [],
    stopTokenIds: [],
    ignoreEos: false,
    returnTokensAsTokenIds: false,
    messages: [{ role: 'user', content: 'hi' }],
    toolChoice: 'auto',
    addGenerationPrompt: true,
    ...extra,
  };
}

const TOOLS = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }];
const withTools = (extra: Partial<ChatGenerationRequest> = {}) => chatInput({ tools: TOOLS, toolCallFormat: 'hermes', ...extra });

/** Only what the response writers read of a prepared request. */
function prepared(input: GenerationRequest): PreparedGeneration {
  const codec = { tokenText: (id: number) => `t${id}` } as unknown as ModelCodec;
  return { id: 'chatcmpl-1', created: 1700000000, input, codec } as unknown as PreparedGeneration;
}

function ids(): () => string {
  let n = 0;
  return () => `call_${n++}`;
}

/** Run chunks through a ChunkWriter the way the HTTP handler does; the parsed chunk bodies. */
function streamChunks(input: GenerationRequest, texts: string[], reason: 'stop' | 'length' = 'stop'): Array<Record<string, any>> {
  const writer = new ChunkWriter(prepared(input), ids());
  const frames: string[] = [];
  for (const text of texts) {
    if (writer.output) frames.push(...writer.outputDeltas(text, undefined));
    else frames.push(writer.delta(text, undefined));
  }
  if (writer.output) frames.push(...writer.outputEnd());
  frames.push(writer.finish(reason));
  return frames.map((f) => JSON.parse(f) as Record<string, any>);
}

const deltas = (chunks: Array<Record<string, any>>) => chunks.map((c) => c.choices[0].delta);

describe('chatOutputParser: which requests get one', () => {
  it('none for plain chat, completions, tool_choice none, or a model without a tool-call format', () => {
    expect(chatOutputParser(chatInput())).toBeUndefined();
    expect(chatOutputParser(withTools({ toolChoice: 'none' }))).toBeUndefined();
    expect(chatOutputParser(chatInput({ tools: TOOLS }))).toBeUndefined();
    expect(chatOutputParser(chatInput({ toolCallFormat: 'hermes' }))).toBeUndefined();
    const completion = { ...chatInput(), kind: 'completion', prompt: 'x', echo: false } as unknown as GenerationRequest;
    expect(chatOutputParser(completion)).toBeUndefined();
  });

  it('one for tools that may be called, or for a reasoning parser alone', () => {
    expect(chatOutputParser(withTools())).toBeInstanceOf(ChatOutputParser);
    expect(chatOutputParser(withTools({ toolChoice: 'required' }))).toBeInstanceOf(ChatOutputParser);
    expect(chatOutputParser(chatInput({ reasoningParser: 'think' }))?.splitsReasoning).toBe(true);
  });
});

describe('ChatOutputParser', () => {
  it('splits reasoning first, then reads tool calls out of the content only', () => {
    const parser = new ChatOutputParser({ reasoningParser: 'think', toolCallFormat: 'hermes' }, ids());
    const text = '<think>I could emit <tool_call>{"name":"x","arguments":{}}</tool_call> here</think>\nOk.\n<tool_call>\n{"name":"get_weather","arguments":{"city":"Oslo"}}\n</tool_call>';
    expect(parser.parseAll(text)).toEqual({
      reasoning: 'I could emit <tool_call>{"name":"x","arguments":{}}</tool_call> here',
      content: 'Ok.',
      toolCalls: [{ id: 'call_0', name: 'get_weather', arguments: '{"city":"Oslo"}' }],
    });
    expect(parser.finishReason('stop')).toBe('tool_calls');
    expect(parser.finishReason('length')).toBe('length');
  });

  it('reports stop when no call was made', () => {
    const parser = new ChatOutputParser({ toolCallFormat: 'hermes' });
    expect(parser.parseAll('Just text.')).toEqual({ reasoning: undefined, content: 'Just text.', toolCalls: [] });
    expect(parser.finishReason('stop')).toBe('stop');
  });

  it('streams the same parts as the whole text gives, one character at a time', () => {
    const text = '<think>\nhmm\n</think>\n\nLet me look. <tool_call>{"name":"a","arguments":{"q":"}"}}</tool_call>\n<tool_call>{"name":"b","arguments":{}}</tool_call>';
    const opts = { reasoningParser: 'think' as const, toolCallFormat: 'hermes' as const };
    const whole = new ChatOutputParser(opts, ids()).parseAll(text);
    const parser = new ChatOutputParser(opts, ids());
    const steps = [...Array.from(text, (c) => parser.push(c)), parser.finish()];
    expect(steps.map((s) => s.reasoning).join('')).toBe(whole.reasoning);
    expect(steps.map((s) => s.content).join('')).toBe(whole.content);
    const deltas = steps.flatMap((s) => s.toolCalls);
    // Each call opens with id and name, then its arguments arrive a character at a time.
    expect(deltas.filter((d) => d.id !== undefined)).toEqual([
      { index: 0, id: 'call_0', name: 'a', arguments: '' },
      { index: 1, id: 'call_1', name: 'b', arguments: '' },
    ]);
    expect(deltas.filter((d) => d.index === 0 && d.id === undefined).map((d) => d.arguments)).toEqual(['{', '"', 'q', '"', ':', '"', '}', '"', '}']);
    const args = [0, 1].map((i) => deltas.filter((d) => d.index === i).map((d) => d.arguments).join(''));
    expect(args).toEqual(whole.toolCalls.map((c) => c.arguments));
    expect(args).toEqual(['{"q":"}"}', '{}']);
    expect(parser.toolCallCount).toBe(2);
  });
});

describe('ChunkWriter with an output parser (streamed chat)', () => {
  it('streams tool calls as OpenAI does and finishes with tool_calls', () => {
    const chunks = streamChunks(withTools(), ['Checking.', '\n<tool_', 'call>\n{"name": "get_weather", ', '"arguments": {"city": "Oslo"}}\n</tool_call>']);
    expect(deltas(chunks)).toEqual([
      { content: 'Checking.' },
      { tool_calls: [{ index: 0, id: 'call_0', type: 'function', function: { name: 'get_weather', arguments: '' } }] },
      { tool_calls: [{ index: 0, function: { arguments: '{"city":"Oslo"}' } }] },
      {},
    ]);
    expect(chunks.at(-1)!.choices[0].finish_reason).toBe('tool_calls');
    for (const c of chunks) expect(c).toMatchObject({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1700000000, model: 'm' });
  });

  it('streams reasoning_content apart from content', () => {
    const chunks = streamChunks(chatInput({ reasoningParser: 'think', reasoningStartsInPrompt: true }), ['Two plus', ' two.</think>', '\n\n4']);
    expect(deltas(chunks)).toEqual([{ reasoning_content: 'Two plus' }, { reasoning_content: ' two.' }, { content: '4' }, {}]);
    expect(chunks.at(-1)!.choices[0].finish_reason).toBe('stop');
  });

  it('flushes held-back text before the finish chunk', () => {
    const chunks = streamChunks(withTools(), ['a <tool']);
    expect(deltas(chunks)).toEqual([{ content: 'a' }, { content: ' <tool' }, {}]);
  });

  it('keeps the plain path when no parser is active', () => {
    const writer = new ChunkWriter(prepared(chatInput()));
    expect(writer.output).toBeUndefined();
    expect(JSON.parse(writer.delta(' x ', undefined)).choices[0].delta).toEqual({ content: ' x ' });
  });
});

describe('UnaryCollector with an output parser (unary chat)', () => {
  const usage = { promptTokens: 3, completionTokens: 5, cachedTokens: 0 };

  it('returns message.tool_calls, content null beside them, and finish_reason tool_calls', () => {
    const collector = new UnaryCollector(prepared(withTools({ stream: false })), ids());
    for (const t of ['<tool_call>\n{"name": "get_weather",', ' "arguments": {"city": "Oslo"}}\n</tool_call>']) collector.add(t, undefined);
    const body = collector.body('stop', usage) as Record<string, any>;
    expect(body.choices[0]).toEqual({
      index: 0,
      message: { role: 'assistant', content: null, tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
      logprobs: null,
      finish_reason: 'tool_calls',
    });
  });

  it('returns reasoning_content beside content', () => {
    const collector = new UnaryCollector(prepared(chatInput({ stream: false, reasoningParser: 'think' })));
    collector.add('<think>\nsum\n</think>\n\n4', undefined);
    const body = collector.body('stop', usage) as Record<string, any>;
    expect(body.choices[0].message).toEqual({ role: 'assistant', content: '4', reasoning_content: 'sum' });
    expect(body.choices[0].finish_reason).toBe('stop');
  });

  it('leaves text with no calls as content', () => {
    const collector = new UnaryCollector(prepared(withTools({ stream: false })));
    collector.add('  The weather is fine.\n', undefined);
    const body = collector.body('length', usage) as Record<string, any>;
    expect(body.choices[0].message).toEqual({ role: 'assistant', content: 'The weather is fine.' });
    expect(body.choices[0].finish_reason).toBe('length');
  });
});
