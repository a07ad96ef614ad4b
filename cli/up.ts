/**
 * `runtime up`: everything on this machine. It starts the frontend and the workers as child
 * processes that find each other through file discovery and direct events (or etcd + NATS when
 * asked), prints the URL and a curl line, and stops everything on Ctrl-C.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Option, type Command } from 'commander';
import { nonNegativeInt, oneOf, parsePort } from '../runtime/config.js';
import { ConfigError } from '../runtime/errors.js';
import { makeTinyModel } from '../workers/models/index.js';

const BIN = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bin', 'runtime.js');

interface UpFlags {
  engine: 'mocker' | 'native';
  model: string;
  /** Aggregated workers; default 2, or 0 when --prefill/--decode ask for a disaggregated fleet. */
  workers?: number;
  prefill: number;
  decode: number;
  httpPort: number;
  host: string;
  discovery: 'file' | 'etcd';
  eventPlane: 'direct' | 'nats';
  speedupRatio?: string;
  numGpuBlocks?: string;
  blockSize?: string;
  maxNumSeqs?: string;
  maxNumBatchedTokens?: string;
  device?: string;
  threads?: string;
  kvBytesPerToken?: string;
  kvReleaseTimeout?: string;
  logLevel: string;
}

/** The tiny model `--model tiny` serves, generated once per machine. */
async function resolveModel(model: string): Promise<string> {
  if (model !== 'tiny') {
    const dir = resolve(model);
    if (!existsSync(join(dir, 'config.json'))) throw new ConfigError(`--model ${model}: no config.json in ${dir}`);
    return dir;
  }
  const dir = join(process.env.TANDEM_CACHE_DIR ?? join(homedir(), '.cache', 'tandem'), 'tiny-llama');
  if (!existsSync(join(dir, 'config.json'))) {
    process.stderr.write(`runtime up: generating the tiny model in ${dir}\n`);
    await makeTinyModel({ arch: 'llama', outDir: dir, dtype: 'f32', seed: 0 });
  }
  return dir;
}

/** Prefix each line of a child's output so the interleaved logs stay readable. */
function pipeWithPrefix(child: ChildProcess, label: string, onLine?: (line: string) => void): void {
  for (const stream of [child.stdout, child.stderr]) {
    if (!stream) continue;
    createInterface({ input: stream }).on('line', (line) => {
      process.stderr.write(`[${label}] ${line}\n`);
      onLine?.(line);
    });
  }
}

async function waitForModel(urlOf: () => string, timeoutMs: number, children: ChildProcess[], isListening: () => boolean, routable: number): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (children.some((c) => c.exitCode !== null)) throw new Error('a child process exited during start-up (see its log above)');
    // Another server on the port would answer too: only ask once our own frontend is listening.
    if (!isListening()) {
      await new Promise((r) => setTimeout(r, 100));
      continue;
    }
    try {
      // /health lists routable (agg + decode) instances per model; prefill workers never are.
      const res = await fetch(`${urlOf()}/health`);
      const body = (await res.json()) as { models?: Array<{ name: string; instances: number }> };
      const model = body.models?.find((m) => m.instances >= routable);
      if (model) return model.name;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`the frontend did not list a model within ${timeoutMs / 1000} s`);
}

export function registerUpCommand(program: Command): void {
  program
    .command('up')
    .description('all-in-one on this machine: frontend + workers, embedded discovery and events')
    .addOption(new Option('--engine <engine>', 'worker engine').argParser(oneOf(['mocker', 'native'] as const)).default('mocker'))
    .addOption(new Option('--model <dir>', "model directory, or 'tiny' for a generated tiny Llama").default('tiny'))
    .addOption(new Option('--workers <n>', 'aggregated workers (default 2; 0 with --prefill/--decode)').argParser(nonNegativeInt))
    .addOption(new Option('--prefill <n>', 'prefill workers (disaggregated mode)').argParser(nonNegativeInt).default(0))
    .addOption(new Option('--decode <n>', 'decode workers (disaggregated mode)').argParser(nonNegativeInt).default(0))
    .addOption(new Option('--http-port <port>', 'frontend HTTP port').argParser(parsePort).default(8000))
    .addOption(new Option('--host <host>', 'frontend bind host').default('127.0.0.1'))
    .addOption(new Option('--discovery <kind>', 'file | etcd').argParser(oneOf(['file', 'etcd'] as const)).default('file'))
    .addOption(new Option('--event-plane <kind>', 'direct | nats').argParser(oneOf(['direct', 'nats'] as const)).default('direct'))
    .option('--speedup-ratio <x>', 'mocker: divide simulated time by this')
    .option('--num-gpu-blocks <n>', 'KV blocks per worker')
    .option('--block-size <n>', 'tokens per KV block')
    .option('--max-num-seqs <n>', 'running sequences per worker')
    .option('--max-num-batched-tokens <n>', 'token budget per step')
    .option('--device <device>', 'native engine device (cpu)')
    .option('--threads <n>', 'native engine compute threads per worker')
    .option('--kv-bytes-per-token <bytes>', 'prefill/decode with the mocker: KV bytes per token of its host pool (131072 = 8B-shaped)')
    .option('--kv-release-timeout <seconds>', 'prefill: free pinned KV blocks no decode worker released after this long')
    .option('--log-level <level>', 'log level of the children', 'info')
    .allowUnknownOption(true)
    .allowExcessArguments(true)
    .addHelpText(
      'after',
      '\nUnknown flags (for example --router-mode kv, --disagg-min-prefill-tokens 512, --enforce-disagg) are passed to the frontend.' +
        '\nDisaggregated: runtime up --prefill 1 --decode 1 (prompts with at least --disagg-min-prefill-tokens uncached tokens prefill on the prefill pool).',
    )
    .action(async (flags: UpFlags, cmd: Command) => {
      flags.workers ??= flags.prefill + flags.decode > 0 ? 0 : 2;
      if (flags.workers + flags.prefill + flags.decode === 0) throw new ConfigError('runtime up needs at least one worker (--workers, --prefill or --decode)');
      if (flags.prefill > 0 && flags.decode === 0) throw new ConfigError('--prefill needs --decode workers too');
      await runUp(flags, cmd.args);
    });
}

