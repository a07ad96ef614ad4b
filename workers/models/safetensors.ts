/**
 * safetensors writer and reader. Layout: u64 LE header length N, N bytes of JSON header
 * (`{"__metadata__": {...}, name: {dtype, shape, data_offsets: [begin, end]}}`, padded with
 * spaces to a multiple of 8 so the data section is aligned), then the raw little-endian data.
 * The writer orders tensors by name, so equal inputs give byte-identical files.
 */
import { open, readFile } from 'node:fs/promises';
import { SAFETENSORS_DTYPE_BYTES, bf16BitsToF32, f16BitsToF32, type SafetensorsDtype } from './dtype.js';
import { ModelFormatError } from './errors.js';
import { e4m3ToF32 } from './fp8.js';

export interface TensorData {
  name: string;
  dtype: SafetensorsDtype;
  shape: number[];
  /** Little-endian element bytes, exactly numel(shape) * dtype size long. */
  data: Uint8Array;
}

export interface TensorInfo {
  dtype: SafetensorsDtype;
  shape: number[];
  /** Byte range [begin, end) relative to the start of the data section. */
  dataOffsets: [number, number];
}

export interface SafetensorsHeader {
  metadata: Record<string, string>;
  tensors: Map<string, TensorInfo>;
  /** Absolute file offset of the data section (8 + header length). */
  dataStart: number;
}

/** Header lengths beyond this are refused: a corrupt length would otherwise allocate gigabytes. */
const MAX_HEADER_BYTES = 100 * 1024 * 1024;

export function numel(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

export function encodeSafetensors(tensors: readonly TensorData[], metadata: Record<string, string> = { format: 'pt' }): Buffer {
  const sorted = [...tensors].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const t of sorted) {
    const expected = numel(t.shape) * SAFETENSORS_DTYPE_BYTES[t.dtype];
    if (t.data.length !== expected) {
      throw new ModelFormatError(`tensor ${t.name}: ${t.data.length} bytes, shape ${JSON.stringify(t.shape)} ${t.dtype} needs ${expected}`);
    }
    if (t.name in header) throw new ModelFormatError(`duplicate tensor name ${t.name}`);
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + expected] };
    offset += expected;
  }
  let json = JSON.stringify(header);
  const padded = Math.ceil(Buffer.byteLength(json) / 8) * 8;
  json += ' '.repeat(padded - Buffer.byteLength(json));
  const out = Buffer.alloc(8 + padded + offset);
  out.writeBigUInt64LE(BigInt(padded), 0);
  out.write(json, 8, 'utf8');
  let pos = 8 + padded;
  for (const t of sorted) {
    out.set(t.data, pos);
    pos += t.data.length;
  }
  return out;
}

/**
 * Parse and validate a header from the first bytes of a file. `fileSize`, when known, checks
 * that the data section covers every tensor.
 */
