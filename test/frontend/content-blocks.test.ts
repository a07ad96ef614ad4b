/**
 * The one content-block sequencer (frontend/api/content-blocks.ts) that Messages and Responses
 * both run, and the per-codec parameter tables (frontend/api/param-names.ts), as pure code:
 *   - blocks open, take deltas and close in the order the model produced them;
 *   - reasoning tokens, worked by hand: the tokens up to and including the one that closes
 *     `</think>`, tags counted, however the text is cut;
 *   - each text delta carries the logprobs of the tokens that made it; reasoning and a call's
 *     markup carry none;
 *   - chat's field names become each API's, in `param` and in the message.
 */
import { describe, expect, it } from 'vitest';
import type { TokenLogprob } from '../../proto/wire.js';
import { BlockSequencer, type Block, type BlockHooks } from '../../frontend/api/content-blocks.js';
import { MESSAGES_PARAMS } from '../../frontend/api/anthropic/messages-events.js';
import { RESPONSES_PARAMS } from '../../frontend/api/responses/responses-events.js';
import { renameParam, renameParams } from '../../frontend/api/param-names.js';
import { ApiError } from '../../frontend/errors.js';
import type { PreparedGeneration } from '../../frontend/pipeline/generation.js';

const TOOLS = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }];

/** Only what the sequencer reads of a prepared request: the chat input that picks the parsers. */
function prepared(opts: { reasoning?: boolean; startsInReasoning?: boolean; tools?: boolean; logprobs?: boolean } = {}): PreparedGeneration {
  return {
    input: {
      kind: 'chat',
      ...(opts.reasoning ? { reasoningParser: 'think', reasoningStartsInPrompt: opts.startsInReasoning ?? false } : {}),
      ...(opts.tools ? { toolCallFormat: 'hermes', tools: TOOLS, toolChoice: 'auto' } : {}),
      ...(opts.logprobs ? { logprobs: 0 } : {}),
    },
  } as unknown as PreparedGeneration;
}

/** Hooks that write down every call: `open reasoning`, `delta text "Hi" [H,i]`, `close text`. */
function recorder(): { log: string[]; hooks: BlockHooks<void>; closed: Block[] } {
  const log: string[] = [];
  const closed: Block[] = [];
  const hooks: BlockHooks<void> = {
    keepsText: true,
    open: (b) => void log.push(`open ${b.index} ${b.kind}${b.call ? ` ${b.call.name}` : ''}`),
    delta: (b, text, lps) => void log.push(`delta ${b.index} ${JSON.stringify(text)}${lps.length > 0 ? ` [${lps.map((l) => String.fromCharCode(l.tokenId)).join('')}]` : ''}`),
    close: (b) => {
      log.push(`close ${b.index}`);
      closed.push(b);
    },
  };
  return { log, hooks, closed };
}

/** Push `text` one character (one token, logprob named by its char code) at a time. */
function pushChars(seq: BlockSequencer<void>, text: string): void {
  for (const ch of text) seq.push(ch, 1, [{ tokenId: ch.charCodeAt(0), logprob: -1, top: [] } satisfies TokenLogprob], undefined);
}

describe('BlockSequencer: blocks in order', () => {
  it('reasoning, text, a call, text: each opens when the kind changes and closes before the next', () => {
    const r = recorder();
    const seq = new BlockSequencer(prepared({ reasoning: true, tools: true }), r.hooks, () => 'call_1');
    pushChars(seq, '<think>plan</think>Checking.\n<tool_call>\n{"name":"get_weather","arguments":{"city":"Oslo"}}\n</tool_call>\nDone.');
    const end = seq.finish('stop', undefined);
    expect(r.log.filter((l) => !l.startsWith('delta'))).toEqual(['open 0 reasoning', 'close 0', 'open 1 text', 'close 1', 'open 2 tool_call get_weather', 'close 2', 'open 3 text', 'close 3']);
    expect(r.closed.map((b) => b.text)).toEqual(['plan', 'Checking.', '{"city":"Oslo"}', '\nDone.']);
    expect(r.closed[2]!.call).toEqual({ id: 'call_1', name: 'get_weather' });
    // A turn that called a tool stopped to call it.
    expect(end.finishReason).toBe('tool_calls');
  });

  it('no parser (no tools, no reasoning parser): every piece is text, one block', () => {
    const r = recorder();
    const seq = new BlockSequencer(prepared(), r.hooks);
    seq.push('<think>not parsed</think>', 3, undefined, undefined);
    seq.push('!', 1, undefined, undefined);
    expect(seq.finish('length', undefined)).toEqual({ finishReason: 'length', reasoningTokens: 0 });
    expect(r.log).toEqual(['open 0 text', 'delta 0 "<think>not parsed</think>"', 'delta 0 "!"', 'close 0']);
  });
});

