/**
 * The byte bound that refuses oversized prompts before tokenizing them must never refuse a
 * prompt that fits: for every text, ceil(utf8 bytes / bytesPerToken) <= the real token count.
 * Checked as a seeded property over hostile strings with the real tiny tokenizers, plus the
 * configurations where no safe bound exists (those must get none).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HfTokenizer, loadPromptModel, loadTokenizer, minPromptTokens, tokenizePrompt, type PromptModel } from '../../frontend/preprocess/index.js';
import { SeededRandom } from '../../runtime/random.js';
import { sentencePieceTokenizer, tinyModels } from './fixtures.js';

let models: Awaited<ReturnType<typeof tinyModels>>;
const tokenizers: Record<string, HfTokenizer> = {};
let qwenJson: Record<string, unknown>;
let qwenConfig: Record<string, unknown>;
let qwenModel: PromptModel;

beforeAll(async () => {
  models = await tinyModels(['qwen3', 'llama']);
  for (const arch of ['qwen3', 'llama'] as const) tokenizers[arch] = await loadTokenizer(models.dir(arch));
  qwenJson = JSON.parse(await readFile(join(models.dir('qwen3'), 'tokenizer.json'), 'utf8')) as Record<string, unknown>;
  qwenConfig = JSON.parse(await readFile(join(models.dir('qwen3'), 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>;
  qwenModel = await loadPromptModel({ tokenizerDir: models.dir('qwen3'), templateDir: models.dir('qwen3') });
});
afterAll(async () => models.cleanup());

/** Pieces that stress the bound: long merges, multi-byte text, whitespace runs, specials. */
const PIECES = [
  'the', ' the', ' and', 'ing', 'quick brown fox', 'Grüße', '日本語のテキスト', '🦊🦊', 'e\u0301', '\uD83D', '\uDC00',
  '    ', '\n\n\n', '\t', '<|im_start|>', '<|im_end|>', '<|endoftext|>', '<|begin_of_text|>', '0123456789', '!!!???', 'ß', 'İ', '\u0000',
];

function randomText(rng: SeededRandom, maxPieces: number): string {
  const n = 1 + Math.floor(rng.nextUnit() * maxPieces);
  let s = '';
  for (let i = 0; i < n; i++) {
    if (rng.nextUnit() < 0.2) s += String.fromCodePoint(Math.floor(rng.nextUnit() * 0x110000));
    else s += PIECES[Math.floor(rng.nextUnit() * PIECES.length)]!;
  }
  return s;
}

describe('bytes-per-token bound', () => {
  it('byte-level tiny tokenizers get a bound equal to their longest token (13 bytes: <|endoftext|>)', () => {
    const qwen = tokenizers.qwen3!;
    const { offsets } = qwen.tokenBytes!;
    let longest = 0;
    for (let id = 0; id < qwen.vocabSize; id++) longest = Math.max(longest, offsets[id + 1]! - offsets[id]!);
    expect(qwen.bytesPerToken).toBe(longest);
    expect(longest).toBe('<|endoftext|>'.length);
    expect(tokenizers.llama!.bytesPerToken).toBeGreaterThan(0);
  });

  it('never exceeds the real token count: 3000 seeded hostile strings, both tokenizers, with and without specials', () => {
    const rng = new SeededRandom(20261124);
    for (const arch of ['qwen3', 'llama'] as const) {
      const tok = tokenizers[arch]!;
      for (let i = 0; i < 1500; i++) {
        const text = randomText(rng, i % 10 === 0 ? 400 : 30);
        const bound = minPromptTokens(tok, text);
        const real = tok.encode(text, { addSpecialTokens: false }).length;
        if (bound > real) throw new Error(`${arch}: bound ${bound} > real ${real} for ${JSON.stringify(text)} (seed 20261124, case ${i})`);
        expect(bound).toBeLessThanOrEqual(tok.encode(text, { addSpecialTokens: true }).length);
      }
    }
  });

  it('is tight enough to matter: 13 kB of the longest token is bounded at 1000 tokens and really is 1000', () => {
    const tok = tokenizers.qwen3!;
    const text = '<|endoftext|>'.repeat(1000);
    expect(minPromptTokens(tok, text)).toBe(1000);
    expect(tok.encode(text, { addSpecialTokens: false })).toHaveLength(1000);
  });

  it('tokenizePrompt refuses by the bound without encoding, and never refuses a prompt that fits exactly', () => {
    const rng = new SeededRandom(7);
    for (let i = 0; i < 300; i++) {
      const text = randomText(rng, 60);
      const real = qwenModel.tokenizer.encode(text, { addSpecialTokens: false }).length;
      // A budget of exactly the real count must always tokenize.
      const fits = tokenizePrompt(qwenModel, { kind: 'text', text, addSpecialTokens: false }, real);
      expect(fits.type).toBe('tokens');
      if (fits.type === 'tokens') expect(fits.ids).toHaveLength(real);
    }
    // 100 kB with a 2047-token budget: ceil(100000 / 13) = 7693 tokens at least.
    const big = tokenizePrompt(qwenModel, { kind: 'text', text: 'a'.repeat(100_000), addSpecialTokens: false }, 2047);
    expect(big).toEqual({ type: 'too_long', minTokens: 7693 });
  });

  it('chat prompts are bounded on the rendered text (the template adds, never removes, bytes here)', () => {
    const messages = [{ role: 'user', content: 'x'.repeat(50_000) }];
    const result = tokenizePrompt(qwenModel, { kind: 'chat', messages, addGenerationPrompt: true }, 2047);
    expect(result.type).toBe('too_long');
    if (result.type === 'too_long') expect(result.minTokens).toBeGreaterThan(50_000 / 13);
  });

  it('configurations that can drop or fuse bytes get no bound (always tokenized exactly)', () => {
    expect(sentencePieceTokenizer().bytesPerToken).toBeUndefined();
    const variant = (patch: Record<string, unknown>) => HfTokenizer.fromJson({ ...structuredClone(qwenJson), ...patch }, qwenConfig).bytesPerToken;
    expect(variant({ normalizer: { type: 'Replace', pattern: { String: ' ' }, content: '' } })).toBeUndefined();
    expect(variant({ normalizer: { type: 'Strip', strip_left: true, strip_right: true } })).toBeUndefined();
    expect(variant({ truncation: { max_length: 16, strategy: 'LongestFirst', stride: 0, direction: 'Right' } })).toBeUndefined();
    const pre = qwenJson.pre_tokenizer as { pretokenizers: Array<Record<string, unknown>> };
    const removed = { type: 'Sequence', pretokenizers: [{ ...pre.pretokenizers[0], behavior: 'Removed' }, pre.pretokenizers[1]] };
    expect(variant({ pre_tokenizer: removed })).toBeUndefined();
    const added = (qwenJson.added_tokens as Array<Record<string, unknown>>).map((t, i) => (i === 0 ? { ...t, rstrip: true } : t));
    expect(variant({ added_tokens: added })).toBeUndefined();
    // Unicode normalization may shrink text up to 4x (e.g. U+1D400 -> 'A'): the bound widens.
    expect(variant({ normalizer: { type: 'NFKC' } })).toBe(4 * tokenizers.qwen3!.bytesPerToken!);
  });
});
