/**
 * Small builders shared by the worker tests: sequences, requests, and a synchronous driver
 * that runs a Scheduler with the mocker's token function (no timers), so scheduler tests are
 * exact and fast.
 */
import type { StepResult } from '../../workers/engines/engine.js';
import { mockTokenAt } from '../../workers/engines/mocker/tokens.js';
import type { Scheduler } from '../../workers/scheduler/scheduler.js';
import type { SchedulePlan, StepOutcome } from '../../workers/scheduler/types.js';
import { Sequence } from '../../workers/sequence.js';
import type { PreprocessedRequest, StopOptions } from '../../proto/wire.js';

export const VOCAB = 1000;

export function range(from: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => from + i);
}

export function stopOpts(maxTokens: number, extra: Partial<StopOptions> = {}): StopOptions {
  return { maxTokens, stopTokenIds: [], ignoreEos: false, ...extra };
}

let nextSeqId = 1000;
export function seq(prompt: number[], maxTokens = 4): Sequence {
  return new Sequence({
    seqId: nextSeqId++,
    requestId: `r${nextSeqId}`,
    promptTokenIds: prompt,
    sampling: {},
    stop: stopOpts(maxTokens),
    requestSeed: 7,
  });
}

export function addSeq(s: Scheduler, prompt: number[], maxTokens: number, requestSeed = 1, extra: Partial<StopOptions> = {}): number {
  const r = s.addSequence({
    requestId: `req-${requestSeed}`,
    promptTokenIds: prompt,
    sampling: {},
    stop: stopOpts(maxTokens, extra),
    requestSeed,
  });
  if (r.type !== 'added') throw new Error(`rejected: ${r.message}`);
  return r.seqId;
}

/** The mocker's token for a plan entry, computed without the engine's timing. */
export function mockResult(plan: SchedulePlan): StepResult {
  return {
    sampled: plan.batch.sequences
      .filter((q) => q.sample)
      .map((q) => ({ seqId: q.seqId, tokenId: mockTokenAt(0, q.requestSeed, q.startPos + q.tokenIds.length, VOCAB, []) })),
  };
}

export interface DriveLog {
  outputs: Map<number, number[]>;
  finished: Map<number, StepOutcome['finished'][number]>;
  plans: SchedulePlan[];
}

/** Steps the scheduler until it has no work (or maxSteps), collecting outputs per sequence. */
export function drive(s: Scheduler, maxSteps = 10_000): DriveLog {
  const log: DriveLog = { outputs: new Map(), finished: new Map(), plans: [] };
  for (let i = 0; i < maxSteps && s.hasWork; i++) {
    const plan = s.schedule();
    log.plans.push(plan);
    const out = s.applyStepResult(mockResult(plan));
    for (const o of out.outputs) {
      const list = log.outputs.get(o.seqId) ?? [];
      list.push(o.tokenId);
      log.outputs.set(o.seqId, list);
    }
    for (const f of out.finished) log.finished.set(f.seqId, f);
  }
  return log;
}

export function request(id: string, tokenIds: number[], maxTokens: number, extra: Partial<PreprocessedRequest> = {}): PreprocessedRequest {
  return { requestId: id, model: 'mock', tokenIds, sampling: {}, stop: stopOpts(maxTokens), ...extra };
}
