/** Which module provides each subcommand of DESIGN.md's command line. */
import type { Command } from 'commander';
import { registerBenchCommand } from '../bench/loadgen/command.js';
import { registerPlannerCommand } from '../planner/index.js';
import { registerFrontendCommand } from '../frontend/command.js';
import { registerRouterCommand } from '../router/adapters/router-command.js';
import { registerModelCommand } from '../workers/models/index.js';
import { registerWorkerCommand } from '../workers/process/worker-command.js';
import { registerUpCommand } from './up.js';

export function registerCommands(program: Command): void {
  registerUpCommand(program);
  registerFrontendCommand(program);
  registerWorkerCommand(program);
  registerRouterCommand(program);
  registerPlannerCommand(program);
  registerBenchCommand(program);
  registerModelCommand(program);
}
