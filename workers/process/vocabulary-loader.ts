/**
 * The worker's Vocabulary for structured output: its model directory's tokenizer.json read
 * once at start, EOS ids from config.json / generation_config.json (ModelConfig). A model
 * directory without tokenizer.json (a bare mocker config) has none: structured requests are
 * then refused with invalid_argument by the engine loop.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Vocabulary } from '../../grammar/index.js';
import { vocabularyFromTokenizerJson } from '../../grammar/index.js';
import { ConfigError } from '../../runtime/errors.js';

export async function loadWorkerVocabulary(modelDir: string, opts: { eosTokenIds: readonly number[]; vocabSize: number }): Promise<Vocabulary | undefined> {
  let text: string;
  try {
    text = await readFile(join(modelDir, 'tokenizer.json'), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  try {
    return vocabularyFromTokenizerJson(JSON.parse(text), { eosTokenIds: opts.eosTokenIds, vocabSize: opts.vocabSize });
  } catch (err) {
    throw new ConfigError(`${join(modelDir, 'tokenizer.json')}: ${(err as Error).message}`);
  }
}
