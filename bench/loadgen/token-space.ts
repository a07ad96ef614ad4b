/**
 * Where prompt tokens come from. A workload asks for N token ids; the request encoder turns
 * them into a token-id prompt or into text. With the served model's tokenizer the text
 * re-encodes to exactly those ids: we draw only from a pool of "word" tokens (a leading
 * space or word-boundary marker plus letters) that survive a decode/encode round trip alone
 * and next to each other, so pre-tokenization splits a rendered prompt back at the same
 * boundaries. Without a tokenizer a built-in list of common English words stands in, one
 * word per token; counts are then approximate and the report says so.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { ConfigError } from '../../runtime/errors.js';
import { Rng } from './rng.js';

export interface TokenSpace {
  readonly kind: 'tokenizer' | 'builtin';
  /** True when `render(ids)` encodes back to exactly `ids` with the served tokenizer. */
  readonly exact: boolean;
  /** Special tokens (BOS...) the tokenizer adds when it encodes a text prompt. */
  readonly specialTokens: number;
  /** Number of distinct tokens prompts are drawn from. */
  readonly poolSize: number;
  /** `n` random pool token ids. */
  sample(n: number, rng: Rng): number[];
  /** Text for a run of token ids drawn from this space. */
  render(ids: readonly number[]): string;
}

/** Pool tokens are plain words so that concatenation never merges across a boundary. */
const WORD_PIECE = /^ ?[A-Za-z]{2,16}$/;
const MAX_POOL = 4096;

export class TokenizerTokenSpace implements TokenSpace {
  readonly kind = 'tokenizer';
  readonly exact = true;
  readonly specialTokens: number;
  private pool: Int32Array;

  constructor(
    private readonly tokenizer: Tokenizer,
    readonly source: string,
  ) {
    this.pool = buildPool(tokenizer);
    if (this.pool.length < 16) {
      throw new ConfigError(`tokenizer ${source}: only ${this.pool.length} plain word tokens; cannot build exact prompts`);
    }
    const withSpecial = tokenizer.encode(' hello').ids.length;
    const without = tokenizer.encode(' hello', { add_special_tokens: false }).ids.length;
    this.specialTokens = Math.max(0, withSpecial - without);
    this.selfCheck();
  }

  get poolSize(): number {
    return this.pool.length;
  }

  sample(n: number, rng: Rng): number[] {
    const out = new Array<number>(n);
    for (let i = 0; i < n; i++) out[i] = this.pool[rng.int(0, this.pool.length)] as number;
    return out;
  }

  render(ids: readonly number[]): string {
    return this.tokenizer.decode(ids as number[], { skip_special_tokens: true });
  }

  /** Count tokens of `text` as the server would (special tokens included). */
  count(text: string): number {
    return this.tokenizer.encode(text).ids.length;
  }

  /**
   * Long random prompts must round-trip. The pool filter is a strong heuristic, not a proof, so
   * tokens seen at a mismatch are dropped and the check repeats; a tokenizer that still fails
   * is refused rather than silently producing wrong lengths.
   */
  private selfCheck(): void {
    const rng = new Rng(0x5eed, 7);
    for (let round = 0; round < 8; round++) {
      const ids = this.sample(512, rng);
      const back = this.tokenizer.encode(this.render(ids), { add_special_tokens: false }).ids as number[];
      const at = firstMismatch(ids, back);
      if (at < 0) return;
      const bad = new Set([ids[at], ids[at - 1], ids[at + 1]].filter((id): id is number => id !== undefined));
      this.pool = this.pool.filter((id) => !bad.has(id));
      if (this.pool.length < 16) break;
    }
    throw new ConfigError(`tokenizer ${this.source}: rendered prompts do not re-encode to the same tokens; use --prompt-format ids`);
  }
}

function firstMismatch(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

function buildPool(tokenizer: Tokenizer): Int32Array {
  const added = tokenizer.get_added_tokens_decoder();
  const ids = [...tokenizer.get_vocab(false).values()].sort((a, b) => a - b);
  const pool: number[] = [];
  for (const id of ids) {
    if (pool.length >= MAX_POOL) break;
    if (added.has(id)) continue;
    const piece = tokenizer.decode([id]);
    if (!WORD_PIECE.test(piece)) continue;
    // A word start: two copies decode with a space between them (" the the", or "the the" for
    // Metaspace), so no neighbour can merge into it. Rules out suffixes like "he" or "ing".
    const twice = tokenizer.decode([id, id]);
    if (twice !== `${piece} ${piece.trimStart()}`) continue;
    if (!sameIds(tokenizer.encode(piece, { add_special_tokens: false }).ids, [id])) continue;
    if (!sameIds(tokenizer.encode(twice, { add_special_tokens: false }).ids, [id, id])) continue;
    pool.push(id);
  }
  return Int32Array.from(pool);
}

function sameIds(a: ArrayLike<number>, b: ArrayLike<number>): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Common English words, each a single token in the usual BPE vocabularies. */
const WORDS = (
  'the of and to in is was for that on with as by at from his he it an are were which be this ' +
  'had not or have but one their they all has new been more its also after first who two would ' +
  'other when there time some into she only her over years can most may many later about up than ' +
  'world such made these then out year them three most during him under both well between used ' +
  'state city where while before being through known part second since national called how age ' +
  'high found family people work life game season number school area team played around against ' +
  'line several film war each government same long name early south north until early music day ' +
  'group best including group public following well each place former series end four back use ' +
  'river house history because member became three general village among could own set major ' +
  'small system order side left point case great did based five company became university water'
)
  .split(/\s+/)
  .filter((w, i, all) => all.indexOf(w) === i);

/** Token ids in the built-in space start here, past the usual low special-token ids. */
export const BUILTIN_ID_BASE = 10;

export class BuiltinTokenSpace implements TokenSpace {
  readonly kind = 'builtin';
  readonly exact = false;
  readonly specialTokens = 0;
  readonly poolSize = WORDS.length;

  sample(n: number, rng: Rng): number[] {
    const out = new Array<number>(n);
    for (let i = 0; i < n; i++) out[i] = BUILTIN_ID_BASE + rng.int(0, WORDS.length);
    return out;
  }

  render(ids: readonly number[]): string {
    let text = '';
    for (const id of ids) text += ' ' + (WORDS[id - BUILTIN_ID_BASE] ?? 'the');
    return text;
  }
}

/** Load `tokenizer.json` (and `tokenizer_config.json` when present) from a model directory. */
export function loadTokenSpace(dir: string): TokenizerTokenSpace {
  const file = join(dir, 'tokenizer.json');
  if (!existsSync(file)) throw new ConfigError(`--tokenizer ${dir}: no tokenizer.json there`);
  const configFile = join(dir, 'tokenizer_config.json');
  let tokenizerJson: object;
  let configJson: object = {};
  try {
    tokenizerJson = JSON.parse(readFileSync(file, 'utf8')) as object;
    if (existsSync(configFile)) configJson = JSON.parse(readFileSync(configFile, 'utf8')) as object;
  } catch (err) {
    throw new ConfigError(`--tokenizer ${dir}: cannot parse tokenizer files: ${(err as Error).message}`);
  }
  return new TokenizerTokenSpace(new Tokenizer(tokenizerJson, configJson), dir);
}
