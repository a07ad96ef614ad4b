/**
 * The Engine contract (test/workers/engine.contract.ts) run by the native CPU engine on a tiny
 * random Llama made here (f32, so greedy ties are as unlikely as in the goldens).
 */
import { afterAll, beforeAll } from 'vitest';
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
