/**
 * Bench options: what a caller may set, the defaults per workload, and the cross-field
 * checks. `resolveBenchOptions` is the one place a partial, user-facing option set becomes
 * a complete run plan; it throws ConfigError with a message naming the flag at fault.
 */
import { ConfigError } from '../../runtime/errors.js';
import type { GoodputSlo } from './aggregate.js';
import type { EndpointKind, PromptFormat } from './request-encoder.js';
import { WORKLOAD_NAMES, type WorkloadName } from './workloads/workload.js';

export type ProgressMode = 'auto' | 'bar' | 'plain' | 'off';

export interface BenchOptions {
  url: string;
  model: string;
  workload?: WorkloadName;
  endpoint?: EndpointKind;
  promptFormat?: PromptFormat;
  /** Embeddings: inputs per request (default 32). */
  batchSize?: number;
  /** Model directory holding tokenizer.json; makes prompt lengths exact. */
  tokenizer?: string;
  /** Input (prompt) tokens: random; new user tokens per turn: multi-turn. */
  isl?: number;
  islStd?: number;
  osl?: number;
  oslStd?: number;
  groups?: number;
  promptsPerGroup?: number;
  systemTokens?: number;
  questionTokens?: number;
  sessions?: number;
  turns?: number;
  thinkTimeMs?: number;
  traceFile?: string;
  speedup?: number;
  traceBlockSize?: number;
  /** Poisson arrivals per second (sessions per second for multi-turn). */
  rate?: number;
  /** Closed-loop concurrency; with --rate or a trace, a cap on requests in flight. */
  concurrency?: number;
  requests?: number;
  durationS?: number;
  warmup?: number;
  seed?: number;
  /** Overrides every request's output length. */
  maxTokens?: number;
  ignoreEos?: boolean;
  temperature?: number;
  extraBody?: Record<string, unknown>;
  headers?: Record<string, string>;
  apiKey?: string;
  goodput?: GoodputSlo;
  timeoutS?: number;
  /** Directory for <label>.json and <label>.html; nothing is written when absent. */
  outDir?: string;
  label?: string;
  progress?: ProgressMode;
  /** Print the console table to stdout when the run ends. */
  printTable?: boolean;
  /** Send one small request first and fail fast (UnavailableError) if it fails. */
  preflight?: boolean;
  signal?: AbortSignal;
}

export type LoadMode = 'closed' | 'poisson' | 'trace';

export interface ResolvedBenchOptions extends Required<Omit<BenchOptions, 'tokenizer' | 'traceFile' | 'rate' | 'concurrency' | 'requests' | 'durationS' | 'maxTokens' | 'temperature' | 'extraBody' | 'apiKey' | 'goodput' | 'outDir' | 'signal'>> {
  tokenizer: string | undefined;
  traceFile: string | undefined;
  loadMode: LoadMode;
  rate: number | undefined;
  /** Closed-loop workers, or the in-flight cap of an open loop (undefined = no cap). */
  concurrency: number | undefined;
  requests: number | undefined;
  durationS: number | undefined;
  maxTokens: number | undefined;
  temperature: number | undefined;
  extraBody: Record<string, unknown> | undefined;
  apiKey: string | undefined;
  goodput: GoodputSlo | undefined;
  outDir: string | undefined;
  signal: AbortSignal | undefined;
}

/** Workload defaults; shared-prefix follows SGLang's generated-shared-prefix. */
export const WORKLOAD_DEFAULTS = {
  random: { requests: 1000, isl: 1024, osl: 128 },
  sharedPrefix: { groups: 64, promptsPerGroup: 16, systemTokens: 2048, questionTokens: 128, osl: 256 },
  embeddings: { batchSize: 32, isl: 128 },
  multiTurn: { sessions: 32, turns: 4, isl: 256, osl: 128, thinkTimeMs: 1000, systemTokens: 0 },
  trace: { speedup: 1, blockSize: 512 },
} as const;

function need(condition: boolean, message: string): void {
  if (!condition) throw new ConfigError(message);
}

