import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ToolCallFormatName } from '../../proto/wire.js';
import { detectToolCallFormat } from '../../grammar/tool-calls/detect.js';
import { TOOL_CALL_FORMATS } from '../../grammar/tool-calls/formats.js';
import { type ParsedToolCall, type ToolCallDelta, createToolCallStreamParser, newToolCallId, parseToolCalls } from '../../grammar/tool-calls/parsers.js';

/** Deterministic ids: call_0, call_1, ... per parser. */
function counterIds(): () => string {
  let n = 0;
  return () => `call_${n++}`;
}

const parse = (format: ToolCallFormatName, text: string) => parseToolCalls(format, text, counterIds());

/** Feed `chunks` to a stream parser; the concatenated content and the calls its deltas build. */
function stream(format: ToolCallFormatName, chunks: readonly string[]): { content: string; toolCalls: ParsedToolCall[]; contentChunks: string[]; deltas: ToolCallDelta[] } {
  const parser = createToolCallStreamParser(format, counterIds());
  const contentChunks: string[] = [];
  const deltas: ToolCallDelta[] = [];
  for (const step of [...chunks.map((c) => parser.push(c)), parser.finish()]) {
    if (step.content) contentChunks.push(step.content);
    deltas.push(...step.toolCalls);
  }
  const toolCalls: ParsedToolCall[] = [];
  for (const d of deltas) {
    if (d.id !== undefined) {
      // OpenAI's stream shape: the first delta of a call carries id, name and empty arguments.
      expect(d).toEqual({ index: toolCalls.length, id: d.id, name: d.name, arguments: '' });
      toolCalls.push({ id: d.id, name: d.name!, arguments: '' });
    } else {
      expect(Object.keys(d).sort()).toEqual(['arguments', 'index']);
      expect(d.index).toBe(toolCalls.length - 1);
      toolCalls[d.index]!.arguments += d.arguments;
    }
  }
  return { content: contentChunks.join(''), toolCalls, contentChunks, deltas };
}

const call = (name: string, args: unknown, id = 'call_0'): ParsedToolCall => ({ id, name, arguments: JSON.stringify(args) });

