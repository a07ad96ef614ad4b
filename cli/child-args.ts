/**
 * A command that starts other `runtime` subcommands as children (`runtime up`) passes flags on
 * to them: unknown flags to the frontend, engine flags to every worker. A bad one must fail the
 * parent before anything starts (exit 2, one line naming the flag), not a child that dies at
 * start-up while its siblings already run. So each child's argument list is parsed here by the
 * child's own command, exactly as the child will parse it, without running it; the TANDEM_*
 * variables the child inherits are checked the same way.
 */
import { CommanderError, type Command } from 'commander';
import { ConfigError } from '../runtime/errors.js';
import { applyEnvironment } from '../runtime/index.js';

/**
 * Throws a ConfigError (exit 2) naming the first flag `subcommand` of `program` would refuse in
 * `args`; `origin` says where the flags came from, for the message. Returns the values the child
 * would run with (flags, then its TANDEM_* variables, then defaults), for the checks between
 * flags (runtime/flag-rules.ts). The subcommand's parsed values are left behind on it: call this
 * only in a process that will not run that subcommand. Each call starts from the command's
 * defaults (commander's saved state), so calls for several command lines do not mix.
 */
export function checkChildArgs(program: Command, subcommand: string, args: string[], origin: string): Record<string, unknown> {
  const child = program.commands.find((c) => c.name() === subcommand);
  if (!child) throw new Error(`no '${subcommand}' command to check its arguments with`);
  // Commander reports a refused value by printing it and exiting: here it throws, silently.
  child.exitOverride().configureOutput({ writeOut: () => undefined, writeErr: () => undefined, outputError: () => undefined });
  if (parsedBefore.has(child)) child.restoreStateBeforeParse();
  else {
    child.saveStateBeforeParse();
    parsedBefore.add(child);
  }
  const { operands, unknown } = refused(() => child.parseOptions(args), origin);
  if (unknown.length > 0) throw new ConfigError(`unknown option '${unknown[0]}' (${origin}; \`runtime ${subcommand} --help\` lists its options)`);
  if (operands.length > 0) throw new ConfigError(`unexpected argument '${operands[0]}' (${origin})`);
  refused(() => applyEnvironment(child), `the ${subcommand} would inherit it`);
  return child.opts();
}

/** Commands checked before in this process: their state before the first check is saved. */
const parsedBefore = new WeakSet<Command>();

/** `parse()`, with commander's refusal as a ConfigError (one line, exit 2) saying where the flag came from. */
function refused<T>(parse: () => T, origin: string): T {
  try {
    return parse();
  } catch (err) {
    if (err instanceof CommanderError) throw new ConfigError(`${err.message.replace(/^error: /, '')} (${origin})`);
    throw err;
  }
}
