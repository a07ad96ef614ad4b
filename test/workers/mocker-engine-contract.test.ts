/** The Engine contract (engine.contract.ts) run by the mocker: no model, deterministic tokens. */
import { MockerEngine } from '../../workers/engines/mocker/index.js';
import { engineContract } from './engine.contract.js';

engineContract('mocker', () => ({
  // Fast enough that no test waits on timers, slow enough that each step still yields.
  open: async ({ numBlocks, blockSize }) => new MockerEngine({ numBlocks, blockSize, vocabSize: 500, speedupRatio: 1e4 }),
}));
