/**
 * The sliced parse of large bodies (frontend/http/json-sliced-parse.ts) against JSON.parse: for
 * any JSON text, cut into pieces of any size, the same value or the same refusal.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseJsonSliced } from '../../frontend/http/json-sliced-parse.js';

const sliced = (text: string, pieceBytes: number) => parseJsonSliced(Buffer.from(text), { depthLimit: 64, pieceBytes, sliceMs: 1 });

/** What JSON.parse says of `text`: the value (as canonical text, own `__proto__` included) or a refusal. */
function reference(text: string): { ok: true; json: string } | { ok: false } {
  try {
    return { ok: true, json: JSON.stringify(JSON.parse(text)) };
  } catch {
    return { ok: false };
  }
}

async function check(text: string, pieceBytes: number): Promise<void> {
  const got = await sliced(text, pieceBytes);
  const want = reference(text);
  if (!want.ok) {
    expect(got.ok, `${JSON.stringify(text)} piece ${pieceBytes}`).toBe(false);
    return;
  }
  expect(got.ok, `${JSON.stringify(text)} piece ${pieceBytes}: ${JSON.stringify(got)}`).toBe(true);
  if (got.ok) expect(JSON.stringify(got.value)).toBe(want.json);
}

describe('parseJsonSliced equals JSON.parse', () => {
  it('worked cases: nesting, empty containers, duplicate keys (last wins, first position), __proto__ as an own key', async () => {
    for (const text of [
      '{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}],"n":1}',
      '[ [ ], { }, [1, [2, [3, {"a": [4]}]]], "x,]}" ]',
      '{"a": 1, "b": {"c": [1, 2, 3]}, "a": {"d": 2}}',
      '{"__proto__": {"polluted": true}, "k": [1, 2, 3, 4, 5, 6]}',
      '  [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]  \n',
    ]) {
      for (const piece of [1, 4, 16, 1024]) await check(text, piece);
    }
    const proto = await sliced('{"__proto__": {"polluted": true}, "k": [1, 2, 3, 4, 5, 6]}', 4);
    expect(proto.ok && Object.getPrototypeOf(proto.value)).toBe(Object.prototype);
    expect(proto.ok && Object.hasOwn(proto.value as object, '__proto__')).toBe(true);
  });

  it('refuses what JSON.parse refuses: trailing commas, missing values, mismatched brackets, text after the value', async () => {
    for (const text of ['[1, 2, ]', '[ , [1, 2, 3]]', '[[1, 2, 3], ]', '{"a": [1, 2, 3] "b": 1}', '{"a" [1, 2, 3]}', '[1, 2, 3}', '{"a": [1, 2, 3]} x', '[[1, 2, 3] [4, 5, 6]]', '{"a": 1,}', '[1 2 3 4 5 6]']) {
      for (const piece of [1, 4, 16]) await check(text, piece);
    }
  });

  it('any JSON value, pretty or compact, cut at any piece size (fast-check)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.jsonValue({ maxDepth: 5 }), fc.constantFrom(undefined, 1, '\t'), fc.integer({ min: 1, max: 64 }), async (value, indent, piece) => {
        await check(JSON.stringify(value, null, indent), piece);
      }),
      { numRuns: 400, seed: 23 },
    );
  });

  it('strings decoded in pieces: escapes, multi-byte characters and surrogate pairs cut anywhere (fast-check)', async () => {
    const piece = fc.constantFrom('a', 'é', '€', '😀', '\\', '"', '\n', '\u0001', '/', ' ', '\u2028');
    const text = fc.array(piece, { maxLength: 40 }).map((p) => p.join(''));
    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(text, text), { maxLength: 4 }), text, fc.integer({ min: 1, max: 24 }), fc.boolean(), async (members, lone, pieceBytes, asArray) => {
        const value = asArray ? [lone, ...members.flat()] : Object.fromEntries([['k', lone], ...members]);
        let json = JSON.stringify(value);
        // Escaped forms too: \uXXXX for every non-ASCII character, pairs for astral ones.
        if (lone.length % 2 === 0) json = json.replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
        await check(json, pieceBytes);
        await check(JSON.stringify(lone), pieceBytes);
      }),
      { numRuns: 500, seed: 23 },
    );
  });

  it('any JSON text with one character deleted or inserted: the same verdict as JSON.parse (fast-check)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.jsonValue({ maxDepth: 4 }),
        fc.nat(),
        fc.constantFrom('', ',', ']', '}', '[', '{', ':', '"', ' ', '1', 'x'),
        fc.integer({ min: 1, max: 32 }),
        async (value, at, insert, piece) => {
          const text = JSON.stringify(value, null, 1);
          const i = text.length === 0 ? 0 : at % text.length;
          const mutated = insert === '' ? text.slice(0, i) + text.slice(i + 1) : text.slice(0, i) + insert + text.slice(i);
          await check(mutated, piece);
        },
      ),
      { numRuns: 600, seed: 23 },
    );
  });
});