describe('parseToolCalls: hermes (<tool_call> blocks)', () => {
  it('reads one call and the text before it as content', () => {
    const text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>';
    expect(parse('hermes', text)).toEqual({ content: 'Let me check.', toolCalls: [call('get_weather', { city: 'Paris', days: 3 })] });
  });

  it('reads parallel calls in order, with ids call_ + 24 alphanumerics by default', () => {
    const text = '<tool_call>\n{"name":"a","arguments":{}}\n</tool_call>\n<tool_call>\n{"name":"b","arguments":{"x":[1,{"y":"}"}]}}\n</tool_call>';
    const result = parseToolCalls('hermes', text);
    expect(result.content).toBe('');
    expect(result.toolCalls.map((c) => [c.name, c.arguments])).toEqual([
      ['a', '{}'],
      ['b', '{"x":[1,{"y":"}"}]}'],
    ]);
    for (const c of result.toolCalls) expect(c.id).toMatch(/^call_[A-Za-z0-9]{24}$/);
    expect(result.toolCalls[0]!.id).not.toBe(result.toolCalls[1]!.id);
  });

  it('tolerates a call without the newlines, and a missing closing tag at the end', () => {
    expect(parse('hermes', '<tool_call>{"name":"f","arguments":{"a":1}}</tool_call>').toolCalls).toEqual([call('f', { a: 1 })]);
    expect(parse('hermes', '<tool_call>\n{"name":"f","arguments":{"a":1}}\n').toolCalls).toEqual([call('f', { a: 1 })]);
    expect(parse('hermes', '<tool_call>{"name":"f","arguments":{"a":1}}</tool_').toolCalls).toEqual([call('f', { a: 1 })]);
  });

  it('accepts "parameters", double-encoded arguments, and no arguments at all', () => {
    expect(parse('hermes', '<tool_call>{"name":"f","parameters":{"a":1}}</tool_call>').toolCalls).toEqual([call('f', { a: 1 })]);
    expect(parse('hermes', '<tool_call>{"name":"f","arguments":"{\\"a\\": 1}"}</tool_call>').toolCalls).toEqual([call('f', { a: 1 })]);
    expect(parse('hermes', '<tool_call>{"name":"f"}</tool_call>').toolCalls).toEqual([call('f', {})]);
  });

  it('keeps text that is not a call in a call\'s shape as content', () => {
    for (const text of [
      '<tool_call>{"arguments":{}}</tool_call>',
      '<tool_call>{"name":"f","arguments":[1]}</tool_call>',
      '<tool_call>{"name":"","arguments":{}}</tool_call>',
      '<tool_call>{"name":"f","arguments":"{bad"}</tool_call>',
      '<tool_call>not json</tool_call>',
    ]) {
      expect(parse('hermes', text), text).toEqual({ content: text.trim(), toolCalls: [] });
    }
  });

  it('once the name and the arguments object have begun it is a call, whatever follows', () => {
    // Cut by max_tokens: a partial call (OpenAI's shape), never the markup as content.
    expect(parse('hermes', 'text <tool_call>{"name":"f","arguments":{"a":')).toEqual({ content: 'text', toolCalls: [{ id: 'call_0', name: 'f', arguments: '{"a":' }] });
    // Arguments that are not JSON reach the client as they were generated (OpenAI does not check them either).
    expect(parse('hermes', '<tool_call>\n{"name": "f", "arguments": {bad json}}\n</tool_call>')).toEqual({ content: '', toolCalls: [{ id: 'call_0', name: 'f', arguments: '{badjson}' }] });
    // Text after the object that is not the closing tag is content again.
    expect(parse('hermes', '<tool_call>{"name":"f","arguments":{}} trailing')).toEqual({ content: 'trailing', toolCalls: [{ id: 'call_0', name: 'f', arguments: '{}' }] });
  });

  it('drops a block cut before its call was known: the markup never becomes content', () => {
    for (const text of ['ok <tool_call>', 'ok <tool_call>\n{"na', 'ok <tool_call>\n{"name": "get_wea', 'ok <tool_call>{"name":"f","argu']) {
      expect(parse('hermes', text), text).toEqual({ content: 'ok', toolCalls: [] });
    }
    expect(parse('mistral', 'ok [TOOL_CALLS][{"name"')).toEqual({ content: 'ok', toolCalls: [] });
    expect(parse('mistral', '[TOOL_CALLS][{"name":"a","arguments":{}}, {"name":"b')).toEqual({ content: '', toolCalls: [{ id: 'call_0', name: 'a', arguments: '{}' }] });
    expect(parse('llama3_json', '<|python_tag|>{"name": "get_wea')).toEqual({ content: '', toolCalls: [] });
    expect(parse('llama3_json', '{"name":"a","parameters":{}}; {"name": "b')).toEqual({ content: '', toolCalls: [{ id: 'call_0', name: 'a', arguments: '{}' }] });
  });

  it('with forced calls, a marker cut short at the end is dropped too; without, it is text', () => {
    expect(parseToolCalls('hermes', '<tool_', { newId: counterIds(), forced: true })).toEqual({ content: '', toolCalls: [] });
    expect(parseToolCalls('hermes', 'a <tool_', { newId: counterIds() })).toEqual({ content: 'a <tool_', toolCalls: [] });
    expect(parseToolCalls('llama3_json', '{"name": "get_wea', { newId: counterIds(), forced: true })).toEqual({ content: '', toolCalls: [] });
    expect(parseToolCalls('llama3_json', '<|pyth', { newId: counterIds(), forced: true })).toEqual({ content: '', toolCalls: [] });
  });

  it('keeps the text between and after calls as content, less the whitespace right after a call', () => {
    const text = 'A <tool_call>{"name":"f","arguments":{}}</tool_call> B <tool_call>{"name":"g","arguments":{}}</tool_call>\n\nC';
    const result = parse('hermes', text);
    expect(result.content).toBe('A B C');
    expect(result.toolCalls.map((c) => c.name)).toEqual(['f', 'g']);
  });
});

describe('parseToolCalls: llama3_json (bare JSON)', () => {
  it('reads a call that is the whole output, with or without <|python_tag|>', () => {
    const want = [call('get_weather', { city: 'Oslo' })];
    expect(parse('llama3_json', '{"name": "get_weather", "parameters": {"city": "Oslo"}}').toolCalls).toEqual(want);
    expect(parse('llama3_json', '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}').toolCalls).toEqual(want);
    expect(parse('llama3_json', '\n {"name": "get_weather", "arguments": {"city": "Oslo"}}').toolCalls).toEqual(want);
  });

  it('reads calls separated by "; " and keeps what follows the last as content', () => {
    const result = parse('llama3_json', '{"name":"a","parameters":{"x":1}}; {"name":"b","parameters":{}}\nDone.');
    expect(result).toEqual({ content: 'Done.', toolCalls: [call('a', { x: 1 }, 'call_0'), call('b', {}, 'call_1')] });
  });

  it('is content unless the output starts with a call object', () => {
    for (const text of [
      'The answer is {"name": "f", "parameters": {}}',
      '{"name": "Bob", "age": 3}',
      '{"city": "Oslo"}',
      '{"name": "Bob", "age"',
      '[1, 2]',
    ]) {
      expect(parse('llama3_json', text), text).toEqual({ content: text, toolCalls: [] });
    }
  });
});

