/** Reads a Mooncake JSONL trace file: the simulator's only file input, and `runtime bench`'s trace. */
import { readFileSync } from 'node:fs';
import { ConfigError } from '../../runtime/errors.js';
import { binTrace, parseMooncakeTrace, type TraceBins, type TraceEntry } from './trace.js';

export function readMooncakeTrace(path: string): TraceEntry[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read trace ${path}: ${(err as Error).message}`);
  }
  return parseMooncakeTrace(text, path);
}

export function readTraceBins(path: string, tickS: number): TraceBins {
  return binTrace(readMooncakeTrace(path), tickS);
}
