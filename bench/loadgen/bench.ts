/**
 * `runBench`: the programmatic entry point. Resolve options, build prompts, warm up, drive
 * the measured load, aggregate, and write <label>.json and <label>.html under outDir.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { UnavailableError } from '../../runtime/errors.js';
import { renderConsoleReport } from './console-table.js';
import { LoadDriver, type DriverOptions } from './driver.js';
import { renderHtmlReport } from './html-report.js';
import { resolveBenchOptions, type BenchOptions, type ResolvedBenchOptions } from './options.js';
import { ProgressReporter } from './progress.js';
import type { RequestRecord } from './record.js';
import { buildReport, reportConfig, type BenchReport } from './report.js';
import { SseClient } from './sse-client.js';
import { BuiltinTokenSpace, loadTokenSpace, type TokenSpace } from './token-space.js';
import { createWorkload } from './workloads/factory.js';
import { RandomWorkload } from './workloads/random.js';

export interface BenchResult {
  report: BenchReport;
  /** The measured records (warm-up excluded), for callers that want raw timings. */
  records: RequestRecord[];
  files: { json?: string; html?: string };
}

export async function runBench(input: BenchOptions): Promise<BenchResult> {
  const o = resolveBenchOptions(input);
  const tokens: TokenSpace = o.tokenizer ? loadTokenSpace(o.tokenizer) : new BuiltinTokenSpace();
  const workload = createWorkload(o, tokens);
  const headers: Record<string, string> = { ...o.headers };
  if (o.apiKey) headers.authorization = `Bearer ${o.apiKey}`;
  const client = new SseClient(o.url, headers);
  const driverOptions = (overrides: Partial<DriverOptions> = {}): DriverOptions => ({
    mode: o.loadMode,
    rate: o.rate,
    concurrency: o.concurrency,
    durationMs: o.durationS !== undefined ? o.durationS * 1000 : undefined,
    maxTokens: o.maxTokens,
    timeoutMs: o.timeoutS * 1000,
    seed: o.seed,
    signal: o.signal,
    encoder: { model: o.model, endpoint: o.endpoint, promptFormat: o.promptFormat, temperature: o.temperature, ignoreEos: o.ignoreEos, extraBody: o.extraBody },
    ...overrides,
  });

  try {
    if (o.preflight) await preflight(o, client, tokens, driverOptions);
    if (o.warmup > 0) await warmUp(o, client, tokens, driverOptions);
    const createdAt = new Date();
    const driver = new LoadDriver(client, tokens, driverOptions());
    const progress = new ProgressReporter(driver.live, { requests: workload.requestCount, durationMs: o.durationS !== undefined ? o.durationS * 1000 : undefined }, o.progress);
    progress.start();
    let records: RequestRecord[];
    try {
      records = await driver.run(workload);
    } finally {
      progress.stop();
    }
    const report = buildReport({
      label: o.label,
      createdAt,
      config: reportConfig(o, workload.describe(), tokens),
      records,
      warmup: o.warmup,
      goodput: o.goodput,
    });
    const files = o.outDir ? writeReportFiles(o.outDir, report) : {};
    if (o.printTable) process.stdout.write(renderConsoleReport(report));
    return { report, records, files };
  } finally {
    client.close();
  }
}

/**
 * One tiny request before anything else, so a wrong URL or model name fails in a second with
 * the server's own message instead of after a whole run of identical errors.
 */
async function preflight(
  o: ResolvedBenchOptions,
  client: SseClient,
  tokens: TokenSpace,
  driverOptions: (overrides: Partial<DriverOptions>) => DriverOptions,
): Promise<void> {
  const workload = new RandomWorkload({ requests: 1, islMean: 8, islStd: 0, oslMean: 2, oslStd: 0, seed: o.seed ^ 0x50524546 }, tokens);
  const driver = new LoadDriver(client, tokens, driverOptions({ mode: 'closed', concurrency: 1, durationMs: undefined, maxTokens: undefined, timeoutMs: Math.min(o.timeoutS * 1000, 60_000) }));
  const [record] = await driver.run(workload);
  if (record && !record.ok) {
    throw new UnavailableError(
      `preflight request to ${o.url} failed (${record.errorKind}): ${record.errorMessage}; is the server up and serving model '${o.model}'? (--no-preflight skips this check)`,
    );
  }
}

/**
 * Warm-up requests run closed-loop before the clock starts and are not measured. They use
 * random prompts of the workload's mean length, not the workload's own prompts, so they
 * open connections and warm the server without pre-filling its prefix cache.
 */
async function warmUp(
  o: ResolvedBenchOptions,
  client: SseClient,
  tokens: TokenSpace,
  driverOptions: (overrides: Partial<DriverOptions>) => DriverOptions,
): Promise<void> {
  const isl = o.workload === 'shared-prefix' ? o.systemTokens + o.questionTokens : o.isl;
  const workload = new RandomWorkload({ requests: o.warmup, islMean: isl, islStd: 0, oslMean: Math.min(o.osl, 16), oslStd: 0, seed: o.seed ^ 0x5741524d }, tokens);
  const driver = new LoadDriver(
    client,
    tokens,
    driverOptions({
      mode: 'closed',
      concurrency: Math.min(o.warmup, o.concurrency ?? 8),
      durationMs: undefined,
      maxTokens: undefined,
    }),
  );
  await driver.run(workload);
}

export function writeReportFiles(outDir: string, report: BenchReport): { json: string; html: string } {
  mkdirSync(outDir, { recursive: true });
  const json = join(outDir, `${report.label}.json`);
  const html = join(outDir, `${report.label}.html`);
  writeFileSync(json, JSON.stringify(report, null, 1) + '\n');
  writeFileSync(html, renderHtmlReport(report));
  return { json, html };
}
