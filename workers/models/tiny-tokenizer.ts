/**
 * Builds the tiny models' tokenizer files: a byte-level BPE tokenizer.json shaped like the
 * family's real one (Split regex + ByteLevel pre-tokenizer, ByteLevel decoder, added special
 * tokens; Llama 3's TemplateProcessing adds <|begin_of_text|>), with merges learned from
 * TINY_CORPUS, and a tokenizer_config.json with the real chat template.
 *
 * Two deliberate departures from the published files, both so that any UTF-8 text round-trips
 * exactly: no NFC normalizer (Qwen ships one) and clean_up_tokenization_spaces false (Llama 3
 * ships true, which rewrites " ." to ".").
 */
import { trainByteLevelBpe, type BpeModel } from './bpe-trainer.js';
import { LLAMA3_CHAT_TEMPLATE, QWEN2_CHAT_TEMPLATE, QWEN3_CHAT_TEMPLATE } from './chat-templates.js';
import { TINY_CORPUS } from './corpus.js';

export type TinyArch = 'llama' | 'qwen2' | 'qwen3' | 'qwen3_moe' | 'mixtral' | 'qwen2_moe';
export const TINY_ARCHS: readonly TinyArch[] = ['llama', 'qwen2', 'qwen3', 'qwen3_moe', 'mixtral', 'qwen2_moe'];

/** The dense families whose tokenizers the tiny models use. */
type TokenizerFamilyName = 'llama' | 'qwen2' | 'qwen3';
/**
 * Each architecture's tokenizer: the MoE models take their dense family's. Mixtral's published
 * tokenizer is SentencePiece (Llama 2's); the tiny one is the byte-level Llama 3 shape instead,
 * which exercises the same serving paths.
 */
const TOKENIZER_OF: Record<TinyArch, TokenizerFamilyName> = {
  llama: 'llama',
  qwen2: 'qwen2',
  qwen3: 'qwen3',
  qwen3_moe: 'qwen3',
  mixtral: 'llama',
  qwen2_moe: 'qwen2',
};

/** Total vocabulary (bytes + merges + special tokens) of every tiny tokenizer. */
export const TINY_VOCAB_SIZE = 512;

interface TokenizerFamily {
  /** Oniguruma pattern, as the family's tokenizer.json has it. */
  splitPattern: string;
  /** The same pattern in JavaScript syntax (no inline `(?i:)`), for the trainer. */
  trainPattern: RegExp;
  specialTokens: string[];
  /** tokenizer_config additional_special_tokens, as the published config lists them. */
  additionalSpecialTokens: string[];
  bosToken: string | null;
  eosToken: string;
  padToken: string | null;
  /** config.json eos_token_id: one id, or a list to exercise that form. */
  configEos: string[];
  /** generation_config.json eos_token_id. */
  generationEos: string[];
  configBos: string;
  chatTemplate: string;
  ignoreMerges: boolean;
  /** Prepend bos_token when encoding with special tokens (Llama 3's post-processor). */
  addBos: boolean;
  tokenizerClass: string;
}

const CONTRACTIONS_JS = "'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])";
const QWEN_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const LLAMA3_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const QWEN_SPECIALS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'];

const QWEN_FAMILY: Omit<TokenizerFamily, 'chatTemplate'> = {
  splitPattern: QWEN_PATTERN,
  trainPattern: new RegExp(`${CONTRACTIONS_JS}|${QWEN_PATTERN.slice(QWEN_PATTERN.indexOf(')|') + 2)}`, 'gu'),
  specialTokens: QWEN_SPECIALS,
  additionalSpecialTokens: ['<|im_start|>', '<|im_end|>'],
  bosToken: null,
  eosToken: '<|im_end|>',
  padToken: '<|endoftext|>',
  configEos: ['<|im_end|>'],
  generationEos: ['<|im_end|>', '<|endoftext|>'],
  configBos: '<|endoftext|>',
  ignoreMerges: false,
  addBos: false,
  tokenizerClass: 'Qwen2Tokenizer',
};

const FAMILIES: Record<TokenizerFamilyName, TokenizerFamily> = {
  qwen2: { ...QWEN_FAMILY, chatTemplate: QWEN2_CHAT_TEMPLATE },
  qwen3: { ...QWEN_FAMILY, chatTemplate: QWEN3_CHAT_TEMPLATE },
  llama: {
    splitPattern: LLAMA3_PATTERN,
    trainPattern: new RegExp(`${CONTRACTIONS_JS}|${LLAMA3_PATTERN.slice(LLAMA3_PATTERN.indexOf(')|') + 2)}`, 'gu'),
    specialTokens: ['<|begin_of_text|>', '<|end_of_text|>', '<|start_header_id|>', '<|end_header_id|>', '<|eot_id|>'],
    additionalSpecialTokens: [],
    bosToken: '<|begin_of_text|>',
    eosToken: '<|eot_id|>',
    padToken: null,
    configEos: ['<|end_of_text|>', '<|eot_id|>'],
    generationEos: ['<|end_of_text|>', '<|eot_id|>'],
    configBos: '<|begin_of_text|>',
    chatTemplate: LLAMA3_CHAT_TEMPLATE,
    ignoreMerges: true,
    addBos: true,
    tokenizerClass: 'PreTrainedTokenizerFast',
  },
};