describe('parseToolCalls: mistral ([TOOL_CALLS] list)', () => {
  it('reads a list of calls', () => {
    const text = '[TOOL_CALLS][{"name": "a", "arguments": {"q": "x"}}, {"name": "b", "arguments": {}}]';
    expect(parse('mistral', text)).toEqual({ content: '', toolCalls: [call('a', { q: 'x' }, 'call_0'), call('b', {}, 'call_1')] });
  });

  it('tolerates a missing "[" or "]" and keeps surrounding text as content', () => {
    expect(parse('mistral', '[TOOL_CALLS] {"name":"a","arguments":{}}').toolCalls).toEqual([call('a', {})]);
    expect(parse('mistral', 'Sure. [TOOL_CALLS][{"name":"a","arguments":{}}')).toEqual({ content: 'Sure.', toolCalls: [call('a', {})] });
    expect(parse('mistral', '[TOOL_CALLS][{"name":"a","arguments":{}}] thanks')).toEqual({ content: 'thanks', toolCalls: [call('a', {})] });
  });

  it('keeps malformed call text as content', () => {
    expect(parse('mistral', '[TOOL_CALLS][{"oops": 1}]')).toEqual({ content: '[TOOL_CALLS][{"oops": 1}]', toolCalls: [] });
    expect(parse('mistral', '[TOOL_CALLS] hello')).toEqual({ content: '[TOOL_CALLS] hello', toolCalls: [] });
    // After a good call, a bad second element ends the list: the rest is text.
    expect(parse('mistral', '[TOOL_CALLS][{"name":"a","arguments":{}}, {"x":1}]')).toEqual({ content: ', {"x":1}]', toolCalls: [call('a', {})] });
  });
});

describe('createToolCallStreamParser', () => {
  it('holds back a marker split across chunks and never streams it as content', () => {
    const out = stream('hermes', ['Checking', ' now\n<tool', '_ca', 'll>\n{"name": "f", ', '"arguments": {"a": 1}}', '\n</tool_call>']);
    expect(out.contentChunks).toEqual(['Checking', ' now']);
    expect(out.toolCalls).toEqual([call('f', { a: 1 })]);
  });

  it('streams a "<" that turns out not to start a marker', () => {
    const out = stream('hermes', ['a <', 'b> c <tool', 'box>']);
    expect(out.content).toBe('a <b> c <toolbox>');
    expect(out.contentChunks).toEqual(['a', ' <b> c', ' <toolbox>']);
  });

  it('emits id and name once the arguments begin, then the compact arguments as they arrive', () => {
    const parser = createToolCallStreamParser('mistral', counterIds());
    expect(parser.push('[TOOL_CALLS][{"name": "a", ')).toEqual({ content: '', toolCalls: [] });
    expect(parser.push('"arguments": {"k": [1, 2]}}')).toEqual({
      content: '',
      toolCalls: [
        { index: 0, id: 'call_0', name: 'a', arguments: '' },
        { index: 0, arguments: '{"k":[1,2]}' },
      ],
    });
    expect(parser.push(', {"name": "b", "arguments": {}}]')).toEqual({
      content: '',
      toolCalls: [
        { index: 1, id: 'call_1', name: 'b', arguments: '' },
        { index: 1, arguments: '{}' },
      ],
    });
    expect(parser.finish()).toEqual({ content: '', toolCalls: [] });
  });

  it('passes llama3_json plain text through as soon as it cannot be a call', () => {
    const parser = createToolCallStreamParser('llama3_json', counterIds());
    expect(parser.push('  ')).toEqual({ content: '', toolCalls: [] });
    expect(parser.push('<|pyth')).toEqual({ content: '', toolCalls: [] });
    expect(parser.push('on is')).toEqual({ content: '<|python is', toolCalls: [] });
    expect(parser.push(' fun')).toEqual({ content: ' fun', toolCalls: [] });
  });

  it('a head longer than 1024 characters is read whole, the same in any chunking', () => {
    const long = 'n'.repeat(5000);
    const text = `<tool_call>{"name": "${long}", "arguments": {"a": 1}}</tool_call>`;
    expect(parse('hermes', text)).toEqual({ content: '', toolCalls: [{ id: 'call_0', name: long, arguments: '{"a":1}' }] });
    expect(stream('hermes', Array.from(text)).toolCalls).toEqual([{ id: 'call_0', name: long, arguments: '{"a":1}' }]);
  });

  it('streams the arguments piece by piece, before the call is complete', () => {
    const parser = createToolCallStreamParser('hermes', counterIds());
    expect(parser.push('<tool_call>\n{"name": "get_weather", "arg')).toEqual({ content: '', toolCalls: [] });
    expect(parser.push('uments": {"ci')).toEqual({ content: '', toolCalls: [{ index: 0, id: 'call_0', name: 'get_weather', arguments: '' }, { index: 0, arguments: '{"ci' }] });
    expect(parser.push('ty": "Pa')).toEqual({ content: '', toolCalls: [{ index: 0, arguments: 'ty":"Pa' }] });
    expect(parser.push('ris"}')).toEqual({ content: '', toolCalls: [{ index: 0, arguments: 'ris"}' }] });
    expect(parser.push('}\n</tool')).toEqual({ content: '', toolCalls: [] });
    expect(parser.finish()).toEqual({ content: '', toolCalls: [] });
  });
});

