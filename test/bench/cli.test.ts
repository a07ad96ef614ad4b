/**
 * The command line: bad arguments exit 2 with a clear one-line reason; a good run writes the
 * JSON and HTML reports; compare and make-trace work from the command line.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Command, CommanderError } from 'commander';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { REPORT_SCHEMA, REPORT_VERSION, registerBenchCommand, type BenchReport } from '../../bench/loadgen/index.js';
import { readMooncakeTrace } from '../../planner/index.js';
import { startScriptedServer, type ScriptedServer } from './fixtures/scripted-server.js';

const run = promisify(execFile);
const fixture = join(import.meta.dirname, 'fixtures', 'bench-cli.ts');

let dir: string;
let server: ScriptedServer;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'bench-cli-'));
  server = await startScriptedServer({ ttftMs: 3, itlMs: 1, cachedTokens: () => 8 });
});
afterAll(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Parse `args` in-process; resolves with the exit code and what went to stderr/stdout. */
async function cli(args: string[]): Promise<{ code: number; err: string; out: string }> {
  let err = '';
  let out = '';
  const program = new Command('runtime').enablePositionalOptions().exitOverride().configureOutput({ writeErr: (s) => (err += s), writeOut: (s) => (out += s) });
  registerBenchCommand(program);
  const write = vi.spyOn(process.stdout, 'write').mockImplementation((s: string | Uint8Array) => {
    out += String(s);
    return true;
  });
  try {
    await program.parseAsync(['node', 'runtime', ...args]);
    return { code: 0, err, out };
  } catch (e) {
    if (e instanceof CommanderError) return { code: e.exitCode, err, out };
    throw e;
  } finally {
    write.mockRestore();
  }
}

describe('runtime bench: bad arguments exit 2 with a clear error', () => {
  it.each([
    [['--url', 'http://x', '--model', 'm', '--rate', '0'], "option '--rate <r>' argument '0' is invalid. expected a number > 0"],
    [['--url', 'http://x', '--model', 'm', '--workload', 'bursty'], "argument 'bursty' is invalid. Allowed choices are random, shared-prefix, multi-turn, trace"],
    [['--url', 'http://x', '--model', 'm', '--goodput', 'ttft=5'], 'expected KEY:MS[,KEY:MS]'],
    [['--url', 'http://x', '--model', 'm', '--goodput', 'latency:5'], "unknown goodput metric 'latency'"],
    [['--url', 'http://x', '--model', 'm', '--requests', '1.5'], "expected an integer, got '1.5'"],
    [['--model', 'm'], '--url is required'],
    [['--url', 'http://x'], '--model is required'],
    [['--url', 'ftp://x', '--model', 'm'], "--url: expected http:// or https://"],
    [['--url', 'http://x', '--model', 'm', '--workload', 'trace'], '--workload trace needs --trace-file FILE'],
    [['--url', 'http://x', '--model', 'm', '--workload', 'multi-turn', '--endpoint', 'completions'], 'multi-turn sends conversations: it needs --endpoint chat'],
    [['--url', 'http://x', '--model', 'm', '--prompt-format', 'ids', '--endpoint', 'chat'], '--prompt-format ids needs --endpoint completions'],
    [['--url', 'http://x', '--model', 'm', '--trace-file', 'nope.jsonl'], 'cannot read trace nope.jsonl'],
    [['--url', 'http://x', '--model', 'm', '--tokenizer', '/nonexistent'], 'no tokenizer.json there'],
    [['--url', 'http://x', '--model', 'm', '--bogus'], "unknown option '--bogus'"],
  ])('%j', async (args, message) => {
    const r = await cli(['bench', ...args]);
    expect(r.code).toBe(2);
    expect(r.err).toContain(message);
  });

  it('as a process: exit status 2 and the reason on stderr', async () => {
    const cases = [
      { args: ['--url', 'http://x', '--model', 'm', '--concurrency', '0'], message: "'--concurrency <c>' argument '0' is invalid" },
      { args: ['--url', 'http://x', '--model', 'm', '--workload', 'multi-turn', '--prompt-format', 'ids'], message: '--prompt-format ids needs --endpoint completions' },
    ];
    await Promise.all(
      cases.map(async ({ args, message }) => {
        const err = await run(process.execPath, ['--import', 'tsx', fixture, 'bench', ...args]).then(
          () => undefined,
          (e: { code: number; stderr: string }) => e,
        );
        expect(err?.code).toBe(2);
        expect(err?.stderr).toContain(message);
      }),
    );
  });
});