export interface TinyTokenizerFiles {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
  vocabSize: number;
  /** Token ids the config files name. */
  bosTokenId: number;
  configEosTokenIds: number[];
  generationEosTokenIds: number[];
  padTokenId: number | null;
  numMerges: number;
}

const bpeCache = new Map<TokenizerFamilyName, BpeModel>();

export function buildTinyTokenizer(arch: TinyArch, modelMaxLength: number): TinyTokenizerFiles {
  const familyName = TOKENIZER_OF[arch];
  const family = FAMILIES[familyName];
  let bpe = bpeCache.get(familyName);
  if (!bpe) {
    bpe = trainByteLevelBpe(TINY_CORPUS, {
      pattern: family.trainPattern,
      vocabSize: TINY_VOCAB_SIZE - family.specialTokens.length,
    });
    bpeCache.set(familyName, bpe);
  }
  const vocab: Record<string, number> = {};
  bpe.vocab.forEach((token, id) => (vocab[token] = id));
  const specialIds = new Map<string, number>();
  family.specialTokens.forEach((token, i) => specialIds.set(token, bpe.vocab.length + i));
  const idOf = (token: string): number => specialIds.get(token)!;

  const addedTokens = family.specialTokens.map((content) => ({
    id: idOf(content),
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  }));
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false };
  const postProcessor = family.addBos
    ? {
        type: 'Sequence',
        processors: [
          { ...byteLevel },
          {
            type: 'TemplateProcessing',
            single: [{ SpecialToken: { id: family.bosToken, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
            pair: [
              { SpecialToken: { id: family.bosToken, type_id: 0 } },
              { Sequence: { id: 'A', type_id: 0 } },
              { SpecialToken: { id: family.bosToken, type_id: 1 } },
              { Sequence: { id: 'B', type_id: 1 } },
            ],
            special_tokens: {
              [family.bosToken!]: { id: family.bosToken, ids: [idOf(family.bosToken!)], tokens: [family.bosToken] },
            },
          },
        ],
      }
    : { ...byteLevel };

  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: addedTokens,
    normalizer: null,
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [
        { type: 'Split', pattern: { Regex: family.splitPattern }, behavior: 'Isolated', invert: false },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
    post_processor: postProcessor,
    decoder: { ...byteLevel },
    model: byteLevelBpeModelJson(vocab, bpe.merges, family.ignoreMerges),
  };

  const addedTokensDecoder: Record<string, unknown> = {};
  for (const t of addedTokens) {
    addedTokensDecoder[String(t.id)] = {
      content: t.content,
      lstrip: false,
      normalized: false,
      rstrip: false,
      single_word: false,
      special: true,
    };
  }
  const tokenizerConfig: Record<string, unknown> = {
    add_bos_token: family.addBos,
    add_eos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: addedTokensDecoder,
    additional_special_tokens: family.additionalSpecialTokens,
    bos_token: family.bosToken,
    chat_template: family.chatTemplate,
    clean_up_tokenization_spaces: false,
    eos_token: family.eosToken,
    errors: 'replace',
    model_input_names: ['input_ids', 'attention_mask'],
    model_max_length: modelMaxLength,
    pad_token: family.padToken,
    split_special_tokens: false,
    tokenizer_class: family.tokenizerClass,
    unk_token: null,
  };

  return {
    tokenizerJson,
    tokenizerConfig,
    vocabSize: bpe.vocab.length + family.specialTokens.length,
    bosTokenId: idOf(family.configBos),
    configEosTokenIds: family.configEos.map(idOf),
    generationEosTokenIds: family.generationEos.map(idOf),
    padTokenId: family.padToken === null ? null : idOf(family.padToken),
    numMerges: bpe.merges.length,
  };
}

/** tokenizer.json's `model` section for a byte-level BPE (no unk, no byte fallback). */
export function byteLevelBpeModelJson(vocab: Record<string, number>, merges: ReadonlyArray<readonly [string, string]>, ignoreMerges: boolean): Record<string, unknown> {
  return {
    type: 'BPE',
    dropout: null,
    unk_token: null,
    continuing_subword_prefix: null,
    end_of_word_suffix: null,
    fuse_unk: false,
    byte_fallback: false,
    ignore_merges: ignoreMerges,
    vocab,
    merges: merges.map(([a, b]) => `${a} ${b}`),
  };
}
