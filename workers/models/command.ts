/**
 * `runtime model make-tiny`: the CLI face of makeTinyModel. The lead wires
 * `registerModelCommand(program)` into cli/main.ts; flags also read TANDEM_* via bindEnvironment.
 */
import type { Command } from 'commander';
import { intInRange, oneOf } from '../../runtime/index.js';
import { makeTinyModel } from './make-tiny.js';
import { TINY_ARCHS, type TinyArch } from './tiny-tokenizer.js';
import type { WeightDtype } from './dtype.js';
import { join } from 'node:path';
import { TINY_DIMS } from './tiny-arch.js';
import { makeTinyLora } from '../lora/make-tiny-lora.js';
import { ModelFormatError } from './errors.js';
import { FP8_FORMATS, type Fp8Format } from './fp8.js';

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
    .option('--quantize <format>', `write an FP8 checkpoint: ${FP8_FORMATS.join(' | ')} (linear layers e4m3 with scales; see docs/real-model.md)`, oneOf(FP8_FORMATS))
    .option('--lora <n>', 'also write n random PEFT LoRA adapters to <out>/loras/lora-<i> (all linear layers)', intInRange(0, 1024), 0)
    .option('--lora-rank <r>', 'rank of those adapters', intInRange(1, 1024), 8)
    .option('--rope-scaling <type>', 'replace the family\'s RoPE scaling: yarn', oneOf(['yarn'] as const))
    .action(async (opts: { arch: TinyArch; out: string; dtype: WeightDtype; seed: number; embedding?: 'last' | 'mean'; matryoshka?: boolean; quantize?: Fp8Format; lora: number; loraRank: number; ropeScaling?: 'yarn' }) => {
      if (TINY_DIMS[opts.arch].moe !== undefined && opts.lora > 0) {
        throw new ModelFormatError(`--lora: LoRA adapters on a mixture-of-experts model (${opts.arch}) are not supported`);
      }
      if (TINY_DIMS[opts.arch].moe !== undefined && opts.embedding !== undefined) {
        throw new ModelFormatError(`--embedding: a mixture-of-experts model (${opts.arch}) cannot be an embedding model here`);
      }
      const info = await makeTinyModel({
        arch: opts.arch,
        outDir: opts.out,
        dtype: opts.dtype,
        seed: opts.seed,
        ...(opts.embedding !== undefined ? { embedding: opts.embedding } : {}),
        ...(opts.matryoshka === true ? { matryoshka: true } : {}),
        ...(opts.ropeScaling !== undefined ? { ropeScaling: opts.ropeScaling } : {}),
        ...(opts.quantize !== undefined ? { quantize: opts.quantize } : {}),
      });
      process.stdout.write(
        `wrote ${info.arch} (${info.dtype}${info.quantize !== undefined ? `, ${info.quantize}` : ''}, seed ${info.seed}) to ${info.outDir}: ` +
          `${info.numParameters} parameters, vocab ${info.vocabSize}, ${info.totalBytes} bytes\n`,
      );
      for (let i = 0; i < opts.lora; i++) {
        const dir = await makeTinyLora({
          dims: TINY_DIMS[opts.arch],
          outDir: join(info.outDir, 'loras', `lora-${i}`),
          rank: opts.loraRank,
          seed: opts.seed + 1 + i,
          baseModel: info.outDir,
        });
        process.stdout.write(`wrote LoRA adapter (rank ${opts.loraRank}) to ${dir}\n`);
      }
    });
  return model;
}
