/**
 * `runtime profile` as a process (the built CLI: run `npm run build` first), against real
 * mocker workers over the request plane.
 *
 * Round trip: a mocker running a *given* profile P is profiled; the measured TTFTs and ITLs
 * must be P's within a tolerance, so a mocker fleet loaded with the output behaves like the
 * profiled engine. P is chosen far from the default polynomial model (which the mocker would
 * fall back to if it ignored the file): 60 → 200 ms prefill against 18 → 49 ms, and ITL 40 →
 * 120 ms against 6 → 34 ms.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InterpolatedPerfModel, parsePerfProfile } from '../../perf-model/index.js';
import type { ProfileReport } from '../../planner/profiler/profile-build.js';
import { parameterCounts, readModelConfig, resolveModel } from '../../workers/models/index.js';
import { spawnCli, type Spawned } from '../harness/processes.js';
import { startUp, stopAll, type Up } from '../e2e/up.js';

const dir = mkdtempSync(join(tmpdir(), 'profile-cli-'));
const given = {
  version: 1,
  prefill: { tokens: [64, 2048], ms: [60, 200] },
  decode: { kvUsage: [0, 1], batchSize: [1, 64], ms: [[40, 60], [80, 120]] },
};
const givenPath = join(dir, 'given.json');
writeFileSync(givenPath, JSON.stringify(given));
const givenModel = new InterpolatedPerfModel(parsePerfProfile(given));

async function run(args: string[]): Promise<{ code: number | null; output: string }> {
  const p = spawnCli(args);
  const { code } = await p.exited();
  return { code, output: p.output() };
}

/** Measured within 20 % + 8 ms of expected (request-plane and timer overhead on a loaded box). */
function near(measured: number, expected: number): boolean {
  return Math.abs(measured - expected) <= 0.2 * expected + 8;
}

const children: Spawned[] = [];
const ups: Up[] = [];
afterAll(async () => {
  await Promise.all(children.map((c) => c.stop()));
  await stopAll(ups);
});

