/**
 * Fixtures for preprocessing tests: tiny model directories (generated, byte-level BPE) and a
 * hand-built sentencepiece-style tokenizer (Metaspace + byte fallback) for the generic path.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeTinyModel, type TinyArch } from '../../workers/models/index.js';
import { HfTokenizer } from '../../frontend/preprocess/index.js';

export async function tinyModels(archs: TinyArch[]): Promise<{ dir: (arch: TinyArch) => string; cleanup: () => Promise<void> }> {
  const root = await mkdtemp(join(tmpdir(), 'tandem-preprocess-'));
  for (const arch of archs) await makeTinyModel({ arch, outDir: join(root, arch) });
  return { dir: (arch) => join(root, arch), cleanup: () => rm(root, { recursive: true, force: true }) };
}

/** Ids: <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258, then WORDS from 259. */
export const SP_WORDS = ['▁hello', '▁world', '▁', 'hello', '▁the', '▁stop', 'here'] as const;
export const spByte = (b: number) => 3 + b;
export const spWord = (w: (typeof SP_WORDS)[number]) => 259 + SP_WORDS.indexOf(w);

export function sentencePieceTokenizer(): HfTokenizer {
  const vocab: Record<string, number> = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = spByte(b);
  SP_WORDS.forEach((w, i) => (vocab[w] = 259 + i));
  const special = (id: number, content: string) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  return HfTokenizer.fromJson(
    {
      version: '1.0',
      added_tokens: [special(0, '<unk>'), special(1, '<s>'), special(2, '</s>')],
      normalizer: null,
      pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: false },
      post_processor: null,
      decoder: {
        type: 'Sequence',
        decoders: [
          { type: 'Replace', pattern: { String: '▁' }, content: ' ' },
          { type: 'ByteFallback' },
          { type: 'Fuse' },
          { type: 'Strip', content: ' ', start: 1, stop: 0 },
        ],
      },
      model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges: [] },
    },
    { bos_token: '<s>', eos_token: '</s>', unk_token: '<unk>', clean_up_tokenization_spaces: false },
  );
}
