/**
 * Where a flag's environment variable is not `TANDEM_<FLAG>`. Every flag reads
 * `TANDEM_<FLAG_IN_CAPS>` (runtime/config.ts), so two commands with a flag of the same name and
 * different meanings would read one variable two ways: `TANDEM_MODE=load` meant for the planner
 * would make every worker refuse to start, and `TANDEM_LORA=2` meant for make-tiny would be read
 * by `up`'s workers as an adapter named "2". The serving commands keep the plain name (`worker
 * --mode`, `up`/`worker --lora`, the flags a deployment sets); the other command's flag reads a
 * name that carries its command. `--help` shows each flag's variable.
 */
import type { Command } from 'commander';

export interface EnvNameException {
  /** The command as typed, without `runtime`: `planner simulate`. */
  command: string;
  flag: string;
  env: string;
}

export const ENV_NAME_EXCEPTIONS: readonly EnvNameException[] = [
  { command: 'planner', flag: '--mode', env: 'TANDEM_PLANNER_MODE' },
  { command: 'planner simulate', flag: '--mode', env: 'TANDEM_PLANNER_MODE' },
  { command: 'model make-tiny', flag: '--lora', env: 'TANDEM_MAKE_TINY_LORA' },
];

/** Give the flags of the table their variables; call before `bindEnvironment` (which names the rest). */
export function applyEnvNameExceptions(program: Command, exceptions: readonly EnvNameException[] = ENV_NAME_EXCEPTIONS): void {
  for (const e of exceptions) {
    let cmd: Command | undefined = program;
    for (const name of e.command.split(' ')) cmd = cmd?.commands.find((c) => c.name() === name);
    const option = cmd?.options.find((o) => o.long === e.flag);
    // A renamed flag or command must not silently fall back to the ambiguous name.
    if (!option) throw new Error(`env name exception for '${e.command} ${e.flag}': no such flag`);
    option.env(e.env);
  }
}
