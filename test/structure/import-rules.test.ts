/**
 * The folder rules of docs/design.md ("Layout" and "Public surfaces"), read from the code's own
 * imports, so that they cannot drift:
 *   - shipped code reaches another top-level folder only through that folder's public surface
 *     (its index.ts; proto/wire.ts for proto; router/adapters/index.ts for the router's adapters);
 *   - each folder imports only the folders the layout table allows;
 *   - the router core imports no transport (only router/adapters may import runtime/).
 * Tests and benches may import anything: they exercise internals.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../harness/processes.js';

const SHIPPED = ['runtime', 'router', 'workers', 'frontend', 'planner', 'proto', 'cli', 'perf-model', 'grammar'] as const;

/** Layout table: which other top-level folders each folder may import. */
const MAY_IMPORT: Record<string, readonly string[]> = {
  proto: [],
  'perf-model': ['proto', 'runtime'],
  grammar: ['proto', 'runtime'],
  runtime: ['proto'],
  // The latency cost (router/latency-estimator.ts) reads the shared step-time model.
  router: ['proto', 'runtime', 'perf-model'],
  workers: ['proto', 'runtime', 'router', 'native', 'perf-model', 'grammar'],
  frontend: ['proto', 'runtime', 'router', 'grammar'],
  planner: ['proto', 'runtime', 'perf-model'],
  // `runtime bench` is shipped: cli registers it from bench/loadgen.
  cli: ['proto', 'runtime', 'router', 'workers', 'frontend', 'planner', 'native', 'perf-model', 'grammar', 'bench'],
  // native/'s TypeScript binding throws the runtime's typed errors.
  native: ['proto', 'runtime'],
};

/**
 * Public surfaces. `runtime/errors.ts` and `runtime/lru.ts` are light entries: a preprocessing or
 * compile thread, or a pure core, needs the typed errors or the LRU map without loading the
 * whole runtime (gRPC, etcd, NATS clients).
 */
function surfacesOf(top: string): string[] {
  if (top === 'proto') return ['proto/wire.ts'];
  if (top === 'router') return ['router/index.ts', 'router/adapters/index.ts'];
  if (top === 'runtime') return ['runtime/index.ts', 'runtime/errors.ts', 'runtime/lru.ts', 'runtime/random.ts'];
  // grammar/byte-level.ts: GPT-2's byte table for preprocessing threads and the tiny tokenizer, without the engine.
  if (top === 'grammar') return ['grammar/index.ts', 'grammar/byte-level.ts'];
  if (top === 'bench') return ['bench/loadgen/index.ts'];
  return [`${top}/index.ts`];
}

function* sourceFiles(dir: string): Generator<string> {
  let entries: string[];
  try {
    entries = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of entries) {
    const path = join(dir, name);
    if (name === 'node_modules' || name === 'build') continue;
    if (statSync(path).isDirectory()) yield* sourceFiles(path);
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts') && !name.endsWith('.test.ts')) yield path;
  }
}

interface Edge {
  from: string;
  to: string;
}

/** Every relative import/export-from in shipped code, as repository-relative .ts paths. */
function importEdges(): Edge[] {
  const spec = /(?:^|\n)\s*(?:import|export)\s[^;]*?from\s*['"](\.[^'"]+)['"]/g;
  const edges: Edge[] = [];
  const roots = [...SHIPPED.map((top) => join(REPO_ROOT, top)), join(REPO_ROOT, 'native', 'lib')];
  const files = [...roots.flatMap((r) => [...sourceFiles(r)]), join(REPO_ROOT, 'native', 'index.ts')];
  for (const file of files) {
    const from = relative(REPO_ROOT, file);
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(spec)) {
      const to = normalize(join(dirname(from), m[1]!)).replace(/\.js$/, '.ts');
      edges.push({ from, to });
    }
  }
  return edges;
}

const topOf = (path: string) => path.split('/')[0]!;

describe('import rules (docs/design.md "Layout")', () => {
  const edges = importEdges();

  it('finds the shipped code it checks', () => {
    expect(edges.length).toBeGreaterThan(300);
  });

  it('shipped code reaches another folder only through its public surface', () => {
    const deep = edges.filter((e) => topOf(e.from) !== topOf(e.to) && [...SHIPPED, 'bench', 'native'].includes(topOf(e.to)) && !surfacesOf(topOf(e.to)).includes(e.to));
    expect(deep.map((e) => `${e.from} -> ${e.to}`)).toEqual([]);
  });

  it('each folder imports only the folders the layout allows', () => {
    const wrong = edges.filter((e) => {
      const from = topOf(e.from);
      const to = topOf(e.to);
      return from !== to && MAY_IMPORT[from] !== undefined && !MAY_IMPORT[from]!.includes(to);
    });
    expect(wrong.map((e) => `${e.from} -> ${e.to}`)).toEqual([]);
  });

  it('the router core imports no transport: only router/adapters may import runtime/ (its typed errors and seeded generator aside)', () => {
    const wrong = edges.filter((e) => e.from.startsWith('router/') && !e.from.startsWith('router/adapters/') && topOf(e.to) === 'runtime' && e.to !== 'runtime/errors.ts' && e.to !== 'runtime/random.ts');
    expect(wrong.map((e) => `${e.from} -> ${e.to}`)).toEqual([]);
  });
});
