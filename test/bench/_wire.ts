import { Command, CommanderError } from 'commander';
import { bindEnvironment } from '../../runtime/config.js';
import { registerBenchCommand } from '../../bench/loadgen/index.js';
const program = new Command('runtime').showHelpAfterError('(run with --help for usage)').enablePositionalOptions();
registerBenchCommand(program);
bindEnvironment(program);
const eo = (c: Command) => { c.exitOverride(); c.commands.forEach(eo); };
eo(program);
try { await program.parseAsync(process.argv); } catch (e) { if (e instanceof CommanderError) { console.error('EXIT', e.exitCode); process.exit(e.exitCode === 0 ? 0 : 2); } throw e; }
