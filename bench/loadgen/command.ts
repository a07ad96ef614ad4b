/**
 * `runtime bench`, `runtime bench compare A.json B.json` and `runtime bench make-trace`.
 * Every usage error (bad value, unknown flag, conflicting flags) prints a one-line reason
 * and exits 2, whatever the host program's defaults, so scripts can tell "you called it
 * wrong" (2) from "the run failed" (1).
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { writeFileSync } from 'node:fs';
import { intInRange, nonNegativeInt, numberInRange, parseNumber, positiveInt } from '../../runtime/config.js';
import { ConfigError, UnavailableError } from '../../runtime/errors.js';
import type { GoodputSlo } from './aggregate.js';
import { runBench } from './bench.js';
import { readReport, renderComparison } from './compare.js';
import { DEFAULT_SYNTHETIC_TRACE, formatTrace, makeSyntheticTrace } from './mooncake-trace.js';
import type { BenchOptions, ProgressMode } from './options.js';
import { ENDPOINT_KINDS } from './request-encoder.js';
import { WORKLOAD_NAMES } from './workloads/workload.js';

const GOODPUT_KEYS = ['ttft', 'itl', 'tpot', 'e2e'] as const;

/** `ttft:500,itl:50` -> { ttft: 500, itl: 50 } (milliseconds). */
export function parseGoodput(raw: string): GoodputSlo {
  const slo: GoodputSlo = {};
  for (const part of raw.split(',')) {
    const [key, value, ...rest] = part.split(':').map((s) => s.trim());
    if (!key || value === undefined || rest.length > 0) throw new InvalidArgumentError(`expected KEY:MS[,KEY:MS] with KEY in ${GOODPUT_KEYS.join('|')}, got '${raw}'`);
    if (!(GOODPUT_KEYS as readonly string[]).includes(key)) throw new InvalidArgumentError(`unknown goodput metric '${key}'; use ${GOODPUT_KEYS.join(', ')}`);
    const ms = Number(value);
    if (value === '' || !Number.isFinite(ms) || ms <= 0) throw new InvalidArgumentError(`goodput ${key} must be a positive number of ms, got '${value}'`);
    slo[key as keyof GoodputSlo] = ms;
  }
  return slo;
}

function parseHeader(raw: string, previous: Record<string, string> = {}): Record<string, string> {
  const at = raw.indexOf(':');
  if (at <= 0) throw new InvalidArgumentError(`expected 'Name: value', got '${raw}'`);
  return { ...previous, [raw.slice(0, at).trim().toLowerCase()]: raw.slice(at + 1).trim() };
}

