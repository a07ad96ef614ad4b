/**
 * An adapter directory is untrusted input: readPeftAdapter refuses what is not a regular file
 * (a symlink to /dev/zero, a FIFO, a directory) without reading it, refuses sizes from the
 * headers and the model's shapes before reading tensor bytes, bounds the bytes with
 * --max-lora-bytes, keeps loads under --lora-root, and never puts a path in a client message.
 * The real-process versions (a worker's memory, a hanging load) are in adapter-load-faults.test.ts.
 */
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TINY_DIMS } from '../../workers/models/index.js';
import { encodeSafetensors } from '../../workers/models/safetensors.js';
import { writeSparseSafetensors } from './sparse-safetensors.js';
import { LoraAdapterError, OUTSIDE_ROOT, UNREADABLE_ADAPTER, loraTensorName, makeTinyLora, readPeftAdapter } from '../../workers/lora/index.js';

const dims = TINY_DIMS.llama;
const GiB = 1024 ** 3;

async function refusal(p: Promise<unknown>): Promise<LoraAdapterError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(LoraAdapterError);
  return err as LoraAdapterError;
}

describe('adapter files are untrusted', () => {
  let root: string;
  let good: string;
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'tandem-lora-files-'));
    good = await makeTinyLora({ dims, outDir: join(root, 'good'), rank: 4, targets: ['q_proj', 'v_proj'] });
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  async function adapterWith(name: string, weights: (path: string) => Promise<void>): Promise<string> {
    const dir = join(root, name);
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'adapter_config.json'), await readFile(join(good, 'adapter_config.json')));
    await weights(join(dir, 'adapter_model.safetensors'));
    return dir;
  }

  it('a weight file symlinked to /dev/zero is refused as unreadable, not read', async () => {
    const dir = await adapterWith('zero', (p) => symlink('/dev/zero', p));
    const err = await refusal(readPeftAdapter(dir, { dims }));
    expect(err).toMatchObject({ reason: 'unreadable', message: UNREADABLE_ADAPTER, detail: expect.stringContaining('not a regular file') });
  });

  it('a FIFO (config or weights) is refused at once, with nobody writing to it', async () => {
    const fifoWeights = await adapterWith('fifo', async (p) => void execFileSync('mkfifo', [p]));
    expect(await refusal(readPeftAdapter(fifoWeights, { dims }))).toMatchObject({ reason: 'unreadable', message: UNREADABLE_ADAPTER });
    const fifoConfig = join(root, 'fifo-config');
    await mkdir(fifoConfig);
    execFileSync('mkfifo', [join(fifoConfig, 'adapter_config.json')]);
    expect(await refusal(readPeftAdapter(fifoConfig, { dims }))).toMatchObject({ reason: 'unreadable', message: UNREADABLE_ADAPTER });
  });

  it('missing, not a directory, a directory where a file should be: one sentence for all', async () => {
    const notDir = join(root, 'plain-file');
    await writeFile(notDir, 'x');
    const dirAsConfig = join(root, 'dir-config');
    await mkdir(join(dirAsConfig, 'adapter_config.json'), { recursive: true });
    const answers = await Promise.all([join(root, 'missing'), join(notDir, 'sub'), dirAsConfig].map((d) => refusal(readPeftAdapter(d))));
    expect(new Set(answers.map((e) => e.message))).toEqual(new Set([UNREADABLE_ADAPTER]));
    expect(answers.map((e) => e.detail)).toEqual([expect.stringContaining('ENOENT'), expect.stringContaining('ENOTDIR'), expect.stringContaining('not a regular file')]);
  });

  it('a 1 GiB sparse file with a small header is refused from its header (the data section does not match)', async () => {
    const dir = await adapterWith('sparse', (p) => writeSparseSafetensors(p, { [loraTensorName(0, 'q_proj', 'A')]: [4, 64] }, GiB));
    const err = await refusal(readPeftAdapter(dir, { dims }));
    expect(err).toMatchObject({ reason: 'invalid_weights', message: expect.stringContaining('data section') });
  });

  it('a header whose tensors fill a 1 GiB file is refused from the shapes the rank and the model imply', async () => {
    const r = 4;
    const a = loraTensorName(0, 'q_proj', 'A');
    const b = loraTensorName(0, 'q_proj', 'B');
    // A [4, 2^26 - 16] + B [64, 4] fills ~1 GiB: a consistent header, shapes no model of these dims has.
    const dir = await adapterWith('huge-shape', (p) => writeSparseSafetensors(p, { [a]: [r, (1 << 26) - 64], [b]: [64, r] }));
    expect(await refusal(readPeftAdapter(dir, { dims }))).toMatchObject({ reason: 'invalid_weights', message: expect.stringContaining(`expected [${r},${dims.hiddenSize}] (from r = ${r} and the base model)`) });
    // Without the model's shapes, --max-lora-bytes bounds it.
    expect(await refusal(readPeftAdapter(dir, { maxBytes: 64 << 20 }))).toMatchObject({ reason: 'too_large', message: "the adapter's weight files are over 67108864 bytes (--max-lora-bytes)" });
  });

  it('--max-lora-bytes counts every weight file; a header naming a rank other than r is refused', async () => {
    const bytes = (await readFile(join(good, 'adapter_model.safetensors'))).length;
    await expect(readPeftAdapter(good, { dims, maxBytes: bytes })).resolves.toMatchObject({ weightBytes: bytes });
    expect(await refusal(readPeftAdapter(good, { dims, maxBytes: bytes - 1 }))).toMatchObject({ reason: 'too_large' });
    const dir = await adapterWith('rank8', async (p) => {
      const t = (name: string, shape: number[]) => ({ name, dtype: 'F32' as const, shape, data: new Uint8Array(shape[0]! * shape[1]! * 4) });
      await writeFile(p, encodeSafetensors([t(loraTensorName(0, 'q_proj', 'A'), [8, 64]), t(loraTensorName(0, 'q_proj', 'B'), [64, 8])]));
    });
    expect(await refusal(readPeftAdapter(dir))).toMatchObject({ reason: 'invalid_weights', message: expect.stringContaining('expected [4,64] (from r = 4)') });
  });

  it('--lora-root: a path outside is refused from its string; a symlink out of the root is refused as unreadable', async () => {
    const allowed = join(root, 'allowed');
    await mkdir(allowed);
    const inside = await makeTinyLora({ dims, outDir: join(allowed, 'a'), rank: 4 });
    await expect(readPeftAdapter(inside, { dims, roots: [allowed] })).resolves.toMatchObject({ rank: 4 });
    expect(await refusal(readPeftAdapter(good, { dims, roots: [allowed] }))).toMatchObject({ reason: 'outside_root', message: OUTSIDE_ROOT });
    expect(await refusal(readPeftAdapter(join(allowed, '..', 'good'), { dims, roots: [allowed] }))).toMatchObject({ reason: 'outside_root' });
    await symlink(good, join(allowed, 'escape'));
    expect(await refusal(readPeftAdapter(join(allowed, 'escape'), { dims, roots: [allowed] }))).toMatchObject({ reason: 'unreadable', message: UNREADABLE_ADAPTER });
    // A weight file inside the root that links out of it.
    const linked = join(allowed, 'linked');
    await mkdir(linked);
    await writeFile(join(linked, 'adapter_config.json'), await readFile(join(good, 'adapter_config.json')));
    await symlink(join(good, 'adapter_model.safetensors'), join(linked, 'adapter_model.safetensors'));
    expect(await refusal(readPeftAdapter(linked, { dims, roots: [allowed] }))).toMatchObject({ reason: 'unreadable' });
    await expect(readPeftAdapter(linked, { dims })).resolves.toMatchObject({ rank: 4 });
  });
});
