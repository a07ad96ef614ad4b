/**
 * One of each (issue 23, "Structure"): helpers that had drifted into several private copies now
 * live once, and this reads the shipped code so a new copy fails here instead of in review.
 *   - GPT-2's byte↔unicode table: grammar/byte-level.ts;
 *   - `isObject`: proto/json.ts;
 *   - the planner's pool names: POOL_NAMES in planner/policy/observation.ts;
 *   - the seeded random generator: runtime/random.ts (shipped code and benches);
 *   - the bounded LRU/oldest-first map: LruMap in runtime/lru.ts.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../harness/processes.js';

const SHIPPED = ['runtime', 'router', 'workers', 'frontend', 'planner', 'proto', 'cli', 'perf-model', 'grammar', 'bench', 'native/lib'];

function* sources(dir: string): Generator<string> {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    const path = join(dir, name);
    if (name === 'node_modules' || name === 'build' || name === 'results') continue;
    if (statSync(path).isDirectory()) yield* sources(path);
    else if (name.endsWith('.ts') && !name.endsWith('.test.ts')) yield path;
  }
}

const files = SHIPPED.flatMap((d) => [...sources(join(REPO_ROOT, d))]).map((p) => ({ path: relative(REPO_ROOT, p), text: readFileSync(p, 'utf8') }));

function holders(test: (text: string) => boolean): string[] {
  return files.filter((f) => test(f.text)).map((f) => f.path).sort();
}

describe('one of each', () => {
  it('reads the shipped code', () => {
    expect(files.length).toBeGreaterThan(100);
  });

  it("GPT-2's byte table is built once (grammar/byte-level.ts)", () => {
    // The table's signature: the printable Latin-1 ranges 0xa1..0xac and 0xae..0xff.
    expect(holders((t) => /0xa1\b/.test(t) && /0xac\b/.test(t) && /0xae\b/.test(t))).toEqual(['grammar/byte-level.ts']);
  });

  it('isObject is defined once (proto/json.ts)', () => {
    expect(holders((t) => /\b(function|const|let)\s+isObject\b/.test(t))).toEqual(['proto/json.ts']);
  });

  it('one seeded random generator (runtime/random.ts): no other xoshiro, mulberry32 or xorshift step', () => {
    // Each generator's signature constants: xoshiro128**'s `<< 9` and rotl 11, mulberry32's 0x6d2b79f5, xorshift's 13/17/5.
    const step = (t: string) => /0x6d2b79f5/i.test(t) || (/<< 9\b/.test(t) && /\b11\)/.test(t)) || (/<< 13;/.test(t) && />>> 17;/.test(t));
    expect(holders(step)).toEqual(['runtime/random.ts']);
  });

  it('one bounded map (runtime/lru.ts): no other Map trimmed by hand from its oldest key', () => {
    expect(holders((t) => /\.keys\(\)\.next\(\)\.value/.test(t))).toEqual([]);
  });

  it("the planner spells its pool names once (POOL_NAMES)", () => {
    const spelt = /\[\s*'agg',\s*'prefill',\s*'decode'\s*\]/;
    expect(holders((t) => spelt.test(t)).filter((p) => p.startsWith('planner/'))).toEqual(['planner/policy/observation.ts']);
  });
});
