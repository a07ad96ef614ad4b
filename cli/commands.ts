/** Which module provides each subcommand of docs/design.md's command line. */
import type { Command } from 'commander';
import { registerBenchCommand } from '../bench/loadgen/index.js';
import { registerPlannerCommand, registerProfileCommand } from '../planner/index.js';
import { registerFrontendCommand } from '../frontend/index.js';
import { registerRouterCommand } from '../router/adapters/index.js';
import { registerModelCommand, resolveModel } from '../workers/index.js';
import { registerBackendsCommand, registerWorkerCommand } from '../workers/index.js';
import { registerUpCommand } from './up.js';

export function registerCommands(program: Command): void {
  registerUpCommand(program);
  registerFrontendCommand(program);
  registerWorkerCommand(program);
  registerRouterCommand(program);
  registerPlannerCommand(program);
  registerProfileCommand(program, { resolveModel: (model) => resolveModel(model, (dir) => process.stderr.write(`runtime profile: generating the tiny model in ${dir}\n`)) });
  registerBenchCommand(program);
  registerModelCommand(program);
  registerBackendsCommand(program);
}
