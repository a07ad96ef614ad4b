/**
 * Fallback for regenerate.sh while `runtime model make-tiny` is not wired into the CLI:
 * the same makeTinyModel call with the same flags.
 *   node --import tsx scripts/goldens/make-tiny.ts --arch llama --out DIR --dtype f32 --seed 11 [--rope-scaling yarn]
 */
import { parseArgs } from 'node:util';
import { makeTinyModel, type TinyArch } from '../../workers/models/index.js';

const { values } = parseArgs({
  options: { arch: { type: 'string' }, out: { type: 'string' }, dtype: { type: 'string', default: 'bf16' }, seed: { type: 'string', default: '0' }, 'rope-scaling': { type: 'string' } },
});
if (values.arch === undefined || values.out === undefined) throw new Error('--arch and --out are required');
await makeTinyModel({ arch: values.arch as TinyArch, outDir: values.out, dtype: values.dtype as 'bf16' | 'f32', seed: Number(values.seed), ...(values['rope-scaling'] === 'yarn' ? { ropeScaling: 'yarn' as const } : {}) });
