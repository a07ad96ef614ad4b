/**
 * A tokenizer's vocabulary as bytes (the grammar engine's `Vocabulary`), from a parsed Hugging
 * Face tokenizer.json. Pure: the caller reads the file and supplies the EOS ids (config.json /
 * generation_config.json), so this module does no I/O.
 *
 * What a token appends to the output, by tokenizer kind:
 *   - byte-level BPE (GPT-2, Llama 3, Qwen: a ByteLevel decoder or pre-tokenizer): each char of
 *     the token string is one byte through GPT-2's byte↔unicode table (grammar/byte-level.ts);
 *   - SentencePiece-style (Llama 2, Mistral: a Metaspace or Replace("▁", " ") decoder): `▁` is a
 *     space, and byte-fallback tokens `<0xNN>` are the single byte NN;
 *   - otherwise the token string's UTF-8 bytes.
 * Added tokens marked `special` (and every added token of a byte-fallback SentencePiece model
 * that looks like `<...>`) are null: a grammar never allows them, except EOS where it accepts.
 * The SentencePiece leading-space strip (the decoder drops the first `▁` of the output) is not
 * modelled: a grammar would see one space the user does not. Documented in docs/structured-output.md.
 */
import { createHash } from 'node:crypto';
import { charCodeToByte } from './byte-level.js';
import type { Vocabulary } from './contract.js';

export interface VocabularyOptions {
  /** Tokens that end the sequence (config.json eos_token_id, generation_config.json). */
  eosTokenIds?: readonly number[];
  /**
   * Size the mask must cover: the model's vocab_size (embedding rows), often padded past the
   * tokenizer's last id. Ids without a token are null (never allowed). Default: tokenizer size.
   */
  vocabSize?: number;
}

type Kind = 'byte_level' | 'metaspace' | 'plain';

const encoder = new TextEncoder();
const BYTE_FALLBACK = /^<0x([0-9A-Fa-f]{2})>$/;

export function vocabularyFromTokenizerJson(json: unknown, options: VocabularyOptions = {}): Vocabulary {
  const tok = asObject(json, 'tokenizer.json');
  const model = asObject(tok.model, 'tokenizer.json model');
  const vocab = model.vocab;
  const entries: Array<[string, number]> = [];
  if (Array.isArray(vocab)) {
    // Unigram: [[piece, score], ...], the id is the index.
    vocab.forEach((e, i) => {
      if (Array.isArray(e) && typeof e[0] === 'string') entries.push([e[0], i]);
    });
  } else if (vocab !== null && typeof vocab === 'object') {
    for (const [piece, id] of Object.entries(vocab as Record<string, unknown>)) if (typeof id === 'number') entries.push([piece, id]);
  } else {
    throw new TypeError('tokenizer.json: model.vocab is missing');
  }
  const added: Array<{ content: string; id: number; special: boolean }> = [];
  if (Array.isArray(tok.added_tokens)) {
    for (const a of tok.added_tokens as Array<Record<string, unknown>>) {
      if (typeof a?.content === 'string' && typeof a.id === 'number') added.push({ content: a.content, id: a.id, special: a.special === true });
    }
  }
  let size = options.vocabSize ?? 0;
  for (const [, id] of entries) size = Math.max(size, id + 1);
  for (const a of added) size = Math.max(size, a.id + 1);

  const kind = kindOf(tok);
  const byteFallback = model.byte_fallback === true;
  const tokenBytes: Array<Uint8Array | null> = new Array(size).fill(null);
  for (const [piece, id] of entries) tokenBytes[id] = pieceBytes(piece, kind, byteFallback);
  for (const a of added) {
    // Special tokens (BOS, EOS, chat markers) never appear in constrained text.
    tokenBytes[a.id] = a.special ? null : encoder.encode(a.content);
  }
  const eosTokenIds = [...new Set(options.eosTokenIds ?? [])].filter((id) => Number.isInteger(id) && id >= 0 && id < size);
  for (const id of eosTokenIds) tokenBytes[id] = null;
  return { id: identity(tokenBytes, eosTokenIds), size, tokenBytes, eosTokenIds };
}

