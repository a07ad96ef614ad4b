/**
 * `runtime backends`: which native backends this machine can run, and why not. `cuda` is
 * listed as available only when the addon was built with nvcc and a CUDA driver and a GPU are
 * present; otherwise the line says which of those is missing. Under each available backend, the
 * FP8 paths it runs here (FP8 tensor cores or W8A16, the e4m3 KV cache).
 */
import type { Command } from 'commander';
import { loadAddon } from '../../native/index.js';

export function registerBackendsCommand(program: Command): void {
  program
    .command('backends')
    .description('native engine backends on this machine (cpu, cuda) and why one is unavailable')
    .option('--json', 'print JSON instead of a table')
    .action((flags: { json?: boolean }) => {
      const status = loadAddon().backendStatus();
      if (flags.json === true) {
        process.stdout.write(`${JSON.stringify(status, null, 2)}\n`);
        return;
      }
      const width = Math.max(...status.map((s) => s.name.length));
      for (const s of status) {
        const what = s.available ? `available${s.detail !== undefined ? `: ${s.detail}` : ''}` : `unavailable: ${s.reason ?? 'unknown reason'}`;
        process.stdout.write(`${s.name.padEnd(width)}  ${what}\n`);
        if (s.fp8 !== undefined) process.stdout.write(`${''.padEnd(width)}  FP8: ${s.fp8}\n`);
      }
    });
}
