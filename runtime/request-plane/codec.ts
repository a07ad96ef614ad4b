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

/** Field visitor over a protobuf message; skips unknown fields so the schema can grow. */
function forEachField(buf: Buffer, onBytes: (field: number, start: number, end: number) => void): void {
  let offset = 0;
  while (offset < buf.length) {
    let key = 0;
    let shift = 0;
    let byte: number;
    do {
      byte = buf[offset++]!;
      key += (byte & 0x7f) * 2 ** shift;
      shift += 7;
    } while (byte & 0x80 && offset < buf.length);
    const field = Math.floor(key / 8);
    const wireType = key & 7;
    if (wireType === 2) {
      let length = 0;
      shift = 0;
      do {
        byte = buf[offset++]!;
        length += (byte & 0x7f) * 2 ** shift;
        shift += 7;
      } while (byte & 0x80 && offset < buf.length);
      if (offset + length > buf.length) throw new RangeError('truncated protobuf field');
      onBytes(field, offset, offset + length);
      offset += length;
    } else if (wireType === 0) {
      while (buf[offset++]! & 0x80 && offset < buf.length);
    } else if (wireType === 1) {
      offset += 8;
    } else if (wireType === 5) {
      offset += 4;
    } else {
      throw new RangeError(`unsupported protobuf wire type ${wireType}`);
    }
  }
}

export function decodeRequest(buf: Buffer): WireRequest {
  let path = '';
  let requestId = '';
  let payload: Uint8Array = Buffer.alloc(0);
  forEachField(buf, (field, start, end) => {
    if (field === 1) path = buf.toString('utf8', start, end);
    else if (field === 2) requestId = buf.toString('utf8', start, end);
    else if (field === 3) payload = buf.subarray(start, end);
  });
  return { path, requestId, payload };
}

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
  forEachField(buf, (field, start, end) => {
    if (field === 1) {
      const value: unknown = packr.unpack(buf.subarray(start, end));
      if (!Array.isArray(value)) throw new TypeError('response payload is not a msgpack array');
      items = value;
    }
  });
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
  forEachField(buf, (field, start, end) => {
    if (field === 1) topic = buf.toString('utf8', start, end);
  });
  return topic;
}
