/**
 * Wire encoding of the request plane (proto/request_plane.proto), written by hand so the hot
 * path needs no protobuf runtime: a Request is three length-delimited fields, a Response (and a
 * Subscribe Event) one `bytes payload` field holding a msgpack array of 1..n items. Several
 * items share one message when the writer is ahead of the socket (coalescing), and the client
 * unpacks the array once and yields the items one by one.
 */
import { Packr } from 'msgpackr';

/** The one msgpack codec of the process. Plain maps, no record extension, so any peer can read it. */
export const packr = new Packr({ useRecords: false });

export interface WireRequest {
  path: string;
  requestId: string;
  /** msgpack of the handler's request object. */
  payload: Uint8Array;
}

const TAG_PATH = (1 << 3) | 2;
const TAG_REQUEST_ID = (2 << 3) | 2;
const TAG_PAYLOAD = (3 << 3) | 2;
const TAG_RESPONSE_PAYLOAD = (1 << 3) | 2;

function varintSize(value: number): number {
  let size = 1;
  while (value >= 0x80) {
    value = Math.floor(value / 128);
    size += 1;
  }
  return size;
}

function writeVarint(buf: Buffer, offset: number, value: number): number {
  while (value >= 0x80) {
    buf[offset++] = (value & 0x7f) | 0x80;
    value = Math.floor(value / 128);
  }
  buf[offset++] = value;
  return offset;
}

function fieldSize(length: number): number {
  return 1 + varintSize(length) + length;
}

function writeField(buf: Buffer, offset: number, tag: number, bytes: Uint8Array): number {
  buf[offset++] = tag;
  offset = writeVarint(buf, offset, bytes.length);
  buf.set(bytes, offset);
  return offset + bytes.length;
}

export function encodeRequest(request: WireRequest): Buffer {
  const path = Buffer.from(request.path, 'utf8');
  const requestId = Buffer.from(request.requestId, 'utf8');
  const buf = Buffer.allocUnsafe(fieldSize(path.length) + fieldSize(requestId.length) + fieldSize(request.payload.length));
  let offset = writeField(buf, 0, TAG_PATH, path);
  offset = writeField(buf, offset, TAG_REQUEST_ID, requestId);
  writeField(buf, offset, TAG_PAYLOAD, request.payload);
  return buf;
}

/**
 * Minimal protobuf reader: the caller loops `while (reader.nextField())` and reads
 * `field`, `start`, `end` of each length-delimited field; other wire types are skipped so the
 * schema can grow. Straight-line code, no closures: it runs twice per call.
 */
class FieldReader {
  offset = 0;
  field = 0;
  start = 0;
  end = 0;

  constructor(private readonly buf: Buffer) {}

  private varint(): number {
    const buf = this.buf;
    let byte = buf[this.offset++]!;
    if (byte < 0x80) return byte;
    let value = byte & 0x7f;
    let scale = 128;
    do {
      if (this.offset >= buf.length) throw new RangeError('truncated protobuf varint');
      byte = buf[this.offset++]!;
      value += (byte & 0x7f) * scale;
      scale *= 128;
    } while (byte >= 0x80);
    return value;
  }

  /** Advance to the next length-delimited field; false at the end of the message. */
  nextField(): boolean {
    const buf = this.buf;
    while (this.offset < buf.length) {
      const key = this.varint();
      const wireType = key & 7;
      if (wireType === 2) {
        const length = this.varint();
        this.start = this.offset;
        this.end = this.offset + length;
        if (this.end > buf.length) throw new RangeError('truncated protobuf field');
        this.offset = this.end;
        this.field = Math.floor(key / 8);
        return true;
      }
      if (wireType === 0) this.varint();
      else if (wireType === 1) this.offset += 8;
      else if (wireType === 5) this.offset += 4;
      else throw new RangeError(`unsupported protobuf wire type ${wireType}`);
    }
    return false;
  }
}

export function decodeRequest(buf: Buffer): WireRequest {
  let path = '';
  let requestId = '';
  let payload: Uint8Array = EMPTY_BYTES;
  const reader = new FieldReader(buf);
  while (reader.nextField()) {
    if (reader.field === 1) path = buf.toString('utf8', reader.start, reader.end);
    else if (reader.field === 2) requestId = buf.toString('utf8', reader.start, reader.end);
    else if (reader.field === 3) payload = buf.subarray(reader.start, reader.end);
  }
  return { path, requestId, payload };
}

const EMPTY_BYTES = Buffer.alloc(0);

/** Frame a msgpack-encoded batch as `Response { bytes payload = 1 }`. */
export function frameBatch(packedBatch: Uint8Array): Buffer {
  const buf = Buffer.allocUnsafe(fieldSize(packedBatch.length));
  writeField(buf, 0, TAG_RESPONSE_PAYLOAD, packedBatch);
  return buf;
}

/** Overhead of frameBatch plus gRPC's 5-byte message prefix, for size checks. */
export function framedSize(packedLength: number): number {
  return fieldSize(packedLength);
}

/** Decode a Response/Event into the items it carries. An empty array is a keep-alive/hello. */
export function decodeBatch(buf: Buffer): unknown[] {
  let items: unknown[] = [];
  const reader = new FieldReader(buf);
  while (reader.nextField()) {
    if (reader.field === 1) {
      const value: unknown = packr.unpack(buf.subarray(reader.start, reader.end));
      if (!Array.isArray(value)) throw new TypeError('response payload is not a msgpack array');
      items = value;
    }
  }
  return items;
}

const TAG_TOPIC = (1 << 3) | 2;

/** `SubscribeRequest { string topic = 1 }` */
export function encodeSubscribe(topic: string): Buffer {
  const bytes = Buffer.from(topic, 'utf8');
  const buf = Buffer.allocUnsafe(fieldSize(bytes.length));
  writeField(buf, 0, TAG_TOPIC, bytes);
  return buf;
}

export function decodeSubscribe(buf: Buffer): string {
  let topic = '';
  const reader = new FieldReader(buf);
  while (reader.nextField()) {
    if (reader.field === 1) topic = buf.toString('utf8', reader.start, reader.end);
  }
  return topic;
}
