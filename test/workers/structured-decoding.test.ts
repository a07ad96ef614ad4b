/**
 * Structured output in the worker: the engine loop masks each constrained sequence's sample
 * with its grammar, the mocker picks only allowed tokens, EOS only where the grammar accepts,
 * closing mode finishes within max_tokens, and max_tokens mid-structure is "length". The
 * grammar here is a toy DFA (structured-fixtures.ts); the real engine runs in the e2e test.
 */
import { describe, expect, it } from 'vitest';
import { EngineLoop } from '../../workers/engine-loop/engine-loop.js';
import { CLOSING_SLACK_TOKENS } from '../../workers/engine-loop/structured-decoding.js';
import { MockerEngine } from '../../workers/engines/mocker/mocker-engine.js';
import { nextAllowedToken } from '../../workers/engines/mocker/tokens.js';
import type { StepBatch, StepResult } from '../../workers/engines/engine.js';
import type { PreprocessedRequest, TokenDelta } from '../../proto/wire.js';
import type { StructuredOutputSpec } from '../../proto/structured-output.js';
import { TandemError } from '../../runtime/errors.js';
import { DfaMatcher, TOY_EOS, TOY_VOCAB, choiceDfa, decodeToy, toyProvider } from './structured-fixtures.js';

function maskOf(ids: number[], words = 9): Uint32Array {
  const m = new Uint32Array(words);
  for (const id of ids) m[id >>> 5]! |= 1 << (id & 31);
  return m;
}

/** A mocker whose every step's batch is recorded, so tests can check each mask was honoured. */
class RecordingMocker extends MockerEngine {
  readonly seen: Array<{ batch: StepBatch; result: StepResult; masks: Map<number, Uint32Array> }> = [];
  override async step(batch: StepBatch): Promise<StepResult> {
    const result = await super.step(batch);
    // The mocker filled the masks (prepareSampling) during its step; copy them before the
    // loop rewrites them next step.
    const masks = new Map<number, Uint32Array>();
    for (const s of batch.sequences) if (s.allowedTokens) masks.set(s.seqId, s.allowedTokens.slice());
    this.seen.push({ batch, result, masks });
    return result;
  }
}

function toyLoop(): { loop: EngineLoop; engine: RecordingMocker } {
  const engine = new RecordingMocker({ numBlocks: 256, blockSize: 16, vocabSize: TOY_VOCAB, speedupRatio: 1e6, eosTokenIds: [TOY_EOS] });
  return { engine, loop: new EngineLoop({ engine, grammar: toyProvider }) };
}

function req(id: string, maxTokens: number, structured?: StructuredOutputSpec, extra: Partial<PreprocessedRequest> = {}): PreprocessedRequest {
  return {
    requestId: id,
    model: 'toy',
    tokenIds: [10, 11, 12],
    sampling: {},
    stop: { maxTokens, stopTokenIds: [TOY_EOS], ignoreEos: false },
    ...(structured ? { structured } : {}),
    ...extra,
  };
}

async function run(loop: EngineLoop, r: PreprocessedRequest): Promise<{ ids: number[]; finish: string | undefined }> {
  const deltas: TokenDelta[] = [];
  for await (const d of loop.generate(r, new AbortController().signal)) deltas.push(d);
  return { ids: deltas.flatMap((d) => d.tokenIds), finish: deltas[deltas.length - 1]?.finishReason };
}

describe('mocker: nextAllowedToken', () => {
  it('keeps its own token when allowed, else the first allowed after it, wrapping', () => {
    const m = maskOf([3, 40, 200]);
    expect(nextAllowedToken(m, 40, TOY_VOCAB, [])).toBe(40);
    expect(nextAllowedToken(m, 41, TOY_VOCAB, [])).toBe(200);
    expect(nextAllowedToken(m, 201, TOY_VOCAB, [])).toBe(3); // wraps past the end
    expect(nextAllowedToken(m, 0, TOY_VOCAB, [])).toBe(3);
  });

  it('skips EOS while anything else is allowed; takes EOS when it is all that is left', () => {
    expect(nextAllowedToken(maskOf([TOY_EOS, 5]), 6, TOY_VOCAB, [TOY_EOS])).toBe(5); // wraps past EOS to 5
    expect(nextAllowedToken(maskOf([TOY_EOS]), 7, TOY_VOCAB, [TOY_EOS])).toBe(TOY_EOS);
    // An EOS the mocker was asked for (eosAfterTokens / the EOS seed) stands where the grammar allows it.
    expect(nextAllowedToken(maskOf([TOY_EOS, 5]), TOY_EOS, TOY_VOCAB, [TOY_EOS])).toBe(TOY_EOS);
  });
});

