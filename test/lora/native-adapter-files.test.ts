/**
 * The native engine reads an adapter's factors itself (native/src/core/lora.cc), after the
 * TypeScript checks; the files may have changed in between, so it makes its own: a FIFO put in
 * place of the weights is refused at once instead of blocking a native thread for a writer that
 * never comes, a device is refused, and a header length past the limit is refused before it is
 * copied. The CPU backend says it runs adapters (`supportsLora`, published on the card).
 */
import { execFileSync } from 'node:child_process';
import { cp, open, rm, symlink, truncate } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNativeEngine, type NativeEngine } from '../../workers/engines/native/index.js';
import { TINY_DIMS } from '../../workers/models/index.js';
import { makeTinyLora, readPeftAdapter, type LoraAdapterSpec } from '../../workers/lora/index.js';
import { tinyModel, withTempDir } from '../native/helpers.js';

describe('native adapter reader: files swapped after the TypeScript checks', () => {
  let tmp: Awaited<ReturnType<typeof withTempDir>>;
  let engine: NativeEngine;
  let spec: LoraAdapterSpec;
  let good: string;

  beforeAll(async () => {
    tmp = await withTempDir();
    const modelDir = await tinyModel(tmp.dir, 'llama', 'f32', 3);
    good = await makeTinyLora({ dims: TINY_DIMS.llama, outDir: join(tmp.dir, 'good'), rank: 4, seed: 1 });
    spec = await readPeftAdapter(good);
    engine = await createNativeEngine({ modelDir, numBlocks: 64, blockSize: 4, threads: 1 });
  });
  afterAll(async () => {
    await engine?.close();
    await tmp?.cleanup();
  });

  /** A copy of the good adapter whose weights file is replaced by `put(path)`. */
  async function swapped(name: string, put: (path: string) => Promise<void>): Promise<LoraAdapterSpec> {
    const dir = join(tmp.dir, name);
    await cp(good, dir, { recursive: true });
    const weights = join(dir, 'adapter_model.safetensors');
    await rm(weights);
    await put(weights);
    return { ...spec, dir };
  }

  it('the CPU backend runs adapters, and says so', () => {
    expect(engine.info.supportsLora).toBe(true);
  });

  it('a FIFO in place of the weights is refused without waiting for a writer', async () => {
    const fifo = await swapped('fifo', async (p) => void execFileSync('mkfifo', [p]));
    await expect(engine.loadLora(1, fifo)).rejects.toMatchObject({ code: 'config_invalid', message: expect.stringContaining('not a regular file') });
  });

  it('a symlink to /dev/zero is refused as not a regular file', async () => {
    const zero = await swapped('zero', (p) => symlink('/dev/zero', p));
    await expect(engine.loadLora(1, zero)).rejects.toMatchObject({ code: 'config_invalid', message: expect.stringContaining('not a regular file') });
  });

  it('a header length past the limit is refused before it is copied (a 300 MB sparse file)', async () => {
    const huge = await swapped('huge-header', async (p) => {
      const size = 300 * 1024 * 1024;
      const head = Buffer.alloc(8);
      head.writeBigUInt64LE(BigInt(size - 8), 0);
      const f = await open(p, 'w');
      await f.write(head, 0, 8, 0);
      await f.close();
      await truncate(p, size);
    });
    await expect(engine.loadLora(1, huge)).rejects.toMatchObject({ code: 'config_invalid', message: expect.stringContaining('over the limit') });
  });

  it('the engine still loads the good adapter afterwards', async () => {
    await expect(engine.loadLora(1, spec)).resolves.toBeUndefined();
  });
});
