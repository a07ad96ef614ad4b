/**
 * `--model DIR | tiny`: a model directory as given (it must hold config.json), or the tiny Llama
 * that `tiny` names, generated once per machine into the cache dir (`TANDEM_CACHE_DIR`, else
 * ~/.cache/tandem). `runtime up` and the bench fleet both serve models through here.
 */
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { ConfigError } from '../../runtime/errors.js';
import { LLAMA3_CHAT_TEMPLATE } from './chat-templates.js';
import { makeTinyModel } from './make-tiny.js';

/** The directory `--model tiny` generates into. */
export function tinyModelDir(): string {
  return join(process.env.TANDEM_CACHE_DIR ?? join(homedir(), '.cache', 'tandem'), 'tiny-llama');
}

/** The model directory for `model`; `onGenerate` hears where the tiny model is being generated. */
export async function resolveModel(model: string, onGenerate?: (dir: string) => void): Promise<string> {
  if (model !== 'tiny') {
    const dir = resolve(model);
    if (!existsSync(join(dir, 'config.json'))) throw new ConfigError(`--model ${model}: no config.json in ${dir}`);
    return dir;
  }
  const dir = tinyModelDir();
  if (!existsSync(join(dir, 'config.json')) || !hasCurrentTemplate(dir)) {
    onGenerate?.(dir);
    await makeTinyModel({ arch: 'llama', outDir: dir, dtype: 'f32', seed: 0 });
  }
  return dir;
}

/**
 * A tiny model cached by an older build may carry an older chat template (one without tool
 * calling); the weights and tokenizer are deterministic, so regenerating is always safe.
 */
function hasCurrentTemplate(dir: string): boolean {
  try {
    const config = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')) as { chat_template?: unknown };
    return config.chat_template === LLAMA3_CHAT_TEMPLATE;
  } catch {
    return false;
  }
}
