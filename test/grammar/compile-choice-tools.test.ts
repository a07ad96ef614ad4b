import { describe, expect, it } from 'vitest';
import { GrammarError } from '../../grammar/contract.js';
import { compileSpec } from '../../grammar/compile/index.js';
import { TOOL_CALL_FORMATS } from '../../grammar/tool-calls/formats.js';
import { matches, randomInstance, rng, makeAjv } from './compile-ir-tools.js';

const weather = { type: 'object', properties: { city: { type: 'string' }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'], additionalProperties: false };
const time = { type: 'object', properties: { tz: { type: 'string', maxLength: 6 } }, required: ['tz'], additionalProperties: false };

describe('choice', () => {
  it('exactly one of the strings', () => {
    const g = compileSpec({ kind: 'choice', choices: ['yes', 'no', 'maybe "so"'] });
    for (const s of ['yes', 'no', 'maybe "so"']) expect(matches(g, s)).toBe(true);
    for (const s of ['ye', 'yesno', '', 'NO']) expect(matches(g, s)).toBe(false);
  });
  it('an empty list is a 400', () => {
    expect(() => compileSpec({ kind: 'choice', choices: [] })).toThrow(GrammarError);
    expect(() => compileSpec({ kind: 'choice', choices: [] })).toThrow('choice: the list of choices is empty');
  });
});

describe('json_object', () => {
  it('any compact JSON object, nothing else', () => {
    const g = compileSpec({ kind: 'json_object' });
    for (const s of ['{}', '{"a":{"b":[1,2.5e3,"x",null,true]}}']) expect(matches(g, s)).toBe(true);
    for (const s of ['[]', '"x"', '{"a":1,}', '{ }']) expect(matches(g, s)).toBe(false);
  });
});

describe('tool_calls', () => {
  it('hermes, one call: the framing from formats.ts around {"name","arguments"}', () => {
    const g = compileSpec({ kind: 'tool_calls', format: 'hermes', parallel: false, tools: [{ name: 'get_weather', parameters: weather }] });
    expect(matches(g, '<tool_call>\n{"name":"get_weather","arguments":{"city":"Oslo","unit":"c"}}\n</tool_call>')).toBe(true);
    expect(matches(g, '<tool_call>\n{"name":"get_weather","arguments":{"city":"Oslo"}}\n</tool_call>')).toBe(false);
    expect(matches(g, '<tool_call>\n{"name":"other","arguments":{"city":"Oslo","unit":"c"}}\n</tool_call>')).toBe(false);
    const one = '<tool_call>\n{"name":"get_weather","arguments":{"city":"A","unit":"f"}}\n</tool_call>';
    expect(matches(g, `${one}\n${one}`)).toBe(false);
  });

  it('mistral, parallel, two tools: a JSON array of calls, each tool with its own schema', () => {
    const g = compileSpec({
      kind: 'tool_calls',
      format: 'mistral',
      parallel: true,
      tools: [{ name: 'get_weather', parameters: weather }, { name: 'get_time', parameters: time }],
    });
    expect(matches(g, '[TOOL_CALLS][{"name":"get_time","arguments":{"tz":"UTC"}}]')).toBe(true);
    expect(matches(g, '[TOOL_CALLS][{"name":"get_time","arguments":{"tz":"UTC"}}, {"name":"get_weather","arguments":{"city":"x","unit":"c"}}]')).toBe(true);
    expect(matches(g, '[TOOL_CALLS][{"name":"get_time","arguments":{"city":"x","unit":"c"}}]')).toBe(false);
    expect(matches(g, '[TOOL_CALLS][]')).toBe(false);
  });

  it('llama3_json uses "parameters"; sampled calls parse and validate per tool', () => {
    const fmt = TOOL_CALL_FORMATS.llama3_json;
    const g = compileSpec({ kind: 'tool_calls', format: 'llama3_json', parallel: true, tools: [{ name: 'get_weather', parameters: weather }, { name: 'get_time', parameters: time }] });
    const ajv = makeAjv();
    const validators = { get_weather: ajv.compile(weather), get_time: ajv.compile(time) };
    const rand = rng(7);
    for (let i = 0; i < 50; i++) {
      const text = randomInstance(g, rand);
      for (const part of text.split(fmt.separator)) {
        const call = JSON.parse(part) as { name: 'get_weather' | 'get_time'; parameters: unknown };
        expect(Object.keys(call)).toEqual(['name', 'parameters']);
        expect(validators[call.name](call.parameters)).toBe(true);
      }
    }
  });

  it('tool parameter errors name the tool; no tools is a 400', () => {
    expect(() => compileSpec({ kind: 'tool_calls', format: 'hermes', parallel: false, tools: [] })).toThrow('no tools');
    expect(() =>
      compileSpec({ kind: 'tool_calls', format: 'hermes', parallel: false, tools: [{ name: 'f', parameters: { type: 'object', properties: { a: { not: {} } } } }] }),
    ).toThrow('tools[0] "f" parameters: "not" is not supported (at #/properties/a)');
  });

  it('tools with same-named $defs do not collide', () => {
    const withDefs = (t: string) => ({ $defs: { v: { type: t } }, type: 'object', properties: { v: { $ref: '#/$defs/v' } }, required: ['v'], additionalProperties: false });
    const g = compileSpec({ kind: 'tool_calls', format: 'hermes', parallel: false, tools: [{ name: 'a', parameters: withDefs('integer') }, { name: 'b', parameters: withDefs('string') }] });
    expect(matches(g, '<tool_call>\n{"name":"a","arguments":{"v":1}}\n</tool_call>')).toBe(true);
    expect(matches(g, '<tool_call>\n{"name":"b","arguments":{"v":"s"}}\n</tool_call>')).toBe(true);
    expect(matches(g, '<tool_call>\n{"name":"a","arguments":{"v":"s"}}\n</tool_call>')).toBe(false);
  });
});
