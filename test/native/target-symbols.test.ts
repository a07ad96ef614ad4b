/**
 * The CUDA and the SIMT objects of one build define no function of ours under the same name.
 * Both targets compile the same kernel sources, and a host template instantiated with the same
 * types in both (the launch helpers, with the kernels' argument structs) is one symbol to the
 * linker, which keeps one target's body for both targets' calls: a SIMT launch reached
 * cudaLaunchKernel once such a helper stopped being inlined. Target code lives in its target's
 * namespace (TD_NS); the interfaces' typeinfo is the only thing shared.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';

const BUILD = join(import.meta.dirname, '../../native/build');
const SIMT_DIR = join(BUILD, 'CMakeFiles/tandem_gpu.dir/src/cuda');
const cudaObjects = existsSync(BUILD) ? readdirSync(BUILD).filter((f) => f.endsWith('_cuda.o')).map((f) => join(BUILD, f)) : [];
const simtObjects = existsSync(SIMT_DIR) ? readdirSync(SIMT_DIR).filter((f) => f.endsWith('_simt.cc.o')).map((f) => join(SIMT_DIR, f)) : [];

/** Functions of ours an object defines (text and weak symbols), demangled. */
function definedFunctions(objects: string[]): Set<string> {
  const out = execFileSync('nm', ['-C', '--defined-only', ...objects], { encoding: 'utf8', maxBuffer: 1 << 28 });
  const names = new Set<string>();
  for (const line of out.split('\n')) {
    const m = /^[0-9a-f]+ [TtWw] (.*)$/.exec(line);
    if (m && m[1]!.includes('tandem::') && !/^(typeinfo|vtable)/.test(m[1]!)) names.add(m[1]!);
  }
  return names;
}

// Skipped where the build has no CUDA objects (nvcc not found): then nothing can clash.
it.skipIf(cudaObjects.length === 0)('no function of ours is defined by both the CUDA and the SIMT objects', () => {
  expect(simtObjects.length, `no SIMT objects under ${SIMT_DIR}`).toBeGreaterThanOrEqual(5);
  const cuda = definedFunctions(cudaObjects);
  const simt = definedFunctions(simtObjects);
  // Both sides really define launch helpers (the check is not vacuous).
  expect([...cuda].some((s) => /td::(cuda_target::)?launch/.test(s))).toBe(true);
  expect([...simt].some((s) => /td::(simt_target::)?launch/.test(s))).toBe(true);
  expect([...cuda].filter((s) => simt.has(s))).toEqual([]);
});