describe('EngineLoop with a grammar (mocker)', () => {
  it('a choice request outputs exactly one choice, every token inside its mask, and stops', async () => {
    const { loop, engine } = toyLoop();
    const choices = ['yes', 'no', 'maybe later'];
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => run(loop, req(`c${i}`, 50, { kind: 'choice', choices }, { sampling: { seed: 1000 + i } }))),
    );
    for (const r of results) {
      expect(choices).toContain(decodeToy(r.ids));
      expect(r.finish).toBe('stop');
    }
    let checked = 0;
    for (const { result, masks } of engine.seen) {
      for (const t of result.sampled) {
        const m = masks.get(t.seqId);
        expect(m, 'every constrained sample had a mask').toBeDefined();
        expect((m![t.tokenId >>> 5]! >>> (t.tokenId & 31)) & 1).toBe(1);
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(12);
    await loop.close();
  });

  it('EOS only where the grammar accepts: x+ runs on (EOS withheld) until closing mode ends it within max_tokens', async () => {
    const { loop, engine } = toyLoop();
    const r = await run(loop, req('plus', 40, { kind: 'regex', pattern: 'x+' }));
    // The mocker never picks EOS while "x" is allowed. Closing starts once the tokens left
    // (40 − k) are ≤ minBytes (0) + 1 (EOS) + slack: k = 40 − 1 − slack x's, then only EOS.
    const numX = 40 - 1 - CLOSING_SLACK_TOKENS;
    expect(r.ids.slice(0, -1)).toEqual(new Array(numX).fill('x'.charCodeAt(0)));
    expect(r.ids[r.ids.length - 1]).toBe(TOY_EOS);
    expect(r.finish).toBe('stop');
    // Before the output could end, EOS was never in the mask.
    const first = engine.seen.find((s) => s.masks.size > 0)!;
    const m0 = [...first.masks.values()][0]!;
    expect((m0[TOY_EOS >>> 5]! >>> (TOY_EOS & 31)) & 1).toBe(0);
    await loop.close();
  });

  it('closing mode: a long open choice finishes on its shortest completion when the budget runs low', async () => {
    const { loop } = toyLoop();
    // Budget 19 = 2 + 1 + slack: closing from the start, so closing is on at once and keeps to the
    // shortest completion; without it the mocker could wander into the 11-byte choice and stop
    // on "length".
    const r = await run(loop, req('close', 19, { kind: 'choice', choices: ['ab', 'abcdefghijk'] }));
    expect(decodeToy(r.ids)).toBe('ab');
    expect(r.finish).toBe('stop');
    await loop.close();
  });

  it('max_tokens reached mid-structure ends with "length"', async () => {
    const { loop } = toyLoop();
    const r = await run(loop, req('len', 3, { kind: 'choice', choices: ['abcdefghij'] }));
    expect(r.finish).toBe('length');
    expect(r.ids).toHaveLength(3);
    expect('abcdefghij'.startsWith(decodeToy(r.ids))).toBe(true);
    await loop.close();
  });

  it('a spec the worker cannot compile fails only that request with invalid_argument; the loop keeps serving', async () => {
    const { loop } = toyLoop();
    const bad = run(loop, req('bad', 5, { kind: 'json_object' }));
    await expect(bad).rejects.toBeInstanceOf(TandemError);
    await expect(bad).rejects.toMatchObject({ code: 'invalid_argument' });
    const [ok, plain] = await Promise.all([run(loop, req('ok', 20, { kind: 'choice', choices: ['red', 'green'] })), run(loop, req('plain', 5))]);
    expect(['red', 'green']).toContain(decodeToy(ok.ids));
    expect(plain.ids).toHaveLength(5);
    expect(plain.finish).toBe('length');
    await loop.close();
  });

  it('unconstrained sequences in the same batch get no mask and their usual tokens', async () => {
    const { loop, engine } = toyLoop();
    const alone = await run(loop, req('u', 6, undefined, { sampling: { seed: 77 } }));
    const [mixed] = await Promise.all([run(loop, req('u2', 6, undefined, { sampling: { seed: 77 } })), run(loop, req('c', 6, { kind: 'regex', pattern: 'q+' }))]);
    expect(mixed.ids).toEqual(alone.ids);
    expect(engine.seen.some((s) => s.batch.sequences.length === 2 && s.batch.sequences.some((q) => q.allowedTokens === undefined))).toBe(true);
    await loop.close();
  });

  it('decode side: prior output tokens (the prefill worker\'s first token) are replayed through the matcher', async () => {
    const { loop } = toyLoop();
    // Prompt ends with "y" generated earlier: only "yes" fits, so the rest must be "es".
    const r = await run(loop, req('d', 10, { kind: 'choice', choices: ['yes', 'no'] }, { tokenIds: [10, 11, 'y'.charCodeAt(0)], numPriorOutputTokens: 1 }));
    expect(decodeToy(r.ids)).toBe('es');
    expect(r.finish).toBe('stop');
    // A prior token the grammar rejects is a bad request, not a crash.
    await expect(run(loop, req('d2', 10, { kind: 'choice', choices: ['yes'] }, { tokenIds: [10, 'n'.charCodeAt(0)], numPriorOutputTokens: 1 }))).rejects.toMatchObject({
      code: 'invalid_argument',
    });
    await loop.close();
  });

  it('prefill-only run: its one token is masked, and closing mode uses the whole request budget', async () => {
    const { loop } = toyLoop();
    const r = await run(loop, req('p', 50, { kind: 'choice', choices: ['zebra'] }, { prefillOnly: true }));
    expect(r.ids).toEqual(['z'.charCodeAt(0)]);
    expect(r.finish).toBe('length');
    await loop.close();
  });

  it('a matcher that throws fails only its own request; the other sequences in the batch finish', async () => {
    const engine = new MockerEngine({ numBlocks: 256, blockSize: 16, vocabSize: TOY_VOCAB, speedupRatio: 1e6, eosTokenIds: [TOY_EOS] });
    const flaky = {
      vocabSize: TOY_VOCAB,
      matcherFor: (spec: StructuredOutputSpec) => {
        const m = toyProvider.matcherFor(spec);
        if (spec.kind === 'choice' && spec.choices[0] === 'boom') {
          let n = 0;
          m.fillNextTokenBitmask = () => {
            if (++n > 1) throw new Error('matcher bug');
          };
        }
        return m;
      },
    };
    const loop = new EngineLoop({ engine, grammar: flaky });
    const [bad, good, plain] = await Promise.allSettled([
      run(loop, req('boom', 20, { kind: 'choice', choices: ['boom'] })),
      run(loop, req('fine', 20, { kind: 'choice', choices: ['fine'] })),
      run(loop, req('plain', 6)),
    ]);
    expect(bad.status).toBe('rejected');
    expect((bad as PromiseRejectedResult).reason).toMatchObject({ code: 'internal' });
    expect(good.status === 'fulfilled' && decodeToy(good.value.ids)).toBe('fine');
    expect(plain.status === 'fulfilled' && plain.value.ids.length).toBe(6);
    await loop.close();
  });

  it('a matcher fed a token outside its mask reports it (the guard behind failRejected)', () => {
    const m = new DfaMatcher(choiceDfa(['ok']));
    expect(m.acceptToken('x'.charCodeAt(0))).toBe(false);
    expect(m.acceptToken('o'.charCodeAt(0))).toBe(true);
  });
});