function parseJsonObject(raw: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    throw new InvalidArgumentError(`expected a JSON object, got '${raw}'`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new InvalidArgumentError(`expected a JSON object, got '${raw}'`);
  return value as Record<string, unknown>;
}

const positiveNumber = (raw: string) => {
  const v = parseNumber(raw);
  if (v <= 0) throw new InvalidArgumentError(`expected a number > 0, got '${raw}'`);
  return v;
};

/** Usage errors of this command (and its subcommands) exit 2. */
function exitTwoOnUsageError(cmd: Command): Command {
  const original = cmd.error.bind(cmd);
  cmd.error = ((message: string, options?: { code?: string; exitCode?: number }) =>
    original(message, { ...options, exitCode: 2 })) as Command['error'];
  return cmd;
}

/** Flags that carry a BenchOptions field under the same name. */
type SameAsOptions =
  | 'workload'
  | 'endpoint'
  | 'promptFormat'
  | 'batchSize'
  | 'tokenizer'
  | 'isl'
  | 'islStd'
  | 'osl'
  | 'oslStd'
  | 'groups'
  | 'promptsPerGroup'
  | 'sessions'
  | 'turns'
  | 'traceFile'
  | 'speedup'
  | 'traceBlockSize'
  | 'rate'
  | 'concurrency'
  | 'requests'
  | 'warmup'
  | 'seed'
  | 'maxTokens'
  | 'temperature'
  | 'extraBody'
  | 'apiKey'
  | 'goodput'
  | 'label';

/** What commander parses; the rest differ from BenchOptions in name, unit or optionality. */
interface BenchFlags extends Pick<BenchOptions, SameAsOptions> {
  url?: string;
  model?: string;
  systemLen?: number;
  questionLen?: number;
  thinkTime?: number;
  duration?: number;
  ignoreEos: boolean;
  header?: Record<string, string>;
  timeout?: number;
  out?: string;
  progress: ProgressMode;
  preflight: boolean;
}

export function benchOptionsFromFlags(f: BenchFlags): BenchOptions {
  return {
    url: f.url ?? '',
    model: f.model ?? '',
    workload: f.workload,
    endpoint: f.endpoint,
    promptFormat: f.promptFormat,
    batchSize: f.batchSize,
    tokenizer: f.tokenizer,
    isl: f.isl,
    islStd: f.islStd,
    osl: f.osl,
    oslStd: f.oslStd,
    groups: f.groups,
    promptsPerGroup: f.promptsPerGroup,
    systemTokens: f.systemLen,
    questionTokens: f.questionLen,
    sessions: f.sessions,
    turns: f.turns,
    thinkTimeMs: f.thinkTime,
    traceFile: f.traceFile,
    speedup: f.speedup,
    traceBlockSize: f.traceBlockSize,
    rate: f.rate,
    concurrency: f.concurrency,
    requests: f.requests,
    durationS: f.duration,
    warmup: f.warmup,
    seed: f.seed,
    maxTokens: f.maxTokens,
    ignoreEos: f.ignoreEos,
    temperature: f.temperature,
    extraBody: f.extraBody,
    headers: f.header,
    apiKey: f.apiKey,
    goodput: f.goodput,
    timeoutS: f.timeout,
    outDir: f.out,
    label: f.label,
    progress: f.progress,
    printTable: true,
    preflight: f.preflight,
  };
}

export function registerBenchCommand(program: Command): Command {
  const bench = exitTwoOnUsageError(program.command('bench'))
    .description('drive an OpenAI-compatible server with a workload and report latency and throughput')
    .enablePositionalOptions()
    .option('--url <url>', 'server base URL, e.g. http://127.0.0.1:8000')
    .option('--model <name>', 'model name to request')
    .addOption(new Option('--workload <name>', 'workload (default random; trace when --trace-file is given)').choices(WORKLOAD_NAMES))
    .addOption(new Option('--endpoint <kind>', 'API (default completions; chat, responses or messages for multi-turn; embeddings sends batches of --isl-token inputs)').choices([...ENDPOINT_KINDS]))
    .addOption(new Option('--prompt-format <format>', 'completions prompt / embeddings inputs as text or token ids (default text)').choices(['text', 'ids']))
    .option('--batch-size <n>', 'embeddings: inputs per request (default 32; input length is --isl, default 128)', positiveInt)
    .option('--tokenizer <dir>', "model directory with the served model's tokenizer.json (exact prompt lengths)")
    .option('--isl <n>', 'input tokens (random) / new user tokens per turn (multi-turn)', positiveInt)
    .option('--isl-std <n>', 'input length standard deviation', numberInRange(0))
    .option('--osl <n>', 'output tokens per request', positiveInt)
    .option('--osl-std <n>', 'output length standard deviation', numberInRange(0))
    .option('--groups <n>', 'shared-prefix: groups (default 64)', positiveInt)
    .option('--prompts-per-group <n>', 'shared-prefix: prompts per group (default 16)', positiveInt)
    .option('--system-len <n>', 'shared-prefix: system prompt tokens (default 2048); multi-turn: shared system prompt (default 0)', nonNegativeInt)
    .option('--question-len <n>', 'shared-prefix: question tokens (default 128)', positiveInt)
    .option('--sessions <n>', 'multi-turn: sessions (default 32)', positiveInt)
    .option('--turns <n>', 'multi-turn: turns per session (default 4)', positiveInt)
    .option('--think-time <ms>', 'multi-turn: mean pause between turns in ms (default 1000)', numberInRange(0))
    .option('--trace-file <file>', 'trace: Mooncake JSONL file')
    .option('--speedup <x>', 'trace: replay timestamps this many times faster (default 1)', positiveNumber)
    .option('--trace-block-size <n>', 'trace: tokens per hash id (default 512)', positiveInt)
    .option('--rate <r>', 'Poisson arrivals per second (sessions per second for multi-turn)', positiveNumber)
    .option('--concurrency <c>', 'closed-loop concurrency; with --rate or a trace, the in-flight cap', positiveInt)
    .option('--requests <n>', 'requests to measure (default: the workload size)', positiveInt)
    .option('--duration <s>', 'stop starting requests after S seconds', positiveNumber)
    .option('--warmup <n>', 'unmeasured warm-up requests before the run', nonNegativeInt)
    .option('--seed <n>', 'seed for prompts, lengths and arrivals', intInRange(0, 2 ** 31 - 1))
    .option('--max-tokens <n>', 'override every request\'s output length', positiveInt)
    .option('--no-ignore-eos', 'let the model stop at EOS (output lengths are then not exact)')
    .option('--temperature <t>', 'sampling temperature to send', numberInRange(0))
    .option('--extra-body <json>', 'JSON object merged into every request body', parseJsonObject)
    .option('--header <name:value>', 'extra HTTP header (repeatable)', parseHeader)
    .option('--api-key <key>', 'bearer token for the server')
    .option('--goodput <slo>', 'goodput SLOs in ms, e.g. ttft:500,itl:50 (keys: ttft, itl, tpot, e2e)', parseGoodput)
    .option('--timeout <s>', 'per-request timeout in seconds (default 600)', positiveNumber)
    .option('--out <dir>', 'write <label>.json and <label>.html here')
    .option('--label <name>', 'run name used in file names and reports (default bench)')
    .option('--no-preflight', 'skip the single test request sent before the run')
    .addOption(new Option('--progress <mode>', 'progress display').choices(['auto', 'bar', 'plain', 'off']).default('auto'))
    .action(async (flags: BenchFlags, cmd: Command) => {
      const controller = new AbortController();
      const onSigint = () => controller.abort();
      process.once('SIGINT', onSigint);
      try {
        const result = await runBench({ ...benchOptionsFromFlags(flags), signal: controller.signal });
        if (result.files.json) process.stdout.write(`wrote ${result.files.json}\nwrote ${result.files.html}\n`);
      } catch (err) {
        if (err instanceof ConfigError) cmd.error(`runtime bench: ${err.message}`, { exitCode: 2, code: 'tandem.config_invalid' });
        if (err instanceof UnavailableError) {
          // Not a usage error and not a bug: say why in one line, no stack trace.
          process.stderr.write(`runtime bench: ${err.message}\n`);
          process.exitCode = 1;
          return;
        }
        throw err;
      } finally {
        process.removeListener('SIGINT', onSigint);
      }
    });

  exitTwoOnUsageError(bench.command('compare'))
    .description('print two bench reports side by side with B/A ratios')
    .argument('<a>', 'baseline report JSON')
    .argument('<b>', 'candidate report JSON')
    .action((a: string, b: string, _flags: unknown, cmd: Command) => {
      try {
        process.stdout.write(renderComparison(readReport(a), readReport(b)));
      } catch (err) {
        if (err instanceof ConfigError) cmd.error(`runtime bench compare: ${err.message}`, { exitCode: 2 });
        throw err;
      }
    });

  const d = DEFAULT_SYNTHETIC_TRACE;
  exitTwoOnUsageError(bench.command('make-trace'))
    .description('write a synthetic Mooncake-format trace (JSONL) with shared prefixes')
    .requiredOption('--out <file>', 'trace file to write')
    .option('--requests <n>', 'requests', positiveInt, d.requests)
    .option('--rate <r>', 'mean arrivals per second (Poisson)', positiveNumber, d.rate)
    .option('--isl <n>', 'mean input tokens', positiveInt, d.islMean)
    .option('--isl-std <n>', 'input tokens standard deviation', numberInRange(0), d.islStd)
    .option('--osl <n>', 'mean output tokens', positiveInt, d.oslMean)
    .option('--osl-std <n>', 'output tokens standard deviation', numberInRange(0), d.oslStd)
    .option('--prefix-groups <n>', 'distinct shared prefixes', nonNegativeInt, d.prefixGroups)
    .option('--prefix-blocks <n>', 'blocks in each shared prefix', nonNegativeInt, d.prefixBlocks)
    .option('--zipf <s>', 'popularity skew of prefix groups (0 = uniform)', numberInRange(0), d.zipf)
    .option('--block-size <n>', 'tokens per hash id', positiveInt, d.blockSize)
    .option('--seed <n>', 'seed', intInRange(0, 2 ** 31 - 1), d.seed)
    .action((f: { out: string; requests: number; rate: number; isl: number; islStd: number; osl: number; oslStd: number; prefixGroups: number; prefixBlocks: number; zipf: number; blockSize: number; seed: number }) => {
      const entries = makeSyntheticTrace({
        requests: f.requests,
        rate: f.rate,
        islMean: f.isl,
        islStd: f.islStd,
        oslMean: f.osl,
        oslStd: f.oslStd,
        prefixGroups: f.prefixGroups,
        prefixBlocks: f.prefixBlocks,
        zipf: f.zipf,
        blockSize: f.blockSize,
        seed: f.seed,
      });
      writeFileSync(f.out, formatTrace(entries));
      const spanS = (entries[entries.length - 1]?.timestamp ?? 0) / 1000;
      process.stdout.write(`wrote ${entries.length} requests over ${spanS.toFixed(1)} s to ${f.out}\n`);
    });

  return bench;
}
