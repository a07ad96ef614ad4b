/**
 * Whether `--kv-disk-cache-dir` can be the disk tier's directory, checked before anything
 * starts: it is a directory this process may write, or it does not exist yet and the nearest
 * existing path above it is one (the store creates the rest). A file there used to surface as
 * a raw `EEXIST … mkdir` stack from the worker, exit 1, restarted forever by `runtime up`.
 * Synchronous and small, so a CLI can call it while it checks its flags.
 */
import { accessSync, constants, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { InvalidArgumentError } from 'commander';
import { ConfigError } from '../../runtime/errors.js';

/** What is wrong with `dir` as a disk tier directory, in words; undefined when it will do. */
export function diskCacheDirProblem(dir: string): string | undefined {
  let path = resolve(dir);
  for (;;) {
    let isDir: boolean;
    try {
      isDir = statSync(path).isDirectory();
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOTDIR') return `${dir} is not a directory: part of its path is a file`;
      if (code !== 'ENOENT') return `${dir} cannot be used (${code ?? 'unreadable'})`;
      const up = dirname(path);
      if (up === path) return `${dir} cannot be created`;
      path = up;
      continue;
    }
    if (!isDir) return path === resolve(dir) ? `${dir} is not a directory (it is a file)` : `${dir} is not a directory: ${path} is a file`;
    try {
      accessSync(path, constants.W_OK | constants.X_OK);
    } catch {
      return path === resolve(dir) ? `${dir} is not writable by this process` : `${dir} cannot be created: ${path} is not writable by this process`;
    }
    return undefined;
  }
}

/**
 * The `--kv-disk-cache-dir` argument parser: the worker's command line (and `TANDEM_KV_DISK_CACHE_DIR`)
 * refuses such a path like any bad value, and so does `runtime up`, which parses the flags it
 * passes to its workers with the worker's own parser before it starts anything.
 */
export function parseDiskCacheDir(value: string): string {
  const problem = diskCacheDirProblem(value);
  if (problem !== undefined) throw new InvalidArgumentError(problem);
  return value;
}

/** Throws the one-line configuration error (exit 2) for a directory the disk tier cannot use. */
export function checkDiskCacheDir(dir: string, flag = '--kv-disk-cache-dir'): void {
  const problem = diskCacheDirProblem(dir);
  if (problem !== undefined) throw new ConfigError(`${flag} ${problem}`);
}
