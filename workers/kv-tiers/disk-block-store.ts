/**
 * G3's bytes: one file per KV block under a directory, named by the block's chained seq hash.
 *
 *   <hash as 16 hex digits>.kvb = "TKVB" | u32 version (2) | u32 header length | header JSON
 *                                 | block bytes | 32-byte HMAC-SHA256 of everything before it
 *
 * The header carries the model, the KV layout, the dtype, the block size in bytes, the hash,
 * the token ids, the adapter (lora_id) and the reuse count. The tag's key is the directory's
 * own secret (block-file-key.ts, `.tandem-kv-key`, mode 0600): the directory is a trust
 * boundary, and a block someone else wrote (even with a valid CRC, as version 1 used) is never
 * loaded. A file is written under a temporary name and renamed, so a crash leaves a stray temp
 * file (swept at open), never a half file under a block's name; a file that is still short,
 * corrupt, for another model or layout, of another version, or fails its tag is dropped on
 * read, never loaded.
 *
 * Disk work runs on one queue in issue order (a delete never overtakes the write it follows)
 * off the step's critical path. Errors (ENOSPC, a deleted directory) fail that write only; the
 * directory is recreated on the next write.
 */
import { mkdir, open, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { sleepMs } from './block-copier.js';
import { blockTag, loadBlockFileKey, TAG_BYTES, verifyBlockTag, type BlockFileKey } from './block-file-key.js';

export interface DiskBlockStoreConfig {
  dir: string;
  model: string;
  layout: string;
  dtype: string;
  blockBytes: number;
}

export interface DiskBlockInfo {
  hash: bigint;
  tokens: Int32Array;
  reuse: number;
  /** Multi-LoRA: the adapter the block was computed under; absent = the base model. */
  loraId?: number;
}

interface Header {
  model: string;
  layout: string;
  dtype: string;
  blockBytes: number;
  hash: string;
  tokens: number[];
  reuse: number;
  loraId?: number;
}

const MAGIC = 0x424b5654; // "TKVB" little-endian
const VERSION = 2;
const PREFIX = 12;
const SUFFIX = '.kvb';

/** What G3 needs from its storage; DiskBlockStore is the real one, SimulatedDiskStore the mocker's. */
export interface BlockStore {
  readonly numErrors: number;
  open(): Promise<DiskBlockInfo[]>;
  write(hash: bigint, tokens: Int32Array, reuse: number, bytes: Uint8Array, loraId?: number): Promise<boolean>;
  /** The block's bytes, or undefined; a file it refuses is deleted by the store itself. */
  read(hash: bigint, tokens: Int32Array): Promise<Uint8Array | undefined>;
  delete(hash: bigint): Promise<void>;
  flush(): Promise<void>;
}

export class DiskBlockStore implements BlockStore {
  /** Failed writes, reads of bad files, failed deletes. */
  numErrors = 0;
  bytesWritten = 0;
  bytesRead = 0;
  private queue: Promise<unknown> = Promise.resolve();
  private tmpSeq = 0;
  /** The directory's tag key, loaded (or made) once, by `open()` or the first use. */
  private keyLoad: Promise<BlockFileKey> | undefined;

  constructor(readonly config: DiskBlockStoreConfig) {}

  private key(): Promise<BlockFileKey> {
    this.keyLoad ??= mkdir(this.config.dir, { recursive: true }).then(() => loadBlockFileKey(this.config.dir));
    return this.keyLoad;
  }

  fileOf(hash: bigint): string {
    return join(this.config.dir, hash.toString(16).padStart(16, '0') + SUFFIX);
  }

  /**
   * Creates the directory and lists the blocks it holds for this model and layout, least
   * recently written first. Temp files and files of other models or layouts are removed.
   */
  async open(): Promise<DiskBlockInfo[]> {
    await mkdir(this.config.dir, { recursive: true });
    await this.key();
    const found: Array<DiskBlockInfo & { mtime: number }> = [];
    for (const name of await readdir(this.config.dir)) {
      const path = join(this.config.dir, name);
      if (name.includes('.tmp-')) {
        await rm(path, { force: true });
        continue;
      }
      if (!name.endsWith(SUFFIX)) continue;
      const header = await this.readHeader(path).catch(() => undefined);
      if (header === undefined || !this.matches(header) || !/^\d{1,20}$/.test(header.hash) || this.fileOf(BigInt(header.hash)) !== path) {
        this.numErrors++;
        await rm(path, { force: true });
        continue;
      }
      const st = await stat(path);
      const loraId = validLoraId(header.loraId);
      found.push({ hash: BigInt(header.hash), tokens: Int32Array.from(header.tokens), reuse: header.reuse, mtime: st.mtimeMs, ...(loraId !== undefined ? { loraId } : {}) });
    }
    found.sort((a, b) => a.mtime - b.mtime);
    return found.map(({ mtime: _mtime, ...info }) => info);
  }

  /** Queues a block's write; resolves false if it failed (the file is then gone). */
  write(hash: bigint, tokens: Int32Array, reuse: number, bytes: Uint8Array, loraId?: number): Promise<boolean> {
    return this.enqueue(async () => {
      const header = Buffer.from(
        JSON.stringify({ ...this.headerBase(), hash: hash.toString(), tokens: Array.from(tokens), reuse, ...(loraId !== undefined ? { loraId } : {}) } satisfies Header),
        'utf8',
      );
      const end = PREFIX + header.length + bytes.length;
      const data = Buffer.alloc(end + TAG_BYTES);
      data.writeUInt32LE(MAGIC, 0);
      data.writeUInt32LE(VERSION, 4);
      data.writeUInt32LE(header.length, 8);
      header.copy(data, PREFIX);
      data.set(bytes, PREFIX + header.length);
      const file = this.fileOf(hash);
      const tmp = `${file}.tmp-${process.pid}-${this.tmpSeq++}`;
      try {
        data.set(await blockTag(await this.key(), data.subarray(0, end)), end);
        await writeAll(tmp, data).catch(async (err: NodeJS.ErrnoException) => {
          if (err.code !== 'ENOENT') throw err;
          // The directory was deleted under us: recreate it and try once more.
          await mkdir(this.config.dir, { recursive: true });
          await writeAll(tmp, data);
        });
        await rename(tmp, file);
        this.bytesWritten += data.length;
        return true;
      } catch {
        this.numErrors++;
        await rm(tmp, { force: true }).catch(() => undefined);
        return false;
      }
    });
  }

  /**
   * The block's bytes, or undefined when the file is missing, short, corrupt, for another
   * model/layout/dtype, for other tokens, or fails its tag. A file it cannot use is deleted
   * here, once (the tier policy only forgets the block).
   */
  async read(hash: bigint, tokens: Int32Array): Promise<Uint8Array | undefined> {
    const path = this.fileOf(hash);
    let data: Buffer;
    try {
      data = await readFile(path);
    } catch (err) {
      this.numErrors++;
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') void this.delete(hash);
      return undefined;
    }
    const bytes = await this.verify(data, hash, tokens).catch(() => undefined);
    if (bytes === undefined) {
      this.numErrors++;
      void this.delete(hash);
      return undefined;
    }
    this.bytesRead += data.length;
    return bytes;
  }

  /** Queues the removal of a block's file. */
  delete(hash: bigint): Promise<void> {
    return this.enqueue(() => rm(this.fileOf(hash), { force: true }).catch(() => void this.numErrors++));
  }

  /** Resolves when every queued write and delete is done. */
  async flush(): Promise<void> {
    await this.queue;
  }

  private async verify(data: Buffer, hash: bigint, tokens: Int32Array): Promise<Uint8Array | undefined> {
    if (data.length < PREFIX + TAG_BYTES || data.readUInt32LE(0) !== MAGIC || data.readUInt32LE(4) !== VERSION) return undefined;
    const headerLen = data.readUInt32LE(8);
    const end = PREFIX + headerLen + this.config.blockBytes;
    if (data.length !== end + TAG_BYTES) return undefined;
    let header: Header;
    try {
      header = JSON.parse(data.subarray(PREFIX, PREFIX + headerLen).toString('utf8')) as Header;
    } catch {
      return undefined;
    }
    if (!this.matches(header) || header.hash !== hash.toString()) return undefined;
    if (header.tokens.length !== tokens.length || header.tokens.some((t, i) => t !== tokens[i])) return undefined;
    if (!(await verifyBlockTag(await this.key(), data.subarray(end), data.subarray(0, end)))) return undefined;
    return new Uint8Array(data.subarray(PREFIX + headerLen, end));
  }

  private async readHeader(path: string): Promise<Header> {
    const fh = await open(path, 'r');
    try {
      const prefix = Buffer.alloc(PREFIX);
      await fh.read(prefix, 0, PREFIX, 0);
      if (prefix.readUInt32LE(0) !== MAGIC || prefix.readUInt32LE(4) !== VERSION) throw new Error('not a KV block file');
      const len = prefix.readUInt32LE(8);
      if (len > 1 << 20) throw new Error('header too large');
      const header = Buffer.alloc(len);
      const { bytesRead } = await fh.read(header, 0, len, PREFIX);
      if (bytesRead !== len) throw new Error('short header');
      return JSON.parse(header.toString('utf8')) as Header;
    } finally {
      await fh.close();
    }
  }

  private headerBase(): Pick<Header, 'model' | 'layout' | 'dtype' | 'blockBytes'> {
    const { model, layout, dtype, blockBytes } = this.config;
    return { model, layout, dtype, blockBytes };
  }

  private matches(h: Header): boolean {
    const c = this.config;
    return h.model === c.model && h.layout === c.layout && h.dtype === c.dtype && h.blockBytes === c.blockBytes && Array.isArray(h.tokens) && typeof h.hash === 'string';
  }

  private enqueue<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.queue.then(fn, fn);
    this.queue = next.catch(() => undefined);
    return next;
  }
}

function validLoraId(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : undefined;
}

async function writeAll(path: string, data: Buffer): Promise<void> {
  await writeFile(path, data);
}

/**
 * The mocker's G3: no files, only time. A write takes blockBytes over the disk write bandwidth,
 * a read over the read bandwidth (both divided by the speedup ratio); one queue, like a disk.
 */
export class SimulatedDiskStore implements BlockStore {
  readonly numErrors = 0;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly blockBytes: number,
    private readonly bytesPerSec: number,
    private readonly speedupRatio = 1,
  ) {}

  open(): Promise<DiskBlockInfo[]> {
    return Promise.resolve([]);
  }
  write(): Promise<boolean> {
    const next = this.queue.then(() => sleepMs(this.ms()).then(() => true));
    this.queue = next;
    return next;
  }
  async read(): Promise<Uint8Array | undefined> {
    await sleepMs(this.ms());
    return new Uint8Array(0);
  }
  delete(): Promise<void> {
    return Promise.resolve();
  }
  async flush(): Promise<void> {
    await this.queue;
  }
  private ms(): number {
    return ((this.blockBytes / this.bytesPerSec) * 1000) / this.speedupRatio;
  }
}