async function runUp(flags: UpFlags, frontendExtra: string[]): Promise<void> {
  const modelDir = await resolveModel(flags.model);
  const discoveryDir = mkdtempSync(join(tmpdir(), 'tandem-up-'));
  const common = ['--discovery', flags.discovery, '--event-plane', flags.eventPlane, '--log-level', flags.logLevel];
  if (flags.discovery === 'file') common.push('--discovery-dir', discoveryDir);
  const workerFlags = ['--engine', flags.engine, '--model', modelDir];
  const passthrough: Array<[keyof UpFlags, string]> = [
    ['speedupRatio', '--speedup-ratio'],
    ['numGpuBlocks', '--num-gpu-blocks'],
    ['blockSize', '--block-size'],
    ['maxNumSeqs', '--max-num-seqs'],
    ['maxNumBatchedTokens', '--max-num-batched-tokens'],
    ['device', '--device'],
    ['threads', '--threads'],
    ['kvBytesPerToken', '--kv-bytes-per-token'],
    ['kvReleaseTimeout', '--kv-release-timeout'],
  ];
  for (const [key, flag] of passthrough) if (flags[key] !== undefined) workerFlags.push(flag, String(flags[key]));

  const children: ChildProcess[] = [];
  let frontendListening = false;
  // The frontend says where it listens; with --http-port 0 that is the only way to know the port.
  let listeningUrl: string | undefined;
  const onFrontendLine = (line: string) => {
    if (frontendListening || !line.includes('frontend listening')) return;
    frontendListening = true;
    listeningUrl = /"url":"(http:[^"]+)"/.exec(line)?.[1] ?? /listening on (http:\/\/\S+)/.exec(line)?.[1];
  };
  // Every worker must be up before "ready": a model listed from a prefill card alone cannot serve.
  let workersReady = 0;
  const start = (label: string, args: string[]) => {
    // Own process group: a terminal's Ctrl-C reaches only `up`, which stops each child once (in the
    // terminal's group a child would get SIGINT and then our SIGTERM: a second signal, no drain).
    const child = spawn(process.execPath, [BIN, ...args], { detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TANDEM_LOG_FORMAT: 'json' } });
    pipeWithPrefix(
      child,
      label,
      label === 'frontend' ? (line) => onFrontendLine(line) : (line) => (workersReady += line.includes('"msg":"worker ready"') ? 1 : 0),
    );
    children.push(child);
    return child;
  };

  let stopping = false;
  const stopAll = async (code: number) => {
    if (stopping) return;
    stopping = true;
    process.stderr.write('runtime up: stopping\n');
    for (const child of children) if (child.exitCode === null) child.kill('SIGTERM');
    const deadline = Date.now() + 15_000;
    while (children.some((c) => c.exitCode === null && c.signalCode === null) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
    }
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    rmSync(discoveryDir, { recursive: true, force: true });
    process.exit(code);
  };
  process.on('SIGINT', () => void stopAll(0));
  process.on('SIGTERM', () => void stopAll(0));
  process.on('SIGHUP', () => void stopAll(0)); // terminal closed: children no longer share its group

  start('frontend', ['frontend', ...common, '--http-port', String(flags.httpPort), '--host', flags.host, ...frontendExtra]);
  const roles: Array<[string, number]> = [
    ['agg', flags.workers ?? 0],
    ['prefill', flags.prefill],
    ['decode', flags.decode],
  ];
  for (const [mode, count] of roles) {
    for (let i = 0; i < count; i++) start(`${mode}-${i}`, ['worker', ...common, ...workerFlags, '--mode', mode]);
  }
  for (const child of children) {
    child.on('exit', (code, signal) => {
      if (!stopping) {
        process.stderr.write(`runtime up: a child exited (code ${code}, signal ${signal}); stopping everything\n`);
        void stopAll(1);
      }
    });
  }

  const configuredUrl = `http://${flags.host === '0.0.0.0' ? '127.0.0.1' : flags.host}:${flags.httpPort}`;
  const urlOf = () => (listeningUrl ?? configuredUrl).replace('://0.0.0.0:', '://127.0.0.1:');
  try {
    const total = (flags.workers ?? 0) + flags.prefill + flags.decode;
    const model = await waitForModel(urlOf, 120_000, children, () => frontendListening && workersReady >= total, Math.max(1, (flags.workers ?? 0) + flags.decode));
    const url = urlOf();
    process.stdout.write(
      [
        '',
        `Tandem is serving ${model} at ${url}`,
        `  workers: ${[flags.workers ? `${flags.workers} aggregated` : '', flags.prefill ? `${flags.prefill} prefill` : '', flags.decode ? `${flags.decode} decode` : ''].filter(Boolean).join(' + ')}`,
        '',
        'Try:',
        `  curl -N ${url}/v1/chat/completions -H 'content-type: application/json' \\`,
        `    -d '{"model":"${model}","messages":[{"role":"user","content":"Hello!"}],"max_tokens":32,"stream":true}'`,
        '',
        'Press Ctrl-C to stop.',
        '',
      ].join('\n'),
    );
  } catch (err) {
    process.stderr.write(`runtime up: ${(err as Error).message}\n`);
    await stopAll(1);
  }
}