describe('detectToolCallFormat', () => {
  it('knows each family by what its template writes', () => {
    expect(detectToolCallFormat('{% for t in tools %}<tool_call>{{ t | tojson }}</tool_call>{% endfor %}')).toBe('hermes');
    expect(detectToolCallFormat('{{ "[TOOL_CALLS]" }}{{ calls | tojson }}')).toBe('mistral');
    expect(detectToolCallFormat('<|start_header_id|>ipython<|end_header_id|>')).toBe('llama3_json');
    expect(detectToolCallFormat('{{- "<|python_tag|>" + call }}')).toBe('llama3_json');
    expect(detectToolCallFormat('{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}')).toBeUndefined();
  });
});

// ---- property: streamed == unary == what was rendered, for any chunking ----

const FORMATS: ToolCallFormatName[] = ['hermes', 'llama3_json', 'mistral'];

/** Content text from pieces that look like parts of markers and JSON, to tempt the parsers. */
const contentText = fc
  .array(fc.constantFrom('a', 'word', ' ', '\n', '<', '<tool_', '</tool_call>', '[TOOL_', '[', ']', '{', '}', '"', ';', ',', 'x}', '<|python'), { maxLength: 12 })
  .map((parts) => parts.join(''));
const toolCall = fc.record({
  name: fc.constantFrom('get_weather', 'search', 'f_1'),
  args: fc.dictionary(fc.string({ maxLength: 6 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }),
  pretty: fc.boolean(),
});
type Call = { name: string; args: Record<string, unknown>; pretty: boolean };

/** One call in a format's own framing (TOOL_CALL_FORMATS), optionally pretty-printed as models do. */
function renderCall(format: ToolCallFormatName, c: Call): string {
  const f = TOOL_CALL_FORMATS[format];
  const json = c.pretty ? JSON.stringify({ name: c.name, [f.argumentsKey]: c.args }, null, 1) : JSON.stringify({ name: c.name, [f.argumentsKey]: c.args });
  return f.callPrefix + json + f.callSuffix;
}

/** A text with calls in it and what parsing it must give. */
function render(format: ToolCallFormatName, before: string, calls: Call[], after: string): { text: string; content: string } {
  const f = TOOL_CALL_FORMATS[format];
  if (calls.length === 0) {
    // Bare-JSON output is content only if it cannot start a call: keep the generated text away from '{'.
    const text = format === 'llama3_json' ? `.${before}${after}` : before + after;
    return { text, content: text.trim() };
  }
  const list = f.open + calls.map((c) => renderCall(format, c)).join(f.separator) + f.close;
  // Llama calls only count at the very start; what follows them is content after a newline.
  if (format === 'llama3_json') return { text: `${list}\n.${after}`, content: `.${after}`.trim() };
  // A marker prefix right before the real marker is content; a whole marker there would be a call.
  // Whitespace right after a call list is not content.
  return { text: `${before}${list}${after}`, content: (before + after.replace(/^[ \n]+/, '')).trim() };
}

/** Cut `text` at the given fractions of its length. */
function cut(text: string, points: number[]): string[] {
  const at = [...new Set(points.map((p) => Math.floor(p * text.length)))].sort((a, b) => a - b);
  const chunks: string[] = [];
  let last = 0;
  for (const i of at) {
    chunks.push(text.slice(last, i));
    last = i;
  }
  chunks.push(text.slice(last));
  return chunks;
}

describe('tool-call parsers: streamed result equals unary result for any chunking (fast-check)', () => {
  for (const format of FORMATS) {
    it(format, () => {
      fc.assert(
        fc.property(contentText, fc.array(toolCall, { maxLength: 3 }), contentText, fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 12 }), (before, calls, after, points) => {
          // `before` must not itself hold a full marker (then it would be a call, not content).
          fc.pre(!before.includes('<tool_call>') && !after.includes('<tool_call>'));
          const { text, content } = render(format, before, calls, after);
          const unary = parse(format, text);
          const want = calls.map((c, i) => ({ id: `call_${i}`, name: c.name, arguments: JSON.stringify(c.args) }));
          expect(unary, JSON.stringify(text)).toEqual({ content, toolCalls: want });
          const streamed = stream(format, cut(text, points));
          expect({ content: streamed.content, toolCalls: streamed.toolCalls }).toEqual(unary);
        }),
        { numRuns: 400, seed: 16 },
      );
    });
  }

  /** Markup of every format; none of it may ever reach content. */
  const MARKUP = ['<tool_call>', '</tool_call>', '[TOOL_CALLS]', '<|python_tag|>', '{"name"'];

  for (const format of FORMATS) {
    it(`${format}: arguments stream as they are generated, and output cut anywhere in a call never leaks markup`, () => {
      fc.assert(
        fc.property(fc.array(toolCall, { minLength: 1, maxLength: 3 }), fc.double({ min: 0, max: 1, noNaN: true }), fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 8 }), fc.boolean(), (calls, where, points, forced) => {
          const f = TOOL_CALL_FORMATS[format];
          const text = f.open + calls.map((c) => renderCall(format, c)).join(f.separator) + f.close;
          const full = parse(format, text).toolCalls;
          // max_tokens ends the output somewhere: streamed (any chunking) equals unary, no markup in content,
          // and every call begun is a prefix of the finished one.
          const prefix = text.slice(0, Math.floor(where * text.length));
          const opts = { newId: counterIds(), forced };
          const unary = parseToolCalls(format, prefix, opts);
          const parser = createToolCallStreamParser(format, { newId: counterIds(), forced });
          const steps = [...cut(prefix, points).map((c) => parser.push(c)), parser.finish()];
          const args: string[] = [];
          for (const d of steps.flatMap((st) => st.toolCalls)) args[d.index] = (args[d.index] ?? '') + (d.arguments ?? '');
          expect(args, JSON.stringify(prefix)).toEqual(unary.toolCalls.map((c) => c.arguments));
          expect(steps.map((st) => st.content).join('')).toBe(unary.content);
          if (format !== 'llama3_json' || forced) expect(unary.content, JSON.stringify(prefix)).toBe('');
          for (const m of MARKUP) expect(unary.content).not.toContain(m);
          unary.toolCalls.forEach((c, i) => {
            expect(c.name).toBe(full[i]!.name);
            expect(full[i]!.arguments.startsWith(c.arguments), `${c.arguments} vs ${full[i]!.arguments}`).toBe(true);
          });
          // Incremental: once the text reaches the last brace of a call's arguments, those arguments
          // are out in full, before the call object closes.
          const first = JSON.stringify({ name: calls[0]!.name, [f.argumentsKey]: calls[0]!.args }, null, calls[0]!.pretty ? 1 : undefined);
          const untilArgsEnd = f.open + f.callPrefix + first.slice(0, first.lastIndexOf('}'));
          const early = createToolCallStreamParser(format, counterIds()).push(untilArgsEnd).toolCalls;
          expect(early.map((d) => d.arguments).join('')).toBe(full[0]!.arguments);
        }),
        { numRuns: 300, seed: 23 },
      );
    });
  }

  it('arbitrary text never throws and streams as it parses whole', () => {
    const alphabet = fc.constantFrom('<tool_call>', '</tool_call>', '[TOOL_CALLS]', '<|python_tag|>', '{"name":"f","arguments":{}}', '{', '}', '[', ']', ',', ';', ' ', '\n', '"', '\\', 'a');
    fc.assert(
      fc.property(fc.constantFrom(...FORMATS), fc.array(alphabet, { maxLength: 20 }), fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 10 }), (format, parts, points) => {
        const text = parts.join('');
        const unary = parse(format, text);
        const streamed = stream(format, cut(text, points));
        expect({ content: streamed.content, toolCalls: streamed.toolCalls }).toEqual(unary);
      }),
      { numRuns: 1500, seed: 16 },
    );
  });

  it('default ids are unique', () => {
    const ids = new Set(Array.from({ length: 1000 }, newToolCallId));
    expect(ids.size).toBe(1000);
  });
});
