#!/usr/bin/env node
// Thin launcher: the CLI is compiled TypeScript under dist/. A missing build is the most
// common first-run mistake, so say how to fix it instead of printing a stack trace.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const entry = join(root, 'dist', 'cli', 'main.js');
if (!existsSync(entry)) {
  process.stderr.write(`runtime: ${entry} is missing; run \`npm install\` (or \`npm run build\`) in ${root}\n`);
  process.exit(2);
}
const { main } = await import(pathToFileURL(entry).href);
await main(process.argv);
