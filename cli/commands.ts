/** Which module provides each subcommand of DESIGN.md's command line. */
import type { Command } from 'commander';
import { registerModelCommand } from '../workers/models/index.js';
import { addNotBuiltCommand } from './not-built.js';
import { registerUpCommand } from './up.js';

export function registerCommands(program: Command): void {
  registerUpCommand(program);
  addNotBuiltCommand(program, 'frontend', 'OpenAI-compatible HTTP frontend', 'the serving-path issue');
  addNotBuiltCommand(program, 'worker', 'a worker process (mocker or native engine)', 'the serving-path issue');
  addNotBuiltCommand(program, 'router', 'standalone KV router replica', 'the KV router issue');
  addNotBuiltCommand(program, 'planner', 'SLA planner that scales prefill and decode pools', 'the planner issue');
  addNotBuiltCommand(program, 'bench', 'load generator and report', 'the bench issue');
  registerModelCommand(program);
}
