/** What the machine was doing during a run: benches on a shared box must say so beside their numbers. */
import { readFileSync } from 'node:fs';
import os from 'node:os';

export interface MachineLoad {
  /** `/proc/loadavg` as read (1, 5, 15 minute averages, runnable/total, last pid). */
  loadavg: string;
  cpus: number;
  cpuModel: string;
  node: string;
  at: string;
}

export function machineLoad(): MachineLoad {
  let loadavg: string;
  try {
    loadavg = readFileSync('/proc/loadavg', 'utf8').trim();
  } catch {
    loadavg = os.loadavg().map((x) => x.toFixed(2)).join(' ');
  }
  return { loadavg, cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model ?? 'unknown', node: process.version, at: new Date().toISOString() };
}
