/**
 * The embedding side of a model directory, in sentence-transformers' layout:
 *   modules.json                    [{type: 'sentence_transformers.models.Pooling', path: '1_Pooling'}, ...]
 *   1_Pooling/config.json           {pooling_mode_lasttoken | pooling_mode_mean_tokens: true, ...}
 *   a sentence_transformers.models.Normalize module → vectors are L2-normalized
 *   config.json is_matryoshka / matryoshka_dimensions (vLLM's convention) → `dimensions` allowed
 * and `writeSentenceTransformersFiles`, which make-tiny uses to make a tiny embedding model.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { EmbeddingPooling } from '../../proto/wire.js';
import { ModelFormatError } from './errors.js';

export interface EmbeddingConfig {
  /** undefined when the directory has no Pooling module (the worker then needs --pooling). */
  pooling?: EmbeddingPooling;
  normalize: boolean;
  matryoshka: boolean;
  matryoshkaDimensions?: number[];
  /** Where pooling came from, for the start-up log. */
  source: 'sentence-transformers' | 'none';
}

const POOLING_MODULE = 'sentence_transformers.models.Pooling';
const NORMALIZE_MODULE = 'sentence_transformers.models.Normalize';

async function readJson(path: string): Promise<unknown> {
  try {
    return JSON.parse(await readFile(path, 'utf8')) as unknown;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new ModelFormatError(`${path}: ${(err as Error).message}`, { cause: err });
  }
}

export async function readEmbeddingConfig(modelDir: string): Promise<EmbeddingConfig> {
  const config = (await readJson(join(modelDir, 'config.json'))) as Record<string, unknown> | undefined;
  const dims = config?.matryoshka_dimensions;
  const matryoshkaDimensions = Array.isArray(dims) && dims.every((d) => Number.isInteger(d) && d > 0) ? (dims as number[]) : undefined;
  const matryoshka = config?.is_matryoshka === true || matryoshkaDimensions !== undefined;
  const modules = await readJson(join(modelDir, 'modules.json'));
  if (!Array.isArray(modules)) {
    // No sentence-transformers files: pooling comes from the flag; vectors normalized (OpenAI's convention).
    return { normalize: true, matryoshka, ...(matryoshkaDimensions ? { matryoshkaDimensions } : {}), source: 'none' };
  }
  const list = modules as Array<{ type?: unknown; path?: unknown }>;
  const pool = list.find((m) => m.type === POOLING_MODULE);
  let pooling: EmbeddingPooling | undefined;
  if (pool !== undefined && typeof pool.path === 'string') {
    const pc = (await readJson(join(modelDir, pool.path, 'config.json'))) as Record<string, unknown> | undefined;
    if (pc === undefined) throw new ModelFormatError(`${join(modelDir, pool.path, 'config.json')} is missing (named by modules.json)`);
    if (pc.pooling_mode_lasttoken === true) pooling = 'last';
    else if (pc.pooling_mode_mean_tokens === true) pooling = 'mean';
    else {
      const mode = Object.keys(pc).find((k) => k.startsWith('pooling_mode_') && pc[k] === true) ?? 'none';
      throw new ModelFormatError(`${pool.path}/config.json: pooling mode '${mode}' is not supported (last token or mean; --pooling overrides)`);
    }
  }
  return {
    ...(pooling ? { pooling } : {}),
    normalize: list.some((m) => m.type === NORMALIZE_MODULE),
    matryoshka,
    ...(matryoshkaDimensions ? { matryoshkaDimensions } : {}),
    source: 'sentence-transformers',
  };
}

/** sentence-transformers files for a Transformer → Pooling → Normalize model (make-tiny --embedding). */
export async function writeSentenceTransformersFiles(outDir: string, pooling: EmbeddingPooling, hiddenSize: number, maxSeqLength: number): Promise<void> {
  const modules = [
    { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' },
    { idx: 1, name: '1', path: '1_Pooling', type: POOLING_MODULE },
    { idx: 2, name: '2', path: '2_Normalize', type: NORMALIZE_MODULE },
  ];
  const poolingConfig = {
    word_embedding_dimension: hiddenSize,
    pooling_mode_cls_token: false,
    pooling_mode_mean_tokens: pooling === 'mean',
    pooling_mode_max_tokens: false,
    pooling_mode_mean_sqrt_len_tokens: false,
    pooling_mode_weightedmean_tokens: false,
    pooling_mode_lasttoken: pooling === 'last',
    include_prompt: true,
  };
  await mkdir(join(outDir, '1_Pooling'), { recursive: true });
  await mkdir(join(outDir, '2_Normalize'), { recursive: true });
  const json = (v: unknown) => `${JSON.stringify(v, null, 2)}\n`;
  await writeFile(join(outDir, 'modules.json'), json(modules));
  await writeFile(join(outDir, '1_Pooling', 'config.json'), json(poolingConfig));
  await writeFile(join(outDir, 'sentence_bert_config.json'), json({ max_seq_length: maxSeqLength, do_lower_case: false }));
  await writeFile(join(outDir, 'config_sentence_transformers.json'), json({ model_type: 'SentenceTransformer', prompts: {}, default_prompt_name: null, similarity_fn_name: 'cosine' }));
}
