/**
 * The frontend's tokenizer: a thin wrapper over @huggingface/tokenizers that loads
 * tokenizer.json + tokenizer_config.json from a model directory and answers in token ids.
 * For byte-level BPE tokenizers it also builds a flat id -> bytes table, which lets the
 * incremental detokenizer stream text without calling the library per token.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { byteLevelToBytes } from '../../grammar/byte-level.js';
import { isObject } from '../../proto/wire.js';
import { TokenizerLoadError } from './errors.js';
import { bytesPerTokenBound } from './token-bound.js';

export interface EncodeOptions {
  /** Add the post-processor's special tokens (e.g. Llama 3's BOS). Default true. */
  addSpecialTokens?: boolean;
}

export interface DecodeOptions {
  /** Drop special tokens from the text. Default true. */
  skipSpecialTokens?: boolean;
}

/** UTF-8 bytes of every token id, flattened: token i is bytes[offsets[i] .. offsets[i+1]). */
export interface TokenBytesTable {
  bytes: Uint8Array;
  offsets: Uint32Array;
}

export class HfTokenizer {
  /** One past the largest token id (model vocabulary plus added tokens). */
  readonly vocabSize: number;
  readonly bosToken: string | undefined;
  readonly eosToken: string | undefined;
  readonly bosTokenId: number | undefined;
  readonly eosTokenId: number | undefined;
  /** 1 at the ids of special added tokens. */
  readonly specialMask: Uint8Array;
  /** Present when the tokenizer is byte-level BPE (GPT-2, Llama 3, Qwen, ...). */
  readonly tokenBytes: TokenBytesTable | undefined;
  /**
   * Most UTF-8 input bytes one token can stand for, when that is provably bounded (byte-level
   * BPE, see token-bound.ts): a text of B bytes has at least ceil(B / bytesPerToken) tokens.
   */
  readonly bytesPerToken: number | undefined;
  /** The raw tokenizer_config.json, for chat-template variables. */
  readonly config: Readonly<Record<string, unknown>>;
  private readonly hf: Tokenizer;
  private readonly addedContent = new Map<number, string>();

  private constructor(tokenizerJson: Record<string, unknown>, tokenizerConfig: Record<string, unknown>) {
    this.config = tokenizerConfig;
    this.bosToken = specialTokenString(tokenizerConfig.bos_token);
    this.eosToken = specialTokenString(tokenizerConfig.eos_token);
    // The library reads bos/eos as plain strings; older configs store AddedToken dicts.
    const libConfig = { ...tokenizerConfig, bos_token: this.bosToken, eos_token: this.eosToken };
    try {
      this.hf = new Tokenizer(tokenizerJson, libConfig);
    } catch (cause) {
      throw new TokenizerLoadError(`tokenizer.json could not be loaded: ${(cause as Error).message}`, { cause });
    }
    const vocab = this.hf.get_vocab(true);
    let maxId = -1;
    for (const id of vocab.values()) if (id > maxId) maxId = id;
    const added = Array.isArray(tokenizerJson.added_tokens) ? (tokenizerJson.added_tokens as Array<{ id: number; content: string; special?: boolean }>) : [];
    for (const t of added) if (t.id > maxId) maxId = t.id;
    this.vocabSize = maxId + 1;
    this.specialMask = new Uint8Array(this.vocabSize);
    for (const t of added) {
      this.addedContent.set(t.id, t.content);
      if (t.special) this.specialMask[t.id] = 1;
    }
    this.bosTokenId = this.bosToken === undefined ? undefined : this.hf.token_to_id(this.bosToken);
    this.eosTokenId = this.eosToken === undefined ? undefined : this.hf.token_to_id(this.eosToken);
    this.tokenBytes = buildByteTable(tokenizerJson, vocab, this.addedContent, this.vocabSize);
    this.bytesPerToken = bytesPerTokenBound(tokenizerJson, this.tokenBytes, new Set(this.addedContent.keys()));
  }

