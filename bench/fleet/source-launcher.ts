/**
 * A launcher that runs the CLI from the TypeScript sources through tsx, so a bench measures
 * the working tree without a build (startFleet runs `node <bin> ...`).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { REPO_ROOT } from '../../runtime/supervisor/index.js';

export function sourceLauncher(dir: string): string {
  const file = join(dir, 'runtime-from-source.mjs');
  const tsxApi = pathToFileURL(join(REPO_ROOT, 'node_modules', 'tsx', 'dist', 'esm', 'api', 'index.mjs')).href;
  const mainTs = pathToFileURL(join(REPO_ROOT, 'cli', 'main.ts')).href;
  writeFileSync(file, `import { register } from ${JSON.stringify(tsxApi)};\nregister();\nconst { main } = await import(${JSON.stringify(mainTs)});\nawait main(process.argv);\n`);
  return file;
}
