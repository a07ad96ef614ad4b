import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', '**/*.test.ts'],
    exclude: ['node_modules/**', 'dist/**', 'native/build/**'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Each fork runs its files in turn with one module cache: re-importing the project per file
    // cost about 1 s a file (60 s of a 650 s run on 2 cores). Tests restore what they change
    // (timers, spies, env) in their own hooks.
    isolate: false,
    fileParallelism: true,
    maxWorkers: 2,
  },
});
