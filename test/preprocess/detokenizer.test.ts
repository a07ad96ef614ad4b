import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IncrementalDetokenizer, StopStringMatcher, loadTokenizer, type HfTokenizer } from '../../frontend/preprocess/index.js';
import { sentencePieceTokenizer, spByte, spWord, tinyModels } from './fixtures.js';

let models: Awaited<ReturnType<typeof tinyModels>>;
let qwen: HfTokenizer;
let llama: HfTokenizer;
beforeAll(async () => {
  models = await tinyModels(['qwen2', 'llama']);
  qwen = await loadTokenizer(models.dir('qwen2'));
  llama = await loadTokenizer(models.dir('llama'));
});
afterAll(async () => models.cleanup());

const enc = (tok: HfTokenizer, text: string) => tok.encode(text, { addSpecialTokens: false });
/** Feed ids one at a time and record every emitted piece. */
function feed(detok: IncrementalDetokenizer, ids: number[]): string[] {
  return ids.map((id) => detok.push(id));
}

describe('IncrementalDetokenizer: UTF-8', () => {
  it('an emoji spelled as four byte tokens appears only when its last byte arrives', () => {
    const ids = enc(qwen, '😀');
    expect(ids).toHaveLength(4); // F0 9F 98 80, one byte token each
    const pieces = feed(new IncrementalDetokenizer(qwen), ids);
    expect(pieces).toEqual(['', '', '', '😀']);
  });

  it('streamed pieces concatenate to the full decode and never contain U+FFFD', () => {
    const texts = ['Emoji 😀👍🏽🇫🇷 mixed with 中文字符, ünïcödé and the quick brown fox.', 'a\u0301 🧑‍🚀 spaced   out\n\ttext 日本語'];
    for (const tok of [qwen, llama]) {
      for (const text of texts) {
        const ids = enc(tok, text);
        const detok = new IncrementalDetokenizer(tok);
        const pieces = feed(detok, ids);
        pieces.push(detok.flush());
        expect(pieces.join('')).toBe(text);
        expect(pieces.some((p) => p.includes('\uFFFD'))).toBe(false);
        expect(pieces.filter((p) => p.length > 0).length).toBeGreaterThan(5);
      }
    }
  });

  it('a stream cut mid-character flushes the broken tail as U+FFFD instead of dropping it', () => {
    const ids = enc(qwen, 'ok 😀');
    const detok = new IncrementalDetokenizer(qwen);
    const out = feed(detok, ids.slice(0, -2)).join('');
    expect(out).toBe('ok ');
    expect(detok.flush()).toBe('\uFFFD');
    expect(detok.isFinished).toBe(false);
  });

  it('special tokens are skipped by default and printed literally when asked', () => {
    const ids = [...enc(qwen, 'hi'), qwen.tokenId('<|im_start|>')!, ...enc(qwen, 'there')];
    expect(new IncrementalDetokenizer(qwen).pushMany(ids)).toBe('hithere');
    expect(new IncrementalDetokenizer(qwen, { skipSpecialTokens: false }).pushMany(ids)).toBe('hi<|im_start|>there');
  });
});

