/**
 * Structured output end to end: constrained (response_format json_schema) vs unconstrained
 * throughput through the frontend, mocker workers, at concurrency 64 (issue 16's bench; aim:
 * constrained ≥ 0.9× unconstrained output tokens/s).
 *
 * Run: npm run build && node --import tsx bench/structured-e2e.ts [--quick] [--workers N]
 *      [--speedup X] [--requests N] [--rounds N]
 * Prints a table and writes bench/results/structured-e2e.json.
 *
 * Each phase sends the same number of chat completions (unary) from 64 concurrent clients to
 * one fleet (bench/fleet: compiled CLI, real processes). Constrained requests end where their
 * schema ends (or closing mode ends them); each unconstrained request then ends (the mocker's
 * EOS-after-N seed) at the length its constrained twin had, under the same max_tokens, so both
 * sides produce the same tokens and the comparison is output tokens per second. Rounds
 * alternate constrained/unconstrained. The
 * schemas cycle through a few corpus shapes (objects, arrays, enums, numbers with bounds).
 * Every constrained answer is JSON.parse'd: a bench of invalid output is no bench.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { MOCKER_EOS_SEED_BASE } from '../workers/engines/mocker/index.js';
import { machineLoad, startFleet } from './fleet/index.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    workers: { type: 'string', default: '2' },
    speedup: { type: 'string', default: '20' },
    requests: { type: 'string' },
    concurrency: { type: 'string', default: '64' },
    'max-tokens': { type: 'string', default: '128' },
    rounds: { type: 'string', default: '2' },
  },
});
const QUICK = args.quick === true;
const CONCURRENCY = Number(args.concurrency);
const REQUESTS = Number(args.requests ?? (QUICK ? 256 : 1024));
const MAX_TOKENS = Number(args['max-tokens']);
const ROUNDS = Number(args.rounds);

const strict = (properties: Record<string, unknown>): Record<string, unknown> => ({ type: 'object', properties, required: Object.keys(properties), additionalProperties: false });
const SCHEMAS: Array<Record<string, unknown>> = [
  strict({ name: { type: 'string', maxLength: 24 }, age: { type: 'integer', minimum: 0, maximum: 150 } }),
  strict({ tags: { type: 'array', items: { type: 'string', enum: ['a', 'b', 'c'] }, maxItems: 4 }, score: { type: 'number', minimum: 0, maximum: 1 } }),
  strict({ status: { enum: ['ok', 'error', 'pending'] }, items: { type: 'array', items: strict({ id: { type: 'integer' }, done: { type: 'boolean' } }), maxItems: 3 } }),
  strict({ city: { type: 'string', maxLength: 16 }, temp: { type: 'integer', minimum: -50, maximum: 60 }, unit: { enum: ['C', 'F'] } }),
];

interface PhaseResult {
  phase: 'unconstrained' | 'constrained';
  requests: number;
  errors: number;
  seconds: number;
  completionTokens: number;
  tokensPerSecond: number;
  requestsPerSecond: number;
  finishReasons: Record<string, number>;
  p50LatencyMs: number;
  p99LatencyMs: number;
}

/**
 * One phase. Constrained requests record their output lengths in `lengths`; unconstrained
 * ones then run to exactly those lengths (ignore_eos, max_tokens = the paired length), so the
 * two phases generate the same tokens per request and tokens/s compares like with like.
 */
