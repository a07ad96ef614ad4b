/** Reads a Mooncake JSONL trace file into bins: the simulator's only file input. */
import { readFileSync } from 'node:fs';
import { ConfigError } from '../../runtime/errors.js';
import { binTrace, parseMooncakeTrace, type TraceBins } from './trace.js';

export function readTraceBins(path: string, tickS: number): TraceBins {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read trace ${path}: ${(err as Error).message}`);
  }
  return binTrace(parseMooncakeTrace(text, path), tickS);
}
