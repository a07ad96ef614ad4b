/**
 * Reads a perf profile JSON file (format: PerfProfile in perf-model.ts) into a model. The only
 * I/O of the mocker; kept apart so the timing model stays pure.
 */
import { readFile } from 'node:fs/promises';
import { ConfigError } from '../../../runtime/errors.js';
import { perfModelFromProfile, type InterpolatedPerfModel } from './perf-model.js';

export async function loadPerfProfile(path: string): Promise<InterpolatedPerfModel> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`perf profile ${path}: cannot read (${(err as Error).message})`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new ConfigError(`perf profile ${path}: invalid JSON (${(err as Error).message})`);
  }
  return perfModelFromProfile(raw);
}
