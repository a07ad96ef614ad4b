/**
 * vocabularyFromTokenizerJson: token bytes for byte-level BPE (make-tiny's real tokenizer.json),
 * SentencePiece metaspace + byte-fallback, special tokens null, padding to the model's vocab,
 * and an identity that changes with the bytes or the EOS ids.
 */
import { describe, expect, it } from 'vitest';
import { vocabularyFromTokenizerJson } from '../../grammar/vocabulary.js';
import { BYTE_TO_CHAR } from '../../grammar/byte-level.js';
import { buildTinyTokenizer } from '../../workers/models/tiny-tokenizer.js';

const text = (b: Uint8Array | null | undefined): string | null => (b == null ? null : new TextDecoder().decode(b));

describe('vocabularyFromTokenizerJson', () => {
  it('byte-level BPE (make-tiny qwen3): every byte token decodes to its byte, merges to their text, specials are null', () => {
    const tok = buildTinyTokenizer('qwen3', 4096);
    const json = tok.tokenizerJson as { model: { vocab: Record<string, number> }; added_tokens: Array<{ id: number }> };
    const vocab = vocabularyFromTokenizerJson(json, { eosTokenIds: tok.generationEosTokenIds, vocabSize: tok.vocabSize + 10 });
    expect(vocab.size).toBe(tok.vocabSize + 10);
    for (let b = 0; b < 256; b++) {
      const id = json.model.vocab[BYTE_TO_CHAR[b]!]!;
      expect(Array.from(vocab.tokenBytes[id]!)).toEqual([b]);
    }
    const spaceThe = json.model.vocab['Ġthe'];
    if (spaceThe !== undefined) expect(text(vocab.tokenBytes[spaceThe])).toBe(' the');
    for (const a of json.added_tokens) expect(vocab.tokenBytes[a.id]).toBeNull();
    for (const id of tok.generationEosTokenIds) expect(vocab.eosTokenIds).toContain(id);
    expect(vocab.tokenBytes[tok.vocabSize + 5]).toBeNull(); // padding past the tokenizer
  });

  it('SentencePiece: ▁ is a space, <0xNN> is one byte, <s> special is null', () => {
    const json = {
      added_tokens: [{ id: 1, content: '<s>', special: true }, { id: 2, content: '</s>', special: true }],
      model: { type: 'BPE', byte_fallback: true, vocab: { '<unk>': 0, '<s>': 1, '</s>': 2, '<0x0A>': 3, '<0xE2>': 4, '▁hello': 5, 'world': 6 } },
      decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '▁' }, content: ' ' }, { type: 'ByteFallback' }] },
    };
    const v = vocabularyFromTokenizerJson(json, { eosTokenIds: [2] });
    expect(Array.from(v.tokenBytes[3]!)).toEqual([0x0a]);
    expect(Array.from(v.tokenBytes[4]!)).toEqual([0xe2]);
    expect(text(v.tokenBytes[5])).toBe(' hello');
    expect(text(v.tokenBytes[6])).toBe('world');
    expect(v.tokenBytes[1]).toBeNull();
    expect(v.tokenBytes[2]).toBeNull();
    expect(v.eosTokenIds).toEqual([2]);
  });

  it('id: same input same id; different EOS ids or token bytes give a different id', () => {
    const tok = buildTinyTokenizer('llama', 4096);
    const a = vocabularyFromTokenizerJson(tok.tokenizerJson, { eosTokenIds: [tok.configEosTokenIds[0]!] });
    const b = vocabularyFromTokenizerJson(JSON.parse(JSON.stringify(tok.tokenizerJson)), { eosTokenIds: [tok.configEosTokenIds[0]!] });
    expect(a.id).toBe(b.id);
    expect(vocabularyFromTokenizerJson(tok.tokenizerJson, { eosTokenIds: [] }).id).not.toBe(a.id);
    const changed = JSON.parse(JSON.stringify(tok.tokenizerJson)) as { model: { vocab: Record<string, number> } };
    const [k, id] = Object.entries(changed.model.vocab).find(([, i]) => i === 300)!;
    delete changed.model.vocab[k];
    changed.model.vocab['zzzq'] = id;
    expect(vocabularyFromTokenizerJson(changed, { eosTokenIds: [tok.configEosTokenIds[0]!] }).id).not.toBe(a.id);
  });
});
