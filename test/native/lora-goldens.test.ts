/**
 * PEFT goldens: the native engine with a tiny adapter against fixtures written by
 * scripts/goldens/make_lora_goldens.py (transformers + peft, unmerged LoRA) from
 * `make-tiny --lora 1`. The fixtures are made where torch, transformers and peft exist (the GPU
 * machine: scripts/goldens/regenerate-lora.sh); until one is committed this suite is skipped,
 * saying so. The weights' and the adapter's sha256 are checked before any comparison.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Command } from 'commander';
import { createNativeEngine, type NativeEngine } from '../../workers/engines/native/index.js';
import { registerModelCommand } from '../../workers/models/index.js';
import { readPeftAdapter } from '../../workers/lora/index.js';
import { blocks, maxAbsDiff, seq, withTempDir } from './helpers.js';

interface LoraGolden {
  label: string;
  make_tiny: string;
  weights_sha256: string;
  adapter_sha256: string;
  cases: Array<{ prompt: number[]; greedy: number[]; first_logits: number[] }>;
}

const FIXTURES = join(import.meta.dirname, '../fixtures/lora-goldens');
const files = existsSync(FIXTURES) ? readdirSync(FIXTURES).filter((f) => f.endsWith('.json')).sort() : [];
const suite = files.length > 0 ? describe.each(files) : describe.skip.each(['(none)']);
if (files.length === 0) process.stderr.write('PEFT goldens SKIPPED: no test/fixtures/lora-goldens/*.json (make them with scripts/goldens/regenerate-lora.sh where peft is installed)\n');

suite('PEFT goldens %s', (file) => {
  // A skipped suite is still collected: the placeholder has no file.
  const golden = (files.length > 0 ? JSON.parse(readFileSync(join(FIXTURES, file), 'utf8')) : { make_tiny: '', cases: [] }) as LoraGolden;
  let tmp: Awaited<ReturnType<typeof withTempDir>>;
  let engine: NativeEngine;
  let dir: string;

  beforeAll(async () => {
    tmp = await withTempDir();
    dir = join(tmp.dir, 'model');
    const argv = golden.make_tiny.replace(/^runtime /, '').replace('DIR', dir).split(' ');
    const program = new Command().exitOverride();
    registerModelCommand(program);
    const write = process.stdout.write;
    process.stdout.write = (() => true) as typeof process.stdout.write;
    try {
      await program.parseAsync(argv, { from: 'user' });
    } finally {
      process.stdout.write = write;
    }
    engine = await createNativeEngine({ modelDir: dir, numBlocks: 64, blockSize: 16, threads: 2 });
    await engine.loadLora(0, await readPeftAdapter(join(dir, 'loras', 'lora-0')));
  });
  afterAll(async () => {
    await engine?.close();
    await tmp?.cleanup();
  });

  it('make-tiny rebuilds the exact model and adapter the fixture was made from', async () => {
    const sha = async (p: string) => createHash('sha256').update(await readFile(p)).digest('hex');
    expect(await sha(join(dir, 'model.safetensors'))).toBe(golden.weights_sha256);
    expect(await sha(join(dir, 'loras', 'lora-0', 'adapter_model.safetensors'))).toBe(golden.adapter_sha256);
  });

  it('every case: first-step logits within 1e-3 and the greedy tokens identical', async () => {
    for (const c of golden.cases) {
      const table = blocks(0, 64);
      const s0 = Object.assign(seq({ tokens: c.prompt, blockTable: table }), { loraSlot: 0 });
      const first = await engine.stepWithLogits({ sequences: [s0] });
      expect(maxAbsDiff(first.logits, c.first_logits)).toBeLessThan(1e-3);
      const got = [first.sampled[0]!.tokenId];
      for (let i = 1; i < c.greedy.length; i++) {
        const s = Object.assign(seq({ tokens: [got[i - 1]!], startPos: c.prompt.length + i - 1, blockTable: table }), { loraSlot: 0 });
        got.push((await engine.step({ sequences: [s] })).sampled[0]!.tokenId);
      }
      expect(got).toEqual(c.greedy);
    }
  });
});
