/**
 * mergeLoraIntoModel: a model directory with an adapter folded into its weights
 * (W' = W + scale·B·A, in f32). The reference the engine's unmerged, batched LoRA path is
 * tested against; small models only (everything is held in memory).
 */
import { copyFile, mkdir, readdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { encodeSafetensors, SafetensorsFile, type TensorData } from '../models/safetensors.js';
import { encodeWeights } from '../models/dtype.js';
import { loraTensorName } from './lora-dims.js';
import { readPeftAdapter } from './peft-adapter.js';

export async function mergeLoraIntoModel(modelDir: string, adapterDir: string, outDir: string): Promise<void> {
  const spec = await readPeftAdapter(adapterDir, { maxLoraRank: 1 << 16 });
  const adapter = await SafetensorsFile.read(join(spec.dir, 'adapter_model.safetensors'));
  const out = resolve(outDir);
  await mkdir(out, { recursive: true });
  const tensors: TensorData[] = [];
  for (const f of (await readdir(modelDir)).sort()) {
    if (!f.endsWith('.safetensors')) {
      await copyFile(join(modelDir, f), join(out, f));
      continue;
    }
    const model = await SafetensorsFile.read(join(modelDir, f));
    for (const name of model.names) {
      const w = model.float32(name);
      const m = /^model\.layers\.(\d+)\.(?:self_attn|mlp)\.([a-z_]+)\.weight$/.exec(name);
      const target = m?.[2] as (typeof spec.targets)[number] | undefined;
      if (m !== null && target !== undefined && spec.targets.includes(target)) {
        const a = adapter.float32(loraTensorName(Number(m[1]), target, 'A'));
        const b = adapter.float32(loraTensorName(Number(m[1]), target, 'B'));
        const [outF, inF] = model.info(name).shape as [number, number];
        const r = spec.rank;
        for (let i = 0; i < outF; i++) {
          for (let j = 0; j < inF; j++) {
            let s = 0;
            for (let k = 0; k < r; k++) s += b[i * r + k]! * a[k * inF + j]!;
            w[i * inF + j] = w[i * inF + j]! + spec.scale * s;
          }
        }
      }
      tensors.push({ name, dtype: 'F32', shape: model.info(name).shape, data: encodeWeights(w, 'f32') });
    }
  }
  await writeFile(join(out, 'model.safetensors'), encodeSafetensors(tensors, { format: 'pt' }));
}