  static fromJson(tokenizerJson: unknown, tokenizerConfig: unknown = {}): HfTokenizer {
    if (!isObject(tokenizerJson) || !isObject(tokenizerJson.model)) throw new TokenizerLoadError('tokenizer.json has no model section');
    if (!isObject(tokenizerConfig)) throw new TokenizerLoadError('tokenizer_config.json is not an object');
    return new HfTokenizer(tokenizerJson, tokenizerConfig);
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    return this.hf.encode(text, { add_special_tokens: options.addSpecialTokens ?? true }).ids;
  }

  decode(ids: ArrayLike<number>, options: DecodeOptions = {}): string {
    if (ids.length === 0) return '';
    // Tokenization-space cleanup would make decode(encode(x)) != x, so it is always off.
    return this.hf.decode(Array.from(ids), {
      skip_special_tokens: options.skipSpecialTokens ?? true,
      clean_up_tokenization_spaces: false,
    });
  }

  /** Id of a token string (special or not), if the vocabulary has it. */
  tokenId(token: string): number | undefined {
    return this.hf.token_to_id(token);
  }

  tokenString(id: number): string | undefined {
    return this.hf.id_to_token(id);
  }

  isSpecial(id: number): boolean {
    return this.specialMask[id] === 1;
  }
}

/** Load tokenizer.json (required) and tokenizer_config.json (optional) from a model directory. */
export async function loadTokenizer(modelDir: string): Promise<HfTokenizer> {
  const tokenizerJson = await readJsonFile(join(modelDir, 'tokenizer.json'), true);
  const tokenizerConfig = (await readJsonFile(join(modelDir, 'tokenizer_config.json'), false)) ?? {};
  return HfTokenizer.fromJson(tokenizerJson, tokenizerConfig);
}

export async function readJsonFile(path: string, required: boolean): Promise<Record<string, unknown> | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (cause) {
    if (!required && (cause as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new TokenizerLoadError(`cannot read ${path}: ${(cause as Error).message}`, { cause });
  }
  try {
    const value: unknown = JSON.parse(text);
    if (!isObject(value)) throw new Error('not a JSON object');
    return value;
  } catch (cause) {
    throw new TokenizerLoadError(`${path} is not a valid JSON object`, { cause });
  }
}

/** tokenizer_config stores special tokens as strings or as {content: ...} AddedToken dicts. */
export function specialTokenString(raw: unknown): string | undefined {
  if (typeof raw === 'string') return raw;
  if (isObject(raw) && typeof raw.content === 'string') return raw.content;
  return undefined;
}

function decoderIsByteLevel(decoder: unknown): boolean {
  if (!isObject(decoder)) return false;
  if (decoder.type === 'ByteLevel') return true;
  if (decoder.type === 'Sequence' && Array.isArray(decoder.decoders)) {
    return decoder.decoders.length > 0 && decoder.decoders.every((d) => isObject(d) && d.type === 'ByteLevel');
  }
  return false;
}

/**
 * Byte table for a byte-level BPE tokenizer: model tokens map through the byte-level alphabet,
 * added tokens are their literal UTF-8 (as the library's ByteLevel decoder emits them).
 * Undefined when the decoder is anything else or a token falls outside the alphabet.
 */
function buildByteTable(
  tokenizerJson: Record<string, unknown>,
  vocab: Map<string, number>,
  added: Map<number, string>,
  vocabSize: number,
): TokenBytesTable | undefined {
  const model = tokenizerJson.model as Record<string, unknown>;
  if (model.type !== 'BPE' || !decoderIsByteLevel(tokenizerJson.decoder)) return undefined;
  const perId: Array<Uint8Array | undefined> = new Array(vocabSize);
  const encoder = new TextEncoder();
  for (const [token, id] of vocab) {
    if (added.has(id)) continue;
    const bytes = byteLevelToBytes(token);
    if (bytes === undefined) return undefined;
    perId[id] = Uint8Array.from(bytes);
  }
  for (const [id, content] of added) perId[id] = encoder.encode(content);
  let total = 0;
  for (const b of perId) total += b?.length ?? 0;
  const bytes = new Uint8Array(total);
  const offsets = new Uint32Array(vocabSize + 1);
  let pos = 0;
  for (let id = 0; id < vocabSize; id++) {
    offsets[id] = pos;
    const b = perId[id];
    if (b) {
      bytes.set(b, pos);
      pos += b.length;
    }
  }
  offsets[vocabSize] = pos;
  return { bytes, offsets };
}
