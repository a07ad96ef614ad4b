import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type ReasoningSplit, createReasoningParser, splitReasoning } from '../../grammar/reasoning/think.js';

/** Feed chunks; every non-empty step as it came out, and the concatenation. */
function stream(chunks: readonly string[], startsInReasoning = false): { steps: ReasoningSplit[]; total: ReasoningSplit } {
  const parser = createReasoningParser({ startsInReasoning });
  const steps = [...chunks.map((c) => parser.push(c)), parser.finish()];
  const total = { reasoning: steps.map((s) => s.reasoning).join(''), content: steps.map((s) => s.content).join('') };
  return { steps: steps.filter((s) => s.reasoning || s.content), total };
}

describe('splitReasoning', () => {
  it('splits a leading <think> block from the answer, trimming the newlines templates put around tags', () => {
    expect(splitReasoning('<think>\nThe user wants 2+2.\n</think>\n\nIt is 4.')).toEqual({ reasoning: 'The user wants 2+2.', content: 'It is 4.' });
  });

  it('without a leading <think>, everything is content', () => {
    expect(splitReasoning('It is 4.')).toEqual({ reasoning: '', content: 'It is 4.' });
    expect(splitReasoning('Use <think> tags like </think> this')).toEqual({ reasoning: '', content: 'Use <think> tags like </think> this' });
    expect(splitReasoning('Reasoning here</think>answer')).toEqual({ reasoning: '', content: 'Reasoning here</think>answer' });
  });

  it('when the prompt opened <think>, everything up to </think> is reasoning', () => {
    const opts = { startsInReasoning: true };
    expect(splitReasoning('Hmm, 2+2.\n</think>\n\n4', opts)).toEqual({ reasoning: 'Hmm, 2+2.', content: '4' });
    // A model that opens the tag again anyway.
    expect(splitReasoning('<think>\nHmm.</think>4', opts)).toEqual({ reasoning: 'Hmm.', content: '4' });
    expect(splitReasoning('</think>4', opts)).toEqual({ reasoning: '', content: '4' });
  });

  it('with no </think> by the end, everything after the opening is reasoning', () => {
    expect(splitReasoning('<think>still thinking when max_tokens hit')).toEqual({ reasoning: 'still thinking when max_tokens hit', content: '' });
    expect(splitReasoning('still thinking', { startsInReasoning: true })).toEqual({ reasoning: 'still thinking', content: '' });
    expect(splitReasoning('<thi')).toEqual({ reasoning: '', content: '<thi' });
  });
});

describe('createReasoningParser (streaming)', () => {
  it('holds back a tag split across chunks and never streams it', () => {
    const { steps } = stream(['<th', 'ink>Let me ', 'see.</th', 'ink>', ' Four', '.']);
    expect(steps).toEqual([
      { reasoning: 'Let me', content: '' },
      { reasoning: ' see.', content: '' },
      { reasoning: '', content: 'Four' },
      { reasoning: '', content: '.' },
    ]);
  });

  it('streams reasoning as it arrives when the prompt opened <think>', () => {
    const { steps } = stream(['Step one', ', step two', '</think>', 'Done'], true);
    expect(steps).toEqual([
      { reasoning: 'Step one', content: '' },
      { reasoning: ', step two', content: '' },
      { reasoning: '', content: 'Done' },
    ]);
  });

  it('streams plain content without waiting once it cannot be a <think>', () => {
    const parser = createReasoningParser();
    expect(parser.push('<')).toEqual({ reasoning: '', content: '' });
    expect(parser.push('b>bold')).toEqual({ reasoning: '', content: '<b>bold' });
  });
});

describe('reasoning parser: streamed result equals unary result for any chunking (fast-check)', () => {
  const piece = fc.constantFrom('<think>', '</think>', '<th', 'ink>', '</', 'a', 'b c', ' ', '\n', '<', '>');
  it('for any text, either starting mode', () => {
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 16 }), fc.boolean(), fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 10 }), (parts, starts, points) => {
        const text = parts.join('');
        const cuts = [...new Set(points.map((p) => Math.floor(p * text.length)))].sort((a, b) => a - b);
        const chunks = [...cuts, text.length].map((end, i, all) => text.slice(i === 0 ? 0 : all[i - 1], end));
        const whole = splitReasoning(text, { startsInReasoning: starts });
        expect(stream(chunks, starts).total).toEqual(whole);
      }),
      { numRuns: 2000, seed: 16 },
    );
  });

  it('a rendered <think> block splits back into its parts', () => {
    const words = fc.array(fc.constantFrom('a', 'b', '<', '>', '/', 'think', ' ', '\n'), { maxLength: 10 }).map((w) => w.join(''));
    fc.assert(
      fc.property(words, words, fc.boolean(), (reasoning, content, starts) => {
        fc.pre(!reasoning.includes('</think>') && !(starts && reasoning.trimStart().startsWith('<think>')));
        const text = `${starts ? '' : '<think>\n'}${reasoning}\n</think>\n\n${content}`;
        expect(splitReasoning(text, { startsInReasoning: starts })).toEqual({ reasoning: reasoning.trim(), content: content.trim() });
      }),
      { numRuns: 500, seed: 16 },
    );
  });
});