describe('IncrementalDetokenizer: stop strings and stop tokens', () => {
  const text = 'Hello world, the quick brown fox jumps over the lazy dog.';

  it('a stop string spanning several tokens trims the output before it and finishes with stop', () => {
    const ids = enc(qwen, text);
    const detok = new IncrementalDetokenizer(qwen, { stop: ['quick brown'] });
    const pieces = feed(detok, ids);
    expect(pieces.join('')).toBe('Hello world, the ');
    expect(detok.isFinished).toBe(true);
    expect(detok.finishReason).toBe('stop');
    expect(detok.stopReason).toBe('quick brown');
    // consumed up to the token completing " brown"; later tokens were ignored
    expect(detok.numTokens).toBeLessThan(ids.length);
    expect(enc(qwen, 'quick brown').length).toBeGreaterThan(1); // the stop really spans tokens
    expect(detok.flush()).toBe('');
  });

  it('text that could start a stop string is held back, then released when it cannot', () => {
    const detok = new IncrementalDetokenizer(qwen, { stop: ['fox!!'] });
    const ids = enc(qwen, text);
    const upToFox = enc(qwen, 'Hello world, the quick brown fox').length;
    const before = feed(detok, ids.slice(0, upToFox)).join('');
    expect(before).toBe('Hello world, the quick brown ');
    const after = feed(detok, ids.slice(upToFox)).join('') + detok.flush();
    expect(before + after).toBe(text);
    expect(detok.isFinished).toBe(false);
  });

  it('flush releases held text at the end of a length-limited stream', () => {
    const detok = new IncrementalDetokenizer(qwen, { stop: ['dog and cat'] });
    const out = detok.pushMany(enc(qwen, 'the lazy dog'));
    expect(out).toBe('the lazy ');
    expect(detok.flush()).toBe('dog');
    expect(detok.flush()).toBe('');
  });

  it('includeStopStrInOutput keeps the stop string; the earliest of several stops wins', () => {
    const a = new IncrementalDetokenizer(qwen, { stop: ['lazy', 'fox'], includeStopStrInOutput: true });
    expect(a.pushMany(enc(qwen, text))).toBe('Hello world, the quick brown fox');
    expect(a.stopReason).toBe('fox');
  });

  it('a stop string inside a multi-byte sequence of tokens matches on text, not bytes', () => {
    const detok = new IncrementalDetokenizer(qwen, { stop: ['👍'] });
    const pieces = feed(detok, enc(qwen, 'yes 😀👍 no'));
    expect(pieces.join('')).toBe('yes 😀');
    expect(detok.stopReason).toBe('👍');
  });

  it('EOS ends the stream unprinted and releases held-back text', () => {
    const eos = qwen.tokenId('<|im_end|>')!;
    const detok = new IncrementalDetokenizer(qwen, { stop: ['dog!'], stopTokenIds: [eos] });
    const out = detok.pushMany([...enc(qwen, 'lazy dog'), eos, ...enc(qwen, ' more')]);
    expect(out).toBe('lazy dog');
    expect(detok.finishReason).toBe('stop');
    expect(detok.stopReason).toBe(eos);
    expect(detok.numTokens).toBe(enc(qwen, 'lazy dog').length + 1);
    expect(detok.push(enc(qwen, 'x')[0]!)).toBe('');
  });

  it('without a stop token id the EOS token is just skipped special text', () => {
    const eos = qwen.tokenId('<|im_end|>')!;
    const detok = new IncrementalDetokenizer(qwen);
    expect(detok.pushMany([...enc(qwen, 'a'), eos, ...enc(qwen, 'b')])).toBe('ab');
    expect(detok.isFinished).toBe(false);
  });
});

describe('IncrementalDetokenizer: generic (windowed) path', () => {
  it('sentencepiece byte fallback: holds partial bytes, restores word spaces', () => {
    const sp = sentencePieceTokenizer();
    expect(sp.tokenBytes).toBeUndefined();
    const ids = [spWord('▁hello'), spWord('▁world'), spByte(0xf0), spByte(0x9f), spByte(0x98), spByte(0x80), spWord('▁the')];
    const detok = new IncrementalDetokenizer(sp);
    expect(feed(detok, ids)).toEqual(['hello', ' world', '', '', '', '😀', ' the']);
    expect(detok.flush()).toBe('');
  });

  it('prompt context keeps the first output word spaced', () => {
    const sp = sentencePieceTokenizer();
    const detok = new IncrementalDetokenizer(sp, { promptTokenIds: [spWord('▁hello')] });
    expect(feed(detok, [spWord('▁world')])).toEqual([' world']);
  });

  it('stop strings span tokens on the generic path too', () => {
    const sp = sentencePieceTokenizer();
    const detok = new IncrementalDetokenizer(sp, { stop: ['o wo'] });
    expect(detok.pushMany([spWord('▁hello'), spWord('▁world'), spWord('▁the')])).toBe('hell');
    expect(detok.stopReason).toBe('o wo');
  });
});

describe('StopStringMatcher', () => {
  it('holds the longest suffix that prefixes any stop string', () => {
    const m = new StopStringMatcher(['abcd', 'cx']);
    expect(m.push('zzab')).toBe('zz');
    expect(m.heldText).toBe('ab');
    expect(m.push('c')).toBe(''); // 'abc' prefixes 'abcd'; 'c' prefixes 'cx'
    expect(m.push('y')).toBe('abcy');
    expect(m.matched).toBeUndefined();
    expect(m.push('abcd tail')).toBe('');
    expect(m.matched).toBe('abcd');
    expect(m.push('more')).toBe('');
  });

  it('at the same position the longer stop string wins', () => {
    const m = new StopStringMatcher(['ab', 'abc'], true);
    expect(m.push('xabcx')).toBe('xabc');
    expect(m.matched).toBe('abc');
  });

  it('no stop strings: pass-through with nothing held', () => {
    const m = new StopStringMatcher(['']);
    expect(m.hasStops).toBe(false);
    expect(m.push('abc')).toBe('abc');
    expect(m.flush()).toBe('');
  });
});