async function phase(url: string, model: string, constrained: boolean, lengths: number[]): Promise<PhaseResult> {
  let next = 0;
  let errors = 0;
  let completionTokens = 0;
  const finishReasons: Record<string, number> = {};
  const latencies: number[] = [];
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < REQUESTS) {
        const i = next++;
        const body: Record<string, unknown> = {
          model,
          messages: [{ role: 'user', content: `request ${i}: describe something` }],
          max_tokens: MAX_TOKENS,
          // Unconstrained: the mocker ends the output (EOS) after the constrained twin's length,
          // so both sides generate the same tokens under the same max_tokens (which the
          // scheduler reserves against).
          seed: constrained ? i : MOCKER_EOS_SEED_BASE + Math.max(1, (lengths[i] ?? MAX_TOKENS) - 1),
        };
        if (constrained) body.response_format = { type: 'json_schema', json_schema: { name: `s${i % SCHEMAS.length}`, schema: SCHEMAS[i % SCHEMAS.length], strict: true } };
        const t0 = performance.now();
        try {
          const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
          const json = (await res.json()) as { usage?: { completion_tokens: number }; choices?: Array<{ finish_reason: string; message: { content: string } }> };
          if (!res.ok || json.choices === undefined) {
            errors++;
            continue;
          }
          completionTokens += json.usage?.completion_tokens ?? 0;
          if (constrained) lengths[i] = json.usage?.completion_tokens ?? 0;
          const reason = json.choices[0]!.finish_reason;
          finishReasons[reason] = (finishReasons[reason] ?? 0) + 1;
          if (constrained) JSON.parse(json.choices[0]!.message.content);
        } catch {
          errors++;
        }
        latencies.push(performance.now() - t0);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  const pct = (p: number): number => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? 0;
  return {
    phase: constrained ? 'constrained' : 'unconstrained',
    requests: REQUESTS,
    errors,
    seconds,
    completionTokens,
    tokensPerSecond: completionTokens / seconds,
    requestsPerSecond: REQUESTS / seconds,
    finishReasons,
    p50LatencyMs: pct(50),
    p99LatencyMs: pct(99),
  };
}

async function main(): Promise<void> {
  const fleet = await startFleet({ workers: Number(args.workers), speedupRatio: Number(args.speedup), logLevel: 'info' });
  const results: PhaseResult[] = [];
  try {
    // Warm-up: compiles each schema once per worker (cached after) and classifies the automaton
    // positions the outputs visit (first use, once per worker), JIT-warms both paths. Untimed.
    await phaseWarm(fleet.url, fleet.model);
    await phase(fleet.url, fleet.model, true, []);
    // Alternating rounds, so drift in the shared machine's load hits both sides alike.
    for (let round = 0; round < ROUNDS; round++) {
      const lengths: number[] = [];
      results.push(await phase(fleet.url, fleet.model, true, lengths));
      results.push(await phase(fleet.url, fleet.model, false, lengths));
    }
  } finally {
    await fleet.stop();
  }
  const total = (kind: PhaseResult['phase']): { tokens: number; seconds: number } =>
    results.filter((r) => r.phase === kind).reduce((a, r) => ({ tokens: a.tokens + r.completionTokens, seconds: a.seconds + r.seconds }), { tokens: 0, seconds: 0 });
  const c = total('constrained');
  const u = total('unconstrained');
  const ratio = c.tokens / c.seconds / (u.tokens / u.seconds);
  console.log(`\nstructured e2e (mocker, ${args.workers} workers, speedup ${args.speedup}, concurrency ${CONCURRENCY}, ${REQUESTS} requests, max_tokens ${MAX_TOKENS})`);
  console.log('phase          | tokens/s | req/s  | p50 ms | p99 ms | errors | finish');
  for (const r of results) {
    console.log(
      `${r.phase.padEnd(14)} | ${r.tokensPerSecond.toFixed(0).padStart(8)} | ${r.requestsPerSecond.toFixed(1).padStart(6)} | ${r.p50LatencyMs.toFixed(0).padStart(6)} | ${r.p99LatencyMs.toFixed(0).padStart(6)} | ${String(r.errors).padStart(6)} | ${JSON.stringify(r.finishReasons)}`,
    );
  }
  console.log(`constrained / unconstrained tokens/s: ${ratio.toFixed(3)} (aim ≥ 0.9)`);
  const out = join(dirname(fileURLToPath(import.meta.url)), 'results', 'structured-e2e.json');
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(
    out,
    JSON.stringify({ bench: 'structured-e2e', date: new Date().toISOString(), machine: machineLoad(), config: { workers: Number(args.workers), speedup: Number(args.speedup), concurrency: CONCURRENCY, requests: REQUESTS, maxTokens: MAX_TOKENS, rounds: ROUNDS }, results, ratio }, null, 2) + '\n',
  );
  console.log(`wrote ${out}`);
}

async function phaseWarm(url: string, model: string): Promise<void> {
  await Promise.all(
    SCHEMAS.map((schema, i) =>
      fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: 'warm' }], max_tokens: 16, response_format: { type: 'json_schema', json_schema: { name: `s${i}`, schema, strict: true } } }),
      }).then((r) => r.arrayBuffer()),
    ),
  );
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
