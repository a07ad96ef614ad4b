/**
 * The Engine contract (test/workers/engine.contract.ts) run by the native engine on a tiny
 * random Llama made here (f32, so greedy ties are as unlikely as in the goldens), on every
 * backend: the CPU; the GPU backend on the SIMT harness (its kernels and orchestration on the
 * host, in CI); and the GPU backend on CUDA where this machine has a driver and a GPU (else
 * skipped with the reason `runtime backends` gives).
 */
import { afterAll, beforeAll, describe } from 'vitest';
import { isNativeBuilt, loadAddon } from '../../native/index.js';
import { createNativeEngine } from '../../workers/engines/native/index.js';
import { engineContract } from '../workers/engine.contract.js';
import { tinyModel, withTempDir } from './helpers.js';

let tmp: Awaited<ReturnType<typeof withTempDir>>;
let modelDir = '';

beforeAll(async () => {
  tmp = await withTempDir();
  modelDir = await tinyModel(tmp.dir, 'llama', 'f32', 3);
});
afterAll(async () => {
  await tmp.cleanup();
});

engineContract('native (cpu, tiny llama)', () => ({
  open: ({ numBlocks, blockSize }) => createNativeEngine({ modelDir, numBlocks, blockSize, threads: 2 }),
}));

engineContract('native (simt: the CUDA backend on the host, tiny llama)', () => ({
  open: ({ numBlocks, blockSize }) => createNativeEngine({ modelDir, numBlocks, blockSize, threads: 2, device: 'simt', maxBatchTokens: 512, maxSeqs: 32 }),
}));

const cuda = isNativeBuilt() ? loadAddon().backendStatus().find((b) => b.name === 'cuda') : undefined;
if (cuda?.available === true) {
  engineContract(`native (cuda: ${cuda.detail ?? 'GPU'}, tiny llama)`, () => ({
    open: ({ numBlocks, blockSize }) => createNativeEngine({ modelDir, numBlocks, blockSize, device: 'cuda', maxBatchTokens: 512, maxSeqs: 32 }),
  }));
} else {
  describe.skip(`engine contract: native (cuda): ${cuda?.reason ?? 'the native addon is not built'}`, () => {});
}
