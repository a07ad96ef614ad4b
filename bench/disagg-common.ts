/** Shared by the disaggregation benchmarks: a tiny model that admits long prompts. */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeTinyModel } from '../workers/models/index.js';

/**
 * The tiny Llama with max_position_embeddings raised to `positions`: the mocker only needs the
 * model's shape (vocab, EOS, context), so 4k and 16k-token prompts fit.
 */
export async function longContextModel(dir: string, positions = 32768): Promise<string> {
  await makeTinyModel({ arch: 'llama', outDir: dir, dtype: 'f32', seed: 0 });
  const file = join(dir, 'config.json');
  const config = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  config.max_position_embeddings = positions;
  writeFileSync(file, JSON.stringify(config, null, 2));
  return dir;
}