describe('runtime profile', () => {
  it('round trip: profiling a mocker that runs profile P reproduces P; the output loads in the mocker and the simulator', async () => {
    const out = join(dir, 'p.json');
    const html = join(dir, 'p.html');
    const { code, output } = await run(['profile', '--engine', 'mocker', '--model', 'tiny', '--perf-profile', givenPath, '--num-gpu-blocks', '512', '--quick', '--out', out, '--html', html]);
    expect(code, output).toBe(0);
    // not a TTY: periodic plain progress lines, then the summary
    expect(output).toMatch(/profile: \[#*-*\]\s+\d+%\s+\d+\/\d+ requests/);
    expect(output).toMatch(/profile: measured in [\d.]+ s/);

    const report = JSON.parse(readFileSync(out, 'utf8')) as ProfileReport;
    parsePerfProfile(report); // schema v1
    expect(report.version).toBe(1);
    expect(report.worker).toMatchObject({ engine: 'mocker', totalKvBlocks: 512, kvBlockSize: 16, kvCapacityTokens: 8192 });
    expect(report.measured.prefill.map((p) => p.isl)).toEqual([128, 2047]);
    for (const p of report.measured.prefill) {
      expect(near(p.ttftMs, givenModel.prefillMs(p.isl)), `TTFT at ISL ${p.isl}: ${p.ttftMs} vs ${givenModel.prefillMs(p.isl)}`).toBe(true);
    }
    expect(report.measured.decode.length).toBeGreaterThanOrEqual(3);
    expect(Math.max(...report.measured.decode.map((d) => d.kvUsage))).toBeGreaterThan(0.5); // it went up to the KV capacity
    for (const d of report.measured.decode) {
      const expected = givenModel.decodeMs(d.kvUsage, d.concurrency);
      expect(near(d.itlMs, expected), `ITL at context ${d.contextLength} × ${d.concurrency} (KV ${d.kvUsage}): ${d.itlMs} vs ${expected}`).toBe(true);
    }
    const page = readFileSync(html, 'utf8');
    expect(page.match(/<svg /g)).toHaveLength(4);

    // The produced file drives a mocker (exit 0 on SIGTERM after "worker ready") and the simulator.
    const modelDir = await resolveModel('tiny');
    // What the measured times stand for: the card's parameter counts (a MoE's active share).
    expect(report.worker.parameters).toEqual(parameterCounts(await readModelConfig(modelDir)));
    const w = spawnCli(['worker', '--engine', 'mocker', '--model', modelDir, '--perf-profile', out, '--discovery', 'file', '--discovery-dir', join(dir, 'disc-load'), '--event-plane', 'direct']);
    children.push(w);
    await w.waitFor((l) => (l.includes('"worker ready"') ? l : undefined), { timeoutMs: 60_000, what: 'worker ready' });
    await w.stop();
    const sim = await run(['planner', 'simulate', '--profile', out, '--synthetic', 'diurnal', '--hours', '0.5', '--peak-rps', '5', '--no-compare']);
    expect(sim.code, sim.output).toBe(0);
    expect(sim.output).toMatch(/planner \(sla/);
  }, 240_000);

  it('--endpoint measures a running worker found through discovery', async () => {
    const modelDir = await resolveModel('tiny');
    const disc = join(dir, 'disc');
    const w = spawnCli(['worker', '--engine', 'mocker', '--model', modelDir, '--perf-profile', givenPath, '--num-gpu-blocks', '256', '--discovery', 'file', '--discovery-dir', disc, '--event-plane', 'direct']);
    children.push(w);
    await w.waitFor((l) => (l.includes('"worker ready"') ? l : undefined), { timeoutMs: 60_000, what: 'worker ready' });
    const out = join(dir, 'e.json');
    const { code, output } = await run(['profile', '--endpoint', 'tandem/backend/generate', '--discovery', 'file', '--discovery-dir', disc, '--isl', '512', '--samples', '1', '--context', '256', '--concurrency', '1,4', '--out', out]);
    expect(code, output).toBe(0);
    const report = JSON.parse(readFileSync(out, 'utf8')) as ProfileReport;
    expect(report.worker.totalKvBlocks).toBe(256);
    expect(report.measured.decode.map((d) => d.concurrency)).toEqual([1, 4]);
    // One sample: bounded below by P (the default model would give ~25 ms) and loosely above, as a
    // single request on a loaded machine can wait for the event loop.
    const ttft = report.measured.prefill[0]!.ttftMs;
    expect(ttft, `TTFT at ISL 512: ${ttft} vs ${givenModel.prefillMs(512)}`).toBeGreaterThanOrEqual(0.8 * givenModel.prefillMs(512));
    expect(ttft).toBeLessThan(3 * givenModel.prefillMs(512));
    await w.stop();
  }, 120_000);

  it('runtime up --perf-profile: the mocker workers of the fleet run the profile', async () => {
    const cacheDir = dirname(await resolveModel('tiny'));
    const up = await startUp(cacheDir, ['--engine', 'mocker', '--model', 'tiny', '--workers', '1', '--http-port', '0', '--perf-profile', givenPath]);
    ups.push(up);
    const t0 = performance.now();
    const res = await fetch(`${up.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny-llama', prompt: 'a short prompt', max_tokens: 20, ignore_eos: true }),
    });
    const body = (await res.json()) as { usage: { completion_tokens: number; prompt_tokens: number } };
    const elapsed = performance.now() - t0;
    expect(res.status).toBe(200);
    expect(body.usage.completion_tokens).toBe(20);
    // P: one prefill step (≈ 60 ms for a short prompt) + 19 decode steps of ≈ 40 ms ≈ 820 ms;
    // the default polynomial model would take ≈ 18 + 19 · 6 ≈ 130 ms.
    const expected = givenModel.prefillMs(body.usage.prompt_tokens) + 19 * givenModel.decodeMs(0, 1);
    expect(elapsed).toBeGreaterThan(0.8 * expected);
    expect(elapsed).toBeLessThan(expected + 3000);
  }, 120_000);

  const bad: [string, string[], RegExp][] = [
    ['--engine with --endpoint', ['--engine', 'mocker', '--endpoint', 'tandem/backend/generate'], /not both/],
    ['a malformed --endpoint', ['--endpoint', 'backend'], /expected namespace\/component\/endpoint/],
    ['an endpoint nothing serves', ['--endpoint', 'tandem/nobody/generate', '--discovery', 'file', '--discovery-dir', join(dir, 'empty')], /no instance serves tandem\/nobody\/generate/],
    ['an unreadable --perf-profile', ['--engine', 'mocker', '--perf-profile', '/nonexistent/p.json'], /perf profile \/nonexistent\/p\.json: cannot read/],
  ];
  for (const [name, args, re] of bad) {
    it(`${name}: one clear line, exit 2`, async () => {
      const { code, output } = await run(['profile', ...args, '--out', join(dir, 'never.json')]);
      expect(code, output).toBe(2);
      expect(output).toMatch(re);
    }, 60_000);
  }
});
