/**
 * `runtime bench --endpoint embeddings` against a real `runtime up` fleet with a mocker embedding
 * worker: batches of N inputs reach /v1/embeddings, the server counts exactly the tokens the
 * workload built, sequences/s is N × requests/s, and TTFT/ITL/TPOT are n/a (null in the JSON,
 * "n/a" in the table) rather than zeros.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { runBench } from '../../bench/loadgen/index.js';
import { REPO_ROOT } from '../../runtime/supervisor/index.js';
import { makeTinyModel } from '../../workers/models/index.js';
import { upForBlock } from '../e2e/up.js';

const run = promisify(execFile);

describe('runtime bench --endpoint embeddings against runtime up (1 generation + 1 mocker embedding worker)', () => {
  let modelDir = '';
  const served = upForBlock('tandem-bench-embed-', async (cacheDir) => {
    modelDir = join(cacheDir, 'tiny-embed');
    await makeTinyModel({ arch: 'qwen3', outDir: modelDir, dtype: 'f32', seed: 3, embedding: 'last' });
    return ['--engine', 'mocker', '--model', modelDir, '--workers', '1', '--embedding-workers', '1', '--speedup-ratio', '100', '--log-level', 'warn'];
  });
  const out = mkdtempSync(join(tmpdir(), 'tandem-bench-embed-out-'));
  afterAll(() => rmSync(out, { recursive: true, force: true }));

  it('text inputs: every batch of 4 is answered with 4 vectors and the server counts the built prompt', async () => {
    const { report } = await runBench({ url: served.url(), model: 'tiny-embed', endpoint: 'embeddings', tokenizer: modelDir, batchSize: 4, isl: 24, islStd: 6, requests: 10, concurrency: 2, seed: 5, progress: 'off', outDir: out, label: 'embed-text' });
    expect(report.requests).toHaveLength(10);
    expect(report.requests.every((r) => r.ok), JSON.stringify(report.requests.find((r) => !r.ok))).toBe(true);
    for (const r of report.requests) {
      expect(r.sequences).toBe(4);
      expect(r.isl).toBe(r.isl_requested);
      expect(r.ttft_ms).toBeNull();
      expect(r.chunks).toBe(0);
    }
    // lengths vary per input, so batch totals vary too
    expect(new Set(report.requests.map((r) => r.isl)).size).toBeGreaterThan(3);
    const s = report.summary;
    expect(s.requests.completed).toBe(10);
    expect(s.errors.total).toBe(0);
    expect(s.throughput.sequences_per_s).toBeCloseTo(4 * s.throughput.requests_per_s, 6);
    expect(s.latency_ms.e2e.count).toBe(10);
    expect(s.latency_ms.e2e.p50).toBeGreaterThan(0);
    expect(report.config.endpoint).toBe('embeddings');
    expect(report.config.batch_size).toBe(4);
    // The written JSON says null, not 0, for what embeddings do not have.
    const json = JSON.parse(readFileSync(join(out, 'embed-text.json'), 'utf8')) as { summary: { latency_ms: Record<string, { count: number; p50: number | null; p99: number | null }> } };
    for (const k of ['ttft', 'itl', 'tpot']) {
      expect(json.summary.latency_ms[k]!.count).toBe(0);
      expect(json.summary.latency_ms[k]!.p50).toBeNull();
    }
    expect(json.summary.latency_ms.e2e!.p99).toBeGreaterThan(0);
  }, 60_000);

  it('token-array inputs (--prompt-format ids): exact lengths, and a last batch smaller than the rest', async () => {
    const { report } = await runBench({ url: served.url(), model: 'tiny-embed', endpoint: 'embeddings', promptFormat: 'ids', tokenizer: modelDir, batchSize: 3, isl: 16, requests: 4, concurrency: 1, seed: 9, progress: 'off' });
    expect(report.requests.every((r) => r.ok && r.sequences === 3 && r.isl === 48 && r.isl_requested === 48)).toBe(true);
  }, 60_000);

  it('the CLI prints requests/s, sequences/s, E2E percentiles, and n/a for TTFT, ITL and TPOT', async () => {
    const { stdout } = await run(process.execPath, [join(REPO_ROOT, 'bin', 'runtime.js'), 'bench', '--url', served.url(), '--model', 'tiny-embed', '--endpoint', 'embeddings', '--batch-size', '8', '--isl', '20', '--requests', '6', '--concurrency', '2', '--tokenizer', modelDir, '--progress', 'off']);
    expect(stdout).toMatch(/6 ok \/ 0 failed/);
    expect(stdout).toMatch(/req\/s · [\d.]+ seq\/s \(batch 8\)/);
    for (const name of ['TTFT', 'ITL', 'TPOT']) expect(stdout).toMatch(new RegExp(`^${name}\\s+n/a\\s+n/a\\s+n/a\\s+n/a\\s+n/a\\s+n/a$`, 'm'));
    expect(stdout).toMatch(/^E2E\s+6\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+/m);
  }, 60_000);
});