describe('BlockSequencer: reasoning tokens', () => {
  const count = (opts: Parameters<typeof prepared>[0], pushes: Array<[string, number]>): number => {
    const seq = new BlockSequencer(prepared(opts), recorder().hooks);
    for (const [text, tokens] of pushes) seq.push(text, tokens, undefined, undefined);
    return seq.finish('stop', undefined).reasoningTokens;
  };

  it('one token per push: <think> (1) + a, b (2) + </think> (1) = 4; the answer after it is not reasoning', () => {
    expect(count({ reasoning: true }, [['<think>', 1], ['a', 1], ['b', 1], ['</think>', 1], ['Hi', 1], ['.', 1]])).toBe(4);
  });

  it('tokens that could still open reasoning wait: "\\n", "<", "think>" count once the tag completes (3 + x + </think> = 5)', () => {
    expect(count({ reasoning: true }, [['\n', 1], ['<', 1], ['think>', 1], ['x', 1], ['</think>', 1], ['y', 1]])).toBe(5);
  });

  it('…and count nothing when the output turns out to be plain content ("\\n", "<", "b>": 0)', () => {
    expect(count({ reasoning: true }, [['\n', 1], ['<', 1], ['b>', 1], ['z', 1]])).toBe(0);
  });

  it('the template opened <think>: reasoning from the first token (a, b, </think> = 3)', () => {
    expect(count({ reasoning: true, startsInReasoning: true }, [['a', 1], ['b', 1], ['</think>', 1], ['c', 1]])).toBe(3);
  });

  it('cut off inside the reasoning: every token is reasoning (<think>abc as 4 tokens = 4)', () => {
    expect(count({ reasoning: true }, [['<think>', 1], ['abc', 3]])).toBe(4);
  });

  it('a push that closes the reasoning counts whole: one 19-token push of "<think>ab</think>Hi" = 19', () => {
    expect(count({ reasoning: true }, [['<think>ab</think>Hi', 19]])).toBe(19);
  });

  it('a whole think block inside one push from undecided counts (undecided "<" then "think>a</think>" of 3 = 4)', () => {
    expect(count({ reasoning: true }, [['<', 1], ['think>a</think>', 3], ['b', 1]])).toBe(4);
  });

  it('no reasoning parser: 0', () => {
    expect(count({ tools: true }, [['<think>a</think>', 3]])).toBe(0);
  });
});

