/**
 * The `runtime` command line. Each subcommand is registered by the part that owns it; this file
 * only assembles them, binds TANDEM_* environment variables to every flag, and turns a failed
 * start into one line on stderr and an exit code (runtime/exit-codes.ts): usage and
 * configuration errors exit 2, an unreachable dependency or a taken port exits 4, and only an
 * unexpected error (a bug) prints its stack trace and exits 1.
 */
import { Command, CommanderError } from 'commander';
import { bindEnvironment } from '../runtime/index.js';
import { TandemError } from '../runtime/errors.js';
import { EXIT_CODES, type ExitCode } from '../runtime/index.js';
import { watchParentLink } from '../runtime/index.js';
import { registerCommands } from './commands.js';
import { applyEnvNameExceptions } from './env-names.js';

export function buildProgram(): Command {
  const program = new Command('runtime')
    .description('Tandem: disaggregated LLM serving. Every flag can also be set as TANDEM_<FLAG_IN_CAPS>.')
    .version(process.env.npm_package_version ?? '0.1.0')
    .enablePositionalOptions();
  registerCommands(program);
  applyEnvNameExceptions(program);
  bindEnvironment(program);
  const exitOverride = (cmd: Command) => {
    cmd.exitOverride();
    // A usage error is one line like every other refusal ("runtime: …", exit 2), naming the help to read.
    cmd.configureOutput({ outputError: (text, write) => write(usageErrorLine(text, commandPath(cmd))) });
    cmd.commands.forEach(exitOverride);
  };
  exitOverride(program);
  return program;
}

/** `runtime up`, `runtime model make-tiny`: the command as a user types it. */
function commandPath(cmd: Command): string {
  const names: string[] = [];
  for (let c: Command | null = cmd; c; c = c.parent) names.unshift(c.name());
  return names.join(' ');
}

/** commander's "error: option '--x <n>' argument 'y' is invalid. …" as `runtime: …` on one line. */
export function usageErrorLine(text: string, command: string): string {
  const message = text.replace(/^error: /, '').replace(/\s+/g, ' ').trim();
  return `runtime: ${message} (\`${command} --help\` lists the options)\n`;
}

export async function main(argv: string[]): Promise<void> {
  // Started by a supervisor (`runtime up`, a bench, a test)? Then its death is our SIGTERM,
  // even when it was kill -9 and no signal reaches us (runtime/supervisor/parent-link.ts).
  watchParentLink();
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      // help and version exit 0; every usage error exits 2 (commander's message is already printed)
      process.exit(err.exitCode === 0 ? EXIT_CODES.ok : EXIT_CODES.config);
    }
    const failure = describeFailure(err);
    process.stderr.write(`runtime: ${failure.line}\n`);
    process.exit(failure.exitCode);
  }
}

/** Codes of typed errors that mean "something outside this process is not there". */
const UNAVAILABLE_CODES: ReadonlySet<string> = new Set(['unavailable', 'no_instances', 'deadline_exceeded', 'lease_lost']);
/** Node's errno codes with the same meaning, from a bind or connect we did not wrap. */
const UNAVAILABLE_ERRNOS: ReadonlySet<string> = new Set(['EADDRINUSE', 'EADDRNOTAVAIL', 'EACCES', 'ECONNREFUSED', 'ENOTFOUND', 'ETIMEDOUT', 'EHOSTUNREACH']);

/**
 * What to print and which exit code, for an error that ended a command. Expected failures are
 * one line (a stack trace would bury the message); an unexpected one keeps its stack.
 */
export function describeFailure(err: unknown): { line: string; exitCode: ExitCode } {
  if (err instanceof TandemError) {
    const exitCode =
      err.code === 'config_invalid' || err.code === 'invalid_argument' ? EXIT_CODES.config : UNAVAILABLE_CODES.has(err.code) ? EXIT_CODES.unavailable : EXIT_CODES.internal;
    return { line: oneLine(err.message), exitCode };
  }
  const errno = (err as NodeJS.ErrnoException | null)?.code;
  if (err instanceof Error && typeof errno === 'string' && UNAVAILABLE_ERRNOS.has(errno)) return { line: oneLine(err.message), exitCode: EXIT_CODES.unavailable };
  return { line: err instanceof Error ? (err.stack ?? err.message) : String(err), exitCode: EXIT_CODES.internal };
}

/** Messages relayed from gRPC or etcd can span lines or end in an empty note: one clean line. */
function oneLine(message: string): string {
  return message
    .replace(/\s+/g, ' ')
    .replace(/\s*Resolution note:\s*$/, '')
    .trim();
}