export function parseSafetensorsHeader(bytes: Uint8Array, fileSize?: number): SafetensorsHeader {
  if (bytes.length < 8) throw new ModelFormatError('safetensors: file shorter than 8 bytes');
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLen = Number(view.getBigUint64(0, true));
  if (headerLen > MAX_HEADER_BYTES) throw new ModelFormatError(`safetensors: header length ${headerLen} too large`);
  if (bytes.length < 8 + headerLen) throw new ModelFormatError('safetensors: truncated header');
  let raw: unknown;
  try {
    raw = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset + 8, headerLen).toString('utf8'));
  } catch (cause) {
    throw new ModelFormatError('safetensors: header is not valid JSON', { cause });
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new ModelFormatError('safetensors: header is not an object');
  const metadata: Record<string, string> = {};
  const tensors = new Map<string, TensorInfo>();
  const ranges: Array<[number, number, string]> = [];
  for (const [name, value] of Object.entries(raw as Record<string, unknown>)) {
    if (name === '__metadata__') {
      for (const [k, v] of Object.entries((value ?? {}) as Record<string, unknown>)) metadata[k] = String(v);
      continue;
    }
    const info = value as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    const dtype = info.dtype as SafetensorsDtype;
    if (!(dtype in SAFETENSORS_DTYPE_BYTES)) throw new ModelFormatError(`safetensors: tensor ${name} has unsupported dtype ${String(info.dtype)}`);
    if (!Array.isArray(info.shape) || !info.shape.every((d) => Number.isInteger(d) && d >= 0)) {
      throw new ModelFormatError(`safetensors: tensor ${name} has a bad shape`);
    }
    const offsets = info.data_offsets;
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((o) => Number.isInteger(o) && o >= 0)) {
      throw new ModelFormatError(`safetensors: tensor ${name} has bad data_offsets`);
    }
    const [begin, end] = offsets as [number, number];
    if (end - begin !== numel(info.shape as number[]) * SAFETENSORS_DTYPE_BYTES[dtype]) {
      throw new ModelFormatError(`safetensors: tensor ${name} byte length does not match its shape and dtype`);
    }
    tensors.set(name, { dtype, shape: info.shape as number[], dataOffsets: [begin, end] });
    ranges.push([begin, end, name]);
  }
  // Tensors must tile the data section without holes or overlaps (the format's own rule).
  ranges.sort((a, b) => a[0] - b[0]);
  let cursor = 0;
  for (const [begin, end, name] of ranges) {
    if (begin !== cursor) throw new ModelFormatError(`safetensors: tensor ${name} does not start where the previous one ended`);
    cursor = end;
  }
  const dataStart = 8 + headerLen;
  if (fileSize !== undefined && dataStart + cursor !== fileSize) {
    throw new ModelFormatError(`safetensors: data section is ${fileSize - dataStart} bytes, tensors need ${cursor}`);
  }
  return { metadata, tensors, dataStart };
}

/** Read only the header of a file on disk. */
export async function readSafetensorsHeader(path: string): Promise<SafetensorsHeader> {
  const handle = await open(path, 'r');
  try {
    const { size } = await handle.stat();
    const lenBuf = Buffer.alloc(8);
    await handle.read(lenBuf, 0, 8, 0);
    const headerLen = Number(lenBuf.readBigUInt64LE(0));
    if (headerLen > MAX_HEADER_BYTES || 8 + headerLen > size) throw new ModelFormatError(`safetensors: ${path}: bad header length ${headerLen}`);
    const buf = Buffer.alloc(8 + headerLen);
    await handle.read(buf, 0, buf.length, 0);
    return parseSafetensorsHeader(buf, size);
  } finally {
    await handle.close();
  }
}

/** A whole file in memory with typed accessors; for tests and small models only. */
export class SafetensorsFile {
  private constructor(
    readonly header: SafetensorsHeader,
    private readonly bytes: Uint8Array,
  ) {}

  static fromBytes(bytes: Uint8Array): SafetensorsFile {
    return new SafetensorsFile(parseSafetensorsHeader(bytes, bytes.length), bytes);
  }

  static async read(path: string): Promise<SafetensorsFile> {
    return SafetensorsFile.fromBytes(await readFile(path));
  }

  get names(): string[] {
    return [...this.header.tensors.keys()];
  }

  info(name: string): TensorInfo {
    const info = this.header.tensors.get(name);
    if (!info) throw new ModelFormatError(`safetensors: no tensor named ${name}`);
    return info;
  }

  raw(name: string): Uint8Array {
    const [begin, end] = this.info(name).dataOffsets;
    return this.bytes.subarray(this.header.dataStart + begin, this.header.dataStart + end);
  }

  /** Upcast a float tensor to f32 (F8_E4M3: the e4m3 values, without their scales). */
  float32(name: string): Float32Array {
    const { dtype } = this.info(name);
    const raw = this.raw(name);
    const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    const size = SAFETENSORS_DTYPE_BYTES[dtype];
    const out = new Float32Array(raw.length / size);
    for (let i = 0; i < out.length; i++) {
      if (dtype === 'F32') out[i] = view.getFloat32(4 * i, true);
      else if (dtype === 'BF16') out[i] = bf16BitsToF32(view.getUint16(2 * i, true));
      else if (dtype === 'F16') out[i] = f16BitsToF32(view.getUint16(2 * i, true));
      else if (dtype === 'F8_E4M3') out[i] = e4m3ToF32(raw[i]!);
      else throw new ModelFormatError(`safetensors: tensor ${name} is ${dtype}, not a float type`);
    }
    return out;
  }
}