function kindOf(tok: Record<string, unknown>): Kind {
  const types = new Set<string>();
  collectTypes(tok.decoder, types);
  collectTypes(tok.pre_tokenizer, types);
  if (types.has('ByteLevel')) return 'byte_level';
  if (types.has('Metaspace') || types.has('Replace') || types.has('ByteFallback')) return 'metaspace';
  return 'plain';
}

function collectTypes(node: unknown, into: Set<string>): void {
  if (node === null || typeof node !== 'object') return;
  const o = node as Record<string, unknown>;
  if (typeof o.type === 'string') into.add(o.type);
  for (const key of ['decoders', 'pretokenizers']) {
    const list = o[key];
    if (Array.isArray(list)) for (const child of list) collectTypes(child, into);
  }
}

function pieceBytes(piece: string, kind: Kind, byteFallback: boolean): Uint8Array | null {
  if (kind === 'byte_level') {
    const out = new Uint8Array(piece.length);
    for (let i = 0; i < piece.length; i++) {
      const b = charCodeToByte(piece.charCodeAt(i));
      // A char outside the table: not a byte-level token (a stray added piece); never allowed.
      if (b === undefined) return null;
      out[i] = b;
    }
    return out;
  }
  const fb = BYTE_FALLBACK.exec(piece);
  if (fb !== null && (byteFallback || kind === 'metaspace')) return Uint8Array.of(parseInt(fb[1]!, 16));
  if (kind === 'metaspace') return encoder.encode(piece.replace(/\u2581/g, ' '));
  return encoder.encode(piece);
}

/** sha256 over (size, each token's bytes length-prefixed, EOS ids): the cache-key identity. */
function identity(tokenBytes: ReadonlyArray<Uint8Array | null>, eos: readonly number[]): string {
  const h = createHash('sha256');
  const head = new Uint32Array([tokenBytes.length]);
  h.update(new Uint8Array(head.buffer));
  const len = new Uint32Array(1);
  for (const b of tokenBytes) {
    len[0] = b === null ? 0xffffffff : b.length;
    h.update(new Uint8Array(len.buffer));
    if (b !== null) h.update(b);
  }
  h.update(`eos:${eos.join(',')}`);
  return h.digest('hex').slice(0, 32);
}

function asObject(v: unknown, what: string): Record<string, unknown> {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new TypeError(`${what} is not an object`);
  return v as Record<string, unknown>;
}

/** A Vocabulary as two flat arrays, to cross a thread boundary in one structured clone. */
export interface PackedVocabulary {
  id: string;
  size: number;
  eosTokenIds: number[];
  bytes: Uint8Array;
  /** Token i's bytes are bytes[offsets[i] .. offsets[i+1]); a null token has lengths[i] = -1. */
  offsets: Int32Array;
  lengths: Int32Array;
}

export function packVocabulary(vocab: Vocabulary): PackedVocabulary {
  let total = 0;
  for (const b of vocab.tokenBytes) total += b?.length ?? 0;
  const bytes = new Uint8Array(total);
  const offsets = new Int32Array(vocab.size);
  const lengths = new Int32Array(vocab.size);
  let at = 0;
  for (let i = 0; i < vocab.size; i++) {
    const b = vocab.tokenBytes[i];
    offsets[i] = at;
    if (b === null || b === undefined) {
      lengths[i] = -1;
      continue;
    }
    bytes.set(b, at);
    lengths[i] = b.length;
    at += b.length;
  }
  return { id: vocab.id, size: vocab.size, eosTokenIds: [...vocab.eosTokenIds], bytes, offsets, lengths };
}

export function unpackVocabulary(p: PackedVocabulary): Vocabulary {
  const tokenBytes: Array<Uint8Array | null> = new Array(p.size);
  for (let i = 0; i < p.size; i++) tokenBytes[i] = p.lengths[i]! < 0 ? null : p.bytes.subarray(p.offsets[i]!, p.offsets[i]! + p.lengths[i]!);
  return { id: p.id, size: p.size, tokenBytes, eosTokenIds: p.eosTokenIds };
}