describe('runtime bench: reports', () => {
  it('writes versioned JSON and a self-contained HTML report, and compares two runs', async () => {
    const out = join(dir, 'out');
    const common = ['bench', '--url', server.url, '--model', 'm', '--isl', '16', '--osl', '5', '--requests', '8', '--progress', 'off', '--out', out];
    const a = await cli([...common, '--concurrency', '1', '--label', 'a', '--goodput', 'ttft:1000,itl:500']);
    expect(a.code).toBe(0);
    expect(a.out).toContain('TTFT');
    expect(a.out).toContain(`wrote ${join(out, 'a.json')}`);
    const b = await cli([...common, '--concurrency', '4', '--label', 'b', '--warmup', '2']);
    expect(b.code).toBe(0);

    const report = JSON.parse(readFileSync(join(out, 'a.json'), 'utf8')) as BenchReport;
    expect(report.schema).toBe(REPORT_SCHEMA);
    expect(report.version).toBe(REPORT_VERSION);
    expect(report.summary.requests).toEqual({ measured: 8, completed: 8, failed: 0, warmup: 0 });
    expect(report.summary.goodput?.good_requests).toBe(8);
    expect(report.summary.tokens.cached_ratio).toBeCloseTo(0.5, 6);
    expect(report.requests).toHaveLength(8);
    expect(report.cdf.ttft_ms).toHaveLength(report.cdf.quantiles.length);
    expect(report.timeline.start_s.length).toBe(report.timeline.in_flight.length);
    const bReport = JSON.parse(readFileSync(join(out, 'b.json'), 'utf8')) as BenchReport;
    expect(bReport.summary.requests.warmup).toBe(2);
    expect(bReport.summary.requests.measured).toBe(8);

    const html = readFileSync(join(out, 'a.html'), 'utf8');
    expect(html).toContain('<svg');
    expect(html).toContain('TTFT CDF');
    expect(html).toContain('Requests in flight');
    expect(html).not.toMatch(/<script|<link|https?:\/\/(?!127\.0\.0\.1|www\.w3\.org)/);

    const cmp = await cli(['bench', 'compare', join(out, 'a.json'), join(out, 'b.json')]);
    expect(cmp.code).toBe(0);
    expect(cmp.out).toMatch(/output throughput \(tok\/s\)\s+\S+\s+\S+\s+\d+\.\d{3}x/);
    expect(cmp.out).toContain('TTFT p90 (ms)');
    const bad = await cli(['bench', 'compare', join(out, 'a.html'), join(out, 'b.json')]);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('cannot read a bench report');
  });

  it('an unreachable server fails fast after one preflight request, exit status 1', async () => {
    const gone = await startScriptedServer({ ttftMs: 1, itlMs: 1 });
    const url = gone.url;
    await gone.close();
    let err = '';
    const spy = vi.spyOn(process.stderr, 'write').mockImplementation((s: string | Uint8Array) => {
      err += String(s);
      return true;
    });
    const started = Date.now();
    try {
      const r = await cli(['bench', '--url', url, '--model', 'm', '--requests', '500', '--progress', 'off']);
      expect(r.code).toBe(0);
      expect(process.exitCode).toBe(1);
    } finally {
      spy.mockRestore();
      process.exitCode = undefined;
    }
    expect(err).toContain(`preflight request to ${url} failed (network): ECONNREFUSED`);
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('make-trace writes a Mooncake trace that replays', async () => {
    const file = join(dir, 'synthetic.jsonl');
    const r = await cli(['bench', 'make-trace', '--out', file, '--requests', '30', '--rate', '200', '--isl', '600', '--osl', '3', '--osl-std', '0', '--prefix-groups', '3', '--prefix-blocks', '1']);
    expect(r.code).toBe(0);
    expect(existsSync(file)).toBe(true);
    const entries = readMooncakeTrace(file);
    expect(entries).toHaveLength(30);
    expect(new Set(entries.map((e) => e.hash_ids[0])).size).toBeLessThanOrEqual(3);
    const replay = await cli(['bench', '--url', server.url, '--model', 'm', '--trace-file', file, '--speedup', '4', '--progress', 'off']);
    expect(replay.code).toBe(0);
    expect(replay.out).toContain('30 ok / 0 failed');
  });
});
