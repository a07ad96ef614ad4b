/**
 * The `runtime` command line. Each subcommand is registered by the part that owns it; this file
 * only assembles them, binds TANDEM_* environment variables to every flag, and maps usage
 * errors to exit code 2.
 */
import { Command, CommanderError } from 'commander';
import { bindEnvironment } from '../runtime/config.js';
import { TandemError } from '../runtime/errors.js';
import { registerCommands } from './commands.js';

export function buildProgram(): Command {
  const program = new Command('runtime')
    .description('Tandem: disaggregated LLM serving. Every flag can also be set as TANDEM_<FLAG_IN_CAPS>.')
    .version(process.env.npm_package_version ?? '0.1.0')
    .showHelpAfterError('(run with --help for usage)')
    .enablePositionalOptions();
  registerCommands(program);
  bindEnvironment(program);
  const exitOverride = (cmd: Command) => {
    cmd.exitOverride();
    cmd.commands.forEach(exitOverride);
  };
  exitOverride(program);
  return program;
}

export async function main(argv: string[]): Promise<void> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      // help and version exit 0; every usage error exits 2 (commander's message is already printed)
      process.exit(err.exitCode === 0 ? 0 : 2);
    }
    if (err instanceof TandemError && (err.code === 'config_invalid' || err.code === 'invalid_argument')) {
      process.stderr.write(`runtime: ${err.message}\n`);
      process.exit(2);
    }
    process.stderr.write(`runtime: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  }
}
