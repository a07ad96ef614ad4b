/**
 * Builds the workload a resolved option set asks for. Request counts: an explicit
 * --requests wins; otherwise a --duration run is unbounded and bounded only by time; otherwise
 * each workload's natural size (1000 random requests, groups x prompts, the whole trace).
 */
import { readMooncakeTrace } from '../../../planner/index.js';
import { WORKLOAD_DEFAULTS, type ResolvedBenchOptions } from '../options.js';
import type { TokenSpace } from '../token-space.js';
import { BatchedWorkload } from './batched.js';
import { MultiTurnWorkload } from './multi-turn.js';
import { RandomWorkload } from './random.js';
import { SharedPrefixWorkload } from './shared-prefix.js';
import { TraceWorkload } from './trace.js';
import type { Workload } from './workload.js';

export function createWorkload(o: ResolvedBenchOptions, tokens: TokenSpace, seed = o.seed): Workload {
  // Embeddings: --requests counts HTTP requests, each a batch of --batch-size prompts.
  if (o.endpoint === 'embeddings') {
    const unbounded = o.durationS !== undefined && o.requests === undefined;
    const requests = unbounded ? undefined : (o.requests ?? WORKLOAD_DEFAULTS.random.requests) * o.batchSize;
    return new BatchedWorkload(new RandomWorkload({ requests, islMean: o.isl, islStd: o.islStd, oslMean: 1, oslStd: 0, seed }, tokens), o.batchSize);
  }
  const unbounded = o.durationS !== undefined && o.requests === undefined;
  switch (o.workload) {
    case 'random':
      return new RandomWorkload(
        { requests: o.requests ?? (unbounded ? undefined : WORKLOAD_DEFAULTS.random.requests), islMean: o.isl, islStd: o.islStd, oslMean: o.osl, oslStd: o.oslStd, seed },
        tokens,
      );
    case 'shared-prefix':
      return new SharedPrefixWorkload(
        {
          groups: o.groups,
          promptsPerGroup: o.promptsPerGroup,
          systemTokens: o.systemTokens,
          questionTokens: o.questionTokens,
          outputTokens: o.osl,
          requests: o.requests ?? (unbounded ? undefined : o.groups * o.promptsPerGroup),
          seed,
        },
        tokens,
      );
    case 'multi-turn':
      return new MultiTurnWorkload(
        {
          sessions: o.sessions,
          turns: o.turns,
          islMean: o.isl,
          islStd: o.islStd,
          oslMean: o.osl,
          oslStd: o.oslStd,
          systemTokens: o.systemTokens,
          thinkTimeMs: o.thinkTimeMs,
          seed,
        },
        tokens,
      );
    case 'trace': {
      const file = o.traceFile as string;
      return new TraceWorkload(
        { file, entries: readMooncakeTrace(file), speedup: o.speedup, blockSize: o.traceBlockSize, requests: o.requests, seed },
        tokens,
      );
    }
  }
}
