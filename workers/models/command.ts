/**
 * `runtime model make-tiny`: the CLI face of makeTinyModel. The lead wires
 * `registerModelCommand(program)` into cli/main.ts; flags also read TANDEM_* via bindEnvironment.
 */
import type { Command } from 'commander';
import { intInRange, oneOf } from '../../runtime/index.js';
import { makeTinyModel } from './make-tiny.js';
import { TINY_ARCHS, type TinyArch } from './tiny-tokenizer.js';
import type { WeightDtype } from './dtype.js';

const parseSeed = intInRange(0, 0xffffffff);

export function registerModelCommand(program: Command): Command {
  const model = program.command('model').description('model directory tools');
  model
    .command('make-tiny')
    .description('write a tiny random Hugging Face model directory (config, safetensors, tokenizer)')
    .requiredOption('--arch <arch>', `architecture: ${TINY_ARCHS.join(' | ')}`, oneOf(TINY_ARCHS))
    .requiredOption('--out <dir>', 'output directory (created if missing)')
    .option('--dtype <dtype>', 'weight dtype: bf16 | f32', oneOf<WeightDtype>(['bf16', 'f32']), 'bf16')
    .option('--seed <n>', 'weight PRNG seed', parseSeed, 0)
    .option('--embedding <pooling>', 'also write sentence-transformers files (an embedding model): last | mean', oneOf(['last', 'mean'] as const))
    .option('--matryoshka', 'declare Matryoshka embeddings (config.json is_matryoshka): /v1/embeddings then accepts `dimensions`')
    .action(async (opts: { arch: TinyArch; out: string; dtype: WeightDtype; seed: number; embedding?: 'last' | 'mean'; matryoshka?: boolean }) => {
      const info = await makeTinyModel({
        arch: opts.arch,
        outDir: opts.out,
        dtype: opts.dtype,
        seed: opts.seed,
        ...(opts.embedding !== undefined ? { embedding: opts.embedding } : {}),
        ...(opts.matryoshka === true ? { matryoshka: true } : {}),
      });
      process.stdout.write(
        `wrote ${info.arch} (${info.dtype}, seed ${info.seed}) to ${info.outDir}: ` +
          `${info.numParameters} parameters, vocab ${info.vocabSize}, ${info.totalBytes} bytes\n`,
      );
    });
  return model;
}
