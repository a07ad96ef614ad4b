/**
 * A minimal WebAssembly binary encoder: just enough to write `xxh3-wasm.ts` as readable folded
 * expressions (like WAT's `(i64.xor (local.get 0) (i64.const …))`) and emit the module bytes at
 * load time. No toolchain, no committed binary blob: the source of the hash is this repo's TS.
 *
 * Every helper returns the instruction bytes of one expression; operands come first (stack
 * order), so `xor64(a, b)` is `[...a, ...b, i64.xor]`.
 */

export type Code = number[];

export const I32 = 0x7f;
export const I64 = 0x7e;

export function uleb(n: number): Code {
  const out: Code = [];
  do {
    let byte = n & 0x7f;
    n >>>= 7;
    if (n !== 0) byte |= 0x80;
    out.push(byte);
  } while (n !== 0);
  return out;
}

/** Signed LEB128 of a 64-bit value (u64 constants are written as their i64 bit pattern). */
export function sleb(v: bigint): Code {
  let x = BigInt.asIntN(64, v);
  const out: Code = [];
  for (;;) {
    const byte = Number(x & 0x7fn);
    x >>= 7n;
    const done = (x === 0n && (byte & 0x40) === 0) || (x === -1n && (byte & 0x40) !== 0);
    out.push(done ? byte : byte | 0x80);
    if (done) return out;
  }
}

const name = (s: string): Code => [...uleb(s.length), ...Buffer.from(s, 'utf8')];
const vec = (items: Code[]): Code => [...uleb(items.length), ...items.flat()];
const section = (id: number, body: Code): Code => [id, ...uleb(body.length), ...body];

// ---- expressions ----
export const get = (i: number): Code => [0x20, ...uleb(i)];
export const set = (i: number, v: Code): Code => [...v, 0x21, ...uleb(i)];
export const i32c = (v: number): Code => [0x41, ...sleb(BigInt(v))];
export const i64c = (v: bigint): Code => [0x42, ...sleb(v)];
const bin = (op: number) => (a: Code, b: Code): Code => [...a, ...b, op];
export const add32 = bin(0x6a);
export const sub32 = bin(0x6b);
export const leU32 = bin(0x4d);
export const gtU32 = bin(0x4b);
export const eqz32 = (a: Code): Code => [...a, 0x45];
export const add64 = bin(0x7c);
export const mul64 = bin(0x7e);
export const and64 = bin(0x83);
export const or64 = bin(0x84);
export const xor64 = bin(0x85);
export const shl64 = bin(0x86);
export const shrU64 = bin(0x88);
export const rotl64 = bin(0x89);
export const extendU32 = (a: Code): Code => [...a, 0xad];
/** i64.load / i64.store with a static byte offset (alignment hint 8; unaligned is legal). */
export const load64 = (addr: Code, offset = 0): Code => [...addr, 0x29, 3, ...uleb(offset)];
export const store64 = (addr: Code, v: Code, offset = 0): Code => [...addr, ...v, 0x37, 3, ...uleb(offset)];
export const call = (fn: number, ...args: Code[]): Code => [...args.flat(), 0x10, ...uleb(fn)];
export const ret = (v: Code = []): Code => [...v, 0x0f];
/** `if` without a value. */
export const when = (cond: Code, then: Code[]): Code => [...cond, 0x04, 0x40, ...then.flat(), 0x0b];
/** `if … else …` producing an i64. */
export const select64 = (cond: Code, then: Code, otherwise: Code): Code => [...cond, 0x04, I64, ...then, 0x05, ...otherwise, 0x0b];
/** `while (!exitWhen) body`: block { loop { br_if 1 exitWhen; body; br 0 } }. */
export const loopUntil = (exitWhen: Code, body: Code[]): Code => [0x02, 0x40, 0x03, 0x40, ...exitWhen, 0x0d, 1, ...body.flat(), 0x0c, 0, 0x0b, 0x0b];

export interface FuncDef {
  params: number[];
  results: number[];
  /** Extra locals after the params, by type. */
  locals: number[];
  body: Code[];
  export?: string;
}

/** A module importing one memory as `env.mem` and defining `funcs` (indexed in order). */
export function encodeModule(funcs: readonly FuncDef[]): Uint8Array {
  const types = section(1, vec(funcs.map((f) => [0x60, ...vec(f.params.map((t) => [t])), ...vec(f.results.map((t) => [t]))])));
  const imports = section(2, vec([[...name('env'), ...name('mem'), 0x02, 0x00, ...uleb(1)]]));
  const functions = section(3, vec(funcs.map((_, i) => uleb(i))));
  const exported = funcs.flatMap((f, i) => (f.export === undefined ? [] : [[...name(f.export), 0x00, ...uleb(i)]]));
  const exports = section(7, vec(exported));
  const bodies = funcs.map((f) => {
    const locals = vec(f.locals.map((t) => [1, t]));
    const code = [...locals, ...f.body.flat(), 0x0b];
    return [...uleb(code.length), ...code];
  });
  const codeSection = section(10, vec(bodies));
  return Uint8Array.from([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, ...types, ...imports, ...functions, ...exports, ...codeSection]);
}
