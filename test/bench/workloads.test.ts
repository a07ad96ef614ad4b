/**
 * Workload shapes with a real (tiny, generated) byte-level BPE tokenizer: counts, length
 * distributions, exact token round trips, shared prefixes, growing conversations, and trace
 * hash blocks. The scripted server counts prompt tokens with the same tokenizer, as the
 * frontend would, so "exact" is checked on the wire.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveBenchOptions, runBench, type BenchOptions } from '../../bench/loadgen/index.js';
import { Rng } from '../../bench/loadgen/rng.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { makeSyntheticTrace } from '../../bench/loadgen/mooncake-trace.js';
import { encodeTurn } from '../../bench/loadgen/request-encoder.js';
import { loadTokenSpace, TokenizerTokenSpace } from '../../bench/loadgen/token-space.js';
import { createWorkload } from '../../bench/loadgen/workloads/factory.js';
import { TraceWorkload } from '../../bench/loadgen/workloads/trace.js';
import type { SessionSpec, Workload } from '../../bench/loadgen/workloads/workload.js';
import { writeTinyTokenizer } from './fixtures/tiny-tokenizer.js';
import { startScriptedServer, type RequestBody, type ScriptedServer } from './fixtures/scripted-server.js';

let dir: string;
let tokens: TokenizerTokenSpace;
let server: ScriptedServer;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'bench-wl-'));
  tokens = loadTokenSpace(writeTinyTokenizer(join(dir, 'tok')));
  server = await startScriptedServer({
    ttftMs: 1,
    itlMs: 0,
    countPrompt: (b: RequestBody) =>
      Array.isArray(b.prompt) ? b.prompt.length : typeof b.prompt === 'string' ? tokens.count(b.prompt) : tokens.count((b.messages ?? []).map((m) => m.content).join('')),
  });
});
afterAll(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

function drain(w: Workload): SessionSpec[] {
  const out: SessionSpec[] = [];
  for (let s = w.nextSession(); s; s = w.nextSession()) out.push(s);
  return out;
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const std = (xs: number[]) => Math.sqrt(mean(xs.map((x) => (x - mean(xs)) ** 2)));

describe('token space', () => {
  it('rendered prompts re-encode to exactly the sampled ids', () => {
    expect(tokens.specialTokens).toBe(1); // the fixture's TemplateProcessing adds BOS
    expect(tokens.poolSize).toBeGreaterThan(200);
    const ids = tokens.sample(300, new Rng(9));
    expect(tokens.count(tokens.render(ids))).toBe(301);
    expect(tokens.render(ids).split(' ').length).toBe(301); // leading space, one word per token
  });
});

describe("the project's tiny models (makeTinyModel)", () => {
  it.each(['llama', 'qwen2'] as const)('%s: rendered prompts have exactly the requested token count', async (arch) => {
    const modelDir = join(dir, `tiny-${arch}`);
    await makeTinyModel({ arch, outDir: modelDir });
    const space = loadTokenSpace(modelDir);
    expect(space.specialTokens).toBe(arch === 'llama' ? 1 : 0);
    expect(space.poolSize).toBeGreaterThanOrEqual(32);
    for (const seed of [1, 2, 3]) {
      const ids = space.sample(1000, new Rng(seed));
      expect(space.count(space.render(ids))).toBe(1000 + space.specialTokens);
    }
  });
});

describe('workload shapes', () => {
  it('random: request count and ISL/OSL mean and spread', () => {
    const o = resolveBenchOptions({ url: 'http://x', model: 'm', workload: 'random', requests: 400, isl: 200, islStd: 40, osl: 50, oslStd: 10, seed: 1 });
    const sessions = drain(createWorkload(o, tokens));
    expect(sessions).toHaveLength(400);
    const turns = sessions.map((s) => s.turn(0, []));
    const isl = turns.map((t) => t.inputTokens);
    const osl = turns.map((t) => t.outputTokens);
    expect(turns.every((t) => t.messages[0]!.ids!.length === t.inputTokens)).toBe(true);
    expect(mean(isl)).toBeGreaterThan(200 - 6);
    expect(mean(isl)).toBeLessThan(200 + 6);
    expect(std(isl)).toBeGreaterThan(40 * 0.85);
    expect(std(isl)).toBeLessThan(40 * 1.15);
    expect(mean(osl)).toBeGreaterThan(50 - 2);
    expect(mean(osl)).toBeLessThan(50 + 2);
    // Same seed, same prompts.
    const again = drain(createWorkload(o, tokens)).map((s) => s.turn(0, []).messages[0]!.ids);
    expect(again).toEqual(turns.map((t) => t.messages[0]!.ids));
  });

  it('shared-prefix: groups x prompts, each group sharing one exact system prompt', () => {
    const o = resolveBenchOptions({ url: 'http://x', model: 'm', workload: 'shared-prefix', groups: 4, promptsPerGroup: 5, systemTokens: 64, questionTokens: 8, seed: 2 });
    expect(o.osl).toBe(256);
    const turns = drain(createWorkload(o, tokens)).map((s) => s.turn(0, []));
    expect(turns).toHaveLength(20);
    const bySystem = new Map<string, number>();
    for (const t of turns) {
      expect(t.messages[0]!.ids).toHaveLength(64);
      expect(t.messages[1]!.ids).toHaveLength(8);
      const key = t.messages[0]!.ids!.join(',');
      bySystem.set(key, (bySystem.get(key) ?? 0) + 1);
    }
    expect([...bySystem.values()]).toEqual([5, 5, 5, 5]);
    // Shuffled across groups: the first five requests are not all one group.
    expect(new Set(turns.slice(0, 5).map((t) => t.messages[0]!.ids!.join(','))).size).toBeGreaterThan(1);
    // As text completions the shared part is a shared string prefix.
    const enc = turns.map((t) => JSON.parse(encodeTurn(t, 4, { model: 'm', endpoint: 'completions', promptFormat: 'text', temperature: undefined, ignoreEos: true, extraBody: undefined }, tokens).body).prompt as string);
    const sameGroup = turns.map((t, i) => [t, i] as const).filter(([t]) => t.messages[0]!.ids!.join(',') === turns[0]!.messages[0]!.ids!.join(','));
    const sysText = tokens.render(turns[0]!.messages[0]!.ids!);
    for (const [, i] of sameGroup) expect(enc[i]!.startsWith(sysText)).toBe(true);
  });

  it('multi-turn: each turn carries the whole history plus a new user message', () => {
    const o = resolveBenchOptions({ url: 'http://x', model: 'm', workload: 'multi-turn', sessions: 3, turns: 3, isl: 10, osl: 5, thinkTimeMs: 10 });
    expect(o.endpoint).toBe('chat');
    const sessions = drain(createWorkload(o, tokens));
    expect(sessions).toHaveLength(3);
    const s = sessions[0]!;
    const t2 = s.turn(2, ['first answer', 'second answer']);
    expect(t2.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant', 'user']);
    expect(t2.messages[1]!.text).toBe('first answer');
    expect(t2.messages[0]!.ids).toEqual(s.turn(0, []).messages[0]!.ids);
    expect(t2.inputTokens).toBe(3 * 10 + 2 * 5);
  });

  it('trace: equal hash ids give equal token blocks; lengths follow the trace', () => {
    const entries = [
      { timestamp: 0, input_length: 20, output_length: 3, hash_ids: [1, 2, 3] },
      { timestamp: 10, input_length: 18, output_length: 4, hash_ids: [1, 2, 9] },
      { timestamp: 20, input_length: 30, output_length: 5, hash_ids: [7] },
    ];
    const w = new TraceWorkload({ file: 't', entries, speedup: 2, blockSize: 8, requests: undefined, seed: 0 }, tokens);
    const sessions = drain(w);
    const ids = sessions.map((s) => s.turn(0, []).messages[0]!.ids!);
    expect(ids.map((x) => x.length)).toEqual([20, 18, 30]);
    expect(ids[1]!.slice(0, 16)).toEqual(ids[0]!.slice(0, 16));
    expect(ids[1]!.slice(16)).not.toEqual(ids[0]!.slice(16, 18));
    expect(ids[2]!.slice(0, 8)).not.toEqual(ids[0]!.slice(0, 8));
    expect(sessions.map((s) => s.arrivalMs)).toEqual([0, 5, 10]);
    expect(sessions.map((s) => s.turn(0, []).outputTokens)).toEqual([3, 4, 5]);
  });

  it('synthetic traces share prefix hash ids within a group', () => {
    const t = makeSyntheticTrace({ requests: 200, prefixGroups: 4, prefixBlocks: 2, islMean: 2048, islStd: 0, seed: 5 });
    expect(t).toHaveLength(200);
    expect(t.every((e) => e.hash_ids.length === 4 && e.input_length === 2048)).toBe(true);
    const prefixes = new Set(t.map((e) => e.hash_ids.slice(0, 2).join(',')));
    expect(prefixes.size).toBe(4);
    const tails = t.flatMap((e) => e.hash_ids.slice(2));
    expect(new Set(tails).size).toBe(tails.length);
    expect(t.every((e, i) => i === 0 || e.timestamp >= t[i - 1]!.timestamp)).toBe(true);
  });
});

describe('prompt lengths on the wire', () => {
  const run = (extra: Partial<BenchOptions>) =>
    runBench({ url: server.url, model: 'm', tokenizer: join(dir, 'tok'), progress: 'off', concurrency: 4, ...extra });

  it('text completions: the server counts exactly the requested ISL, BOS included', async () => {
    const { report } = await run({ workload: 'random', requests: 24, isl: 100, islStd: 30, osl: 3 });
    expect(report.summary.requests.completed).toBe(24);
    expect(report.summary.tokens.isl_mismatches).toBe(0);
    expect(report.requests.every((r) => r.isl === r.isl_requested)).toBe(true);
    expect(report.summary.tokens.osl.mean).toBe(3);
    expect(report.config.exact_prompts).toBe(true);
  });

  it('token-id completions send exactly ISL ids', async () => {
    const { report } = await run({ workload: 'shared-prefix', groups: 2, promptsPerGroup: 3, systemTokens: 40, questionTokens: 9, osl: 2, promptFormat: 'ids' });
    expect(report.summary.requests.completed).toBe(6);
    expect(report.requests.every((r) => r.isl === 49)).toBe(true);
    const prompts = server.received.slice(-6).map((r) => r.body.prompt as number[]);
    expect(new Set(prompts.map((p) => p.slice(0, 40).join(','))).size).toBe(2);
  });

  it('multi-turn sends answers back and grows the prompt each turn', async () => {
    const before = server.received.length;
    const { report } = await run({ workload: 'multi-turn', sessions: 2, turns: 3, isl: 12, osl: 4, thinkTimeMs: 5 });
    expect(report.summary.requests.completed).toBe(6);
    const bodies = server.received.slice(before).map((r) => r.body);
    expect(bodies.every((b) => Array.isArray(b.messages))).toBe(true);
    const lengths = bodies.map((b) => b.messages!.length).sort();
    expect(lengths).toEqual([1, 1, 3, 3, 5, 5]);
    const third = bodies.find((b) => b.messages!.length === 5)!;
    expect(third.messages![1]!.content).toBe(' tok'.repeat(4));
    const byTurn = report.requests.filter((r) => r.session === 0).map((r) => r.isl);
    expect(byTurn[1]!).toBeGreaterThan(byTurn[0]!);
    expect(byTurn[2]!).toBeGreaterThan(byTurn[1]!);
  });
});