describe('BlockSequencer: logprobs go with the text their tokens made', () => {
  it('reasoning and its tags carry none; the answer’s tokens ride on its deltas', () => {
    const r = recorder();
    const seq = new BlockSequencer(prepared({ reasoning: true, logprobs: true }), r.hooks);
    pushChars(seq, '<think>ab</think>Hi');
    seq.finish('stop', undefined);
    expect(r.closed.map((b) => [b.kind, b.text, b.logprobs.map((l) => String.fromCharCode(l.tokenId)).join('')])).toEqual([
      ['reasoning', 'ab', ''],
      ['text', 'Hi', 'Hi'],
    ]);
  });

  it('text held back (a possible <tool_call>) gets its tokens’ logprobs when it comes out; a call’s markup gets none', () => {
    const r = recorder();
    const seq = new BlockSequencer(prepared({ tools: true, logprobs: true }), r.hooks, () => 'call_1');
    pushChars(seq, 'a<b');
    pushChars(seq, '<tool_call>\n{"name":"get_weather","arguments":{}}\n</tool_call>');
    seq.finish('stop', undefined);
    const text = r.closed.find((b) => b.kind === 'text')!;
    expect(text.text).toBe('a<b');
    expect(text.logprobs.map((l) => String.fromCharCode(l.tokenId)).join('')).toBe('a<b');
    // "<" was held until "b" showed it is not a tag: that delta carries both tokens.
    expect(r.log).toContain('delta 0 "<b" [<b]');
    expect(r.closed.find((b) => b.kind === 'tool_call')!.logprobs).toEqual([]);
  });

  it('none unless the request asked for them', () => {
    const r = recorder();
    const seq = new BlockSequencer(prepared(), r.hooks);
    pushChars(seq, 'Hi');
    seq.finish('stop', undefined);
    expect(r.closed[0]!.logprobs).toEqual([]);
  });
});

describe('param-names: chat’s fields in each API’s names', () => {
  it('Responses: max_tokens, response_format, messages, tools[i].function.*, logprobs', () => {
    expect(renameParam(RESPONSES_PARAMS, 'max_tokens')).toBe('max_output_tokens');
    expect(renameParam(RESPONSES_PARAMS, 'response_format')).toBe('text.format');
    expect(renameParam(RESPONSES_PARAMS, 'messages[3].content')).toBe('input');
    expect(renameParam(RESPONSES_PARAMS, 'tools[1].function.parameters')).toBe('tools[1].parameters');
    expect(renameParam(RESPONSES_PARAMS, 'logprobs')).toBe('include');
    // The API's own names pass through: renaming an error twice changes nothing.
    for (const own of ['input[0].content[1]', 'text.format', 'previous_response_id', 'tools[0]', 'max_output_tokens']) expect(renameParam(RESPONSES_PARAMS, own)).toBe(own);
  });

  it('Messages: stop, max_completion_tokens, tools[i].function.parameters, parallel_tool_calls', () => {
    expect(renameParam(MESSAGES_PARAMS, 'stop')).toBe('stop_sequences');
    expect(renameParam(MESSAGES_PARAMS, 'max_completion_tokens')).toBe('max_tokens');
    expect(renameParam(MESSAGES_PARAMS, 'tools[0].function.parameters')).toBe('tools[0].input_schema');
    expect(renameParam(MESSAGES_PARAMS, 'tools[2].function.name')).toBe('tools[2].name');
    expect(renameParam(MESSAGES_PARAMS, 'parallel_tool_calls')).toBe('tool_choice.disable_parallel_tool_use');
    for (const own of ['messages[0].content[0]', 'max_tokens', 'system', 'stop_sequences']) expect(renameParam(MESSAGES_PARAMS, own)).toBe(own);
  });

  it('the message’s quoted fields are renamed with the param; code and cause stay', () => {
    const cause = new Error('grammar');
    const err = new ApiError('invalid_argument', "'tool_choice' forces a tool call, which cannot be combined with 'response_format': send only one of them", 'tool_choice', { cause });
    const out = renameParams(err, RESPONSES_PARAMS);
    expect(out.message).toBe("'tool_choice' forces a tool call, which cannot be combined with 'text.format': send only one of them");
    expect([out.code, out.param, out.cause]).toEqual(['invalid_argument', 'tool_choice', cause]);
    const schema = renameParams(new ApiError('invalid_argument', "'tools[0].function.parameters' (function 'tag'): bad", 'tools[0].function.parameters'), MESSAGES_PARAMS);
    expect([schema.message, schema.param]).toEqual(["'tools[0].input_schema' (function 'tag'): bad", 'tools[0].input_schema']);
    // Nothing to rename: the very same error.
    expect(renameParams(err, MESSAGES_PARAMS)).toBe(err);
    expect(renameParams(err, undefined)).toBe(err);
  });
});
