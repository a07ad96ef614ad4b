/**
 * Reads a profile JSON file (schema: profile.ts, README.md) into a model. The folder's only
 * I/O, kept apart so the models stay pure.
 */
import { readFile } from 'node:fs/promises';
import { PerfProfileError } from './errors.js';
import type { InterpolatedPerfModel } from './interpolated.js';
import { perfModelFromProfile } from './profile.js';

export async function loadPerfProfile(path: string): Promise<InterpolatedPerfModel> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new PerfProfileError(`perf profile ${path}: cannot read (${(err as Error).message})`, { cause: err });
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new PerfProfileError(`perf profile ${path}: invalid JSON (${(err as Error).message})`, { cause: err });
  }
  try {
    return perfModelFromProfile(raw);
  } catch (err) {
    if (err instanceof PerfProfileError) throw new PerfProfileError(`${path}: ${err.message}`, { cause: err });
    throw err;
  }
}
