/**
 * A safetensors file whose data section is a hole: the header (name → shape, f32) is written,
 * the data is not, so a file of gigabytes costs no disk and no time to make. `fileBytes`
 * (default: exactly what the header promises) lets a test make the file disagree with it.
 */
import { open, truncate } from 'node:fs/promises';

export async function writeSparseSafetensors(path: string, tensors: Record<string, readonly number[]>, fileBytes?: number): Promise<void> {
  const header: Record<string, unknown> = {};
  let offset = 0;
  for (const [name, shape] of Object.entries(tensors)) {
    const bytes = shape.reduce((a, b) => a * b, 1) * 4;
    header[name] = { dtype: 'F32', shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const head = Buffer.alloc(8 + json.length);
  head.writeBigUInt64LE(BigInt(json.length), 0);
  head.write(json, 8);
  const f = await open(path, 'w');
  try {
    await f.write(head, 0, head.length, 0);
  } finally {
    await f.close();
  }
  await truncate(path, fileBytes ?? head.length + offset);
}
