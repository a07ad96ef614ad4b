/** Placeholder action for subcommands whose issue has not landed: say so and exit 2. */
import type { Command } from 'commander';

export function addNotBuiltCommand(program: Command, name: string, summary: string, comingWith: string): void {
  program
    .command(name)
    .description(`${summary} (not built yet)`)
    .allowUnknownOption(true)
    .allowExcessArguments(true)
    .action(() => {
      process.stderr.write(`runtime ${name}: not built yet; it comes with ${comingWith}.\n`);
      process.exit(2);
    });
}