export function resolveBenchOptions(o: BenchOptions): ResolvedBenchOptions {
  need(typeof o.url === 'string' && o.url.length > 0, '--url is required (the OpenAI-compatible server, e.g. http://127.0.0.1:8000)');
  let url: URL;
  try {
    url = new URL(o.url);
  } catch {
    throw new ConfigError(`--url: not a URL: '${o.url}'`);
  }
  need(url.protocol === 'http:' || url.protocol === 'https:', `--url: expected http:// or https://, got '${o.url}'`);
  need(typeof o.model === 'string' && o.model.length > 0, '--model is required (the model name the server serves)');

  const workload = o.workload ?? (o.traceFile ? 'trace' : 'random');
  need((WORKLOAD_NAMES as readonly string[]).includes(workload), `--workload: expected one of ${WORKLOAD_NAMES.join(', ')}, got '${workload}'`);
  if (workload === 'trace') need(!!o.traceFile, '--workload trace needs --trace-file FILE (Mooncake JSONL)');
  else need(!o.traceFile, `--trace-file is only used by --workload trace (got --workload ${workload})`);

  const endpoint = o.endpoint ?? (workload === 'multi-turn' ? 'chat' : 'completions');
  need(!(workload === 'multi-turn' && endpoint === 'completions'), '--workload multi-turn sends conversations: it needs --endpoint chat, responses or messages');
  const promptFormat = o.promptFormat ?? 'text';
  const isEmbed = endpoint === 'embeddings';
  need(!(promptFormat === 'ids' && endpoint !== 'completions' && !isEmbed), `--prompt-format ids needs --endpoint completions or embeddings (${endpoint} messages are text)`);
  need(!isEmbed || workload === 'random', `--endpoint embeddings takes --workload random (got --workload ${workload})`);
  need(isEmbed || o.batchSize === undefined, '--batch-size is only used by --endpoint embeddings');
  need(o.batchSize === undefined || (Number.isInteger(o.batchSize) && o.batchSize >= 1), '--batch-size must be an integer >= 1');
  const streamedOnly = Object.keys(o.goodput ?? {}).filter((k) => k !== 'e2e');
  need(!isEmbed || streamedOnly.length === 0, `--goodput ${streamedOnly.join(',')}: embeddings stream no tokens; only e2e applies`);

  need(!(o.rate !== undefined && workload === 'trace'), '--rate does not apply to --workload trace: arrivals follow the trace timestamps (use --speedup)');
  need(o.rate === undefined || o.rate > 0, '--rate must be > 0');
  need(o.concurrency === undefined || o.concurrency >= 1, '--concurrency must be >= 1');
  need(o.requests === undefined || o.requests >= 1, '--requests must be >= 1');
  need(o.durationS === undefined || o.durationS > 0, '--duration must be > 0');
  need(!(workload === 'multi-turn' && o.requests !== undefined && o.sessions !== undefined), '--workload multi-turn: give --sessions or --requests, not both');

  const loadMode: LoadMode = workload === 'trace' ? 'trace' : o.rate !== undefined ? 'poisson' : 'closed';
  const d = WORKLOAD_DEFAULTS;
  const isMulti = workload === 'multi-turn';
  const isShared = workload === 'shared-prefix';
  const turns = o.turns ?? d.multiTurn.turns;
  const positive = (name: string, v: number | undefined) => need(v === undefined || v >= 1, `${name} must be >= 1`);
  positive('--isl', o.isl);
  positive('--osl', o.osl);
  positive('--groups', o.groups);
  positive('--prompts-per-group', o.promptsPerGroup);
  positive('--question-len', o.questionTokens);
  positive('--turns', o.turns);
  positive('--sessions', o.sessions);
  positive('--max-tokens', o.maxTokens);
  need(o.speedup === undefined || o.speedup > 0, '--speedup must be > 0');

  return {
    url: o.url,
    model: o.model,
    workload,
    endpoint,
    promptFormat,
    tokenizer: o.tokenizer,
    batchSize: o.batchSize ?? d.embeddings.batchSize,
    isl: o.isl ?? (isEmbed ? d.embeddings.isl : isMulti ? d.multiTurn.isl : d.random.isl),
    islStd: o.islStd ?? 0,
    osl: o.osl ?? (isShared ? d.sharedPrefix.osl : isMulti ? d.multiTurn.osl : d.random.osl),
    oslStd: o.oslStd ?? 0,
    groups: o.groups ?? d.sharedPrefix.groups,
    promptsPerGroup: o.promptsPerGroup ?? d.sharedPrefix.promptsPerGroup,
    systemTokens: o.systemTokens ?? (isMulti ? d.multiTurn.systemTokens : d.sharedPrefix.systemTokens),
    questionTokens: o.questionTokens ?? d.sharedPrefix.questionTokens,
    sessions: o.sessions ?? (isMulti && o.requests !== undefined ? Math.ceil(o.requests / turns) : d.multiTurn.sessions),
    turns,
    thinkTimeMs: o.thinkTimeMs ?? d.multiTurn.thinkTimeMs,
    traceFile: o.traceFile,
    speedup: o.speedup ?? d.trace.speedup,
    traceBlockSize: o.traceBlockSize ?? d.trace.blockSize,
    loadMode,
    rate: o.rate,
    concurrency: o.concurrency ?? (loadMode === 'closed' ? 1 : undefined),
    requests: o.requests,
    durationS: o.durationS,
    warmup: o.warmup ?? 0,
    seed: o.seed ?? 0,
    maxTokens: o.maxTokens,
    ignoreEos: o.ignoreEos ?? true,
    temperature: o.temperature,
    extraBody: o.extraBody,
    headers: o.headers ?? {},
    apiKey: o.apiKey,
    goodput: o.goodput,
    timeoutS: o.timeoutS ?? 600,
    outDir: o.outDir,
    label: o.label ?? 'bench',
    progress: o.progress ?? 'auto',
    printTable: o.printTable ?? false,
    preflight: o.preflight ?? false,
    signal: o.signal,
  };
}
