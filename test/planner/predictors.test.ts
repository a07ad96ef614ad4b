/**
 * Predictors on seeded synthetic series: step, ramp, diurnal and bursty. Prints each one's RMSE
 * and MAPE (one-step-ahead, after a 10-interval warm-up) and asserts what each is for.
 */
import { describe, expect, it } from 'vitest';
import { HoltPredictor, KalmanPredictor, PREDICTOR_NAMES, makePredictor, type PredictorName } from '../../planner/index.js';
import { SeededRandom } from '../../runtime/random.js';

const N = 576; // two "days" of 5-minute intervals
const STEP_AT = 100;

function series(kind: 'step' | 'ramp' | 'diurnal' | 'bursty', seed = 7): number[] {
  const rng = new SeededRandom(seed);
  const out: number[] = [];
  for (let t = 0; t < N; t++) {
    let v: number;
    if (kind === 'step') v = (t < STEP_AT ? 100 : 300) + 5 * rng.normal();
    else if (kind === 'ramp') v = 50 + 2 * t + 5 * rng.normal();
    else if (kind === 'diurnal') v = (200 + 150 * Math.sin((2 * Math.PI * t) / 288)) * (1 + 0.03 * rng.normal());
    else v = (200 + 5 * rng.normal()) * (rng.next() < 0.05 ? 3 : 1); // one-interval 3× bursts
    out.push(v);
  }
  return out;
}

function forecasts(name: PredictorName, xs: number[]): number[] {
  const p = makePredictor(name);
  return xs.map((x) => {
    const f = p.predict() ?? x;
    p.observe(x);
    return f;
  });
}

function errors(xs: number[], fs: number[]): { rmse: number; mape: number } {
  let se = 0;
  let ape = 0;
  let n = 0;
  for (let t = 10; t < xs.length; t++) {
    const e = fs[t]! - xs[t]!;
    se += e * e;
    ape += Math.abs(e) / Math.abs(xs[t]!);
    n++;
  }
  return { rmse: Math.sqrt(se / n), mape: (100 * ape) / n };
}

const KINDS = ['step', 'ramp', 'diurnal', 'bursty'] as const;
const table = new Map<string, { rmse: number; mape: number }>();
for (const kind of KINDS) {
  const xs = series(kind);
  for (const name of PREDICTOR_NAMES) table.set(`${kind}/${name}`, errors(xs, forecasts(name, xs)));
}
const rmse = (kind: string, name: PredictorName) => table.get(`${kind}/${name}`)!.rmse;

describe('predictors: forecast error on synthetic series', () => {
  it('prints the error table', () => {
    const rows = KINDS.map((k) => `${k.padEnd(8)} ` + PREDICTOR_NAMES.map((n) => `${table.get(`${k}/${n}`)!.rmse.toFixed(1).padStart(8)} (${table.get(`${k}/${n}`)!.mape.toFixed(1).padStart(5)}%)`).join(' '));
    console.log(`RMSE (MAPE)  ${PREDICTOR_NAMES.map((n) => n.padStart(17)).join(' ')}\n${rows.join('\n')}`);
    expect(rows).toHaveLength(4);
  });

  it('on a ramp, the trend-aware predictors beat constant and moving window', () => {
    // constant lags one interval (error ≈ slope 2); the window of 6 lags 2.5 intervals (≈ 5)
    expect(rmse('ramp', 'holt')).toBeLessThan(rmse('ramp', 'constant'));
    expect(rmse('ramp', 'kalman')).toBeLessThan(rmse('ramp', 'constant'));
    expect(rmse('ramp', 'constant')).toBeLessThan(rmse('ramp', 'moving-window'));
  });

  it('on a diurnal swing, kalman beats the moving window (which lags the swing)', () => {
    expect(rmse('diurnal', 'kalman')).toBeLessThan(rmse('diurnal', 'moving-window'));
  });

  it('on one-interval bursts, kalman beats holt and constant (it does not chase a spike)', () => {
    expect(rmse('bursty', 'kalman')).toBeLessThan(rmse('bursty', 'holt'));
    expect(rmse('bursty', 'kalman')).toBeLessThan(rmse('bursty', 'constant'));
  });

  it('every predictor tracks a 100 → 300 step to within 10% inside 8 intervals', () => {
    const xs = series('step');
    for (const name of PREDICTOR_NAMES) {
      const fs = forecasts(name, xs);
      for (let t = STEP_AT + 8; t < STEP_AT + 40; t++) expect(Math.abs(fs[t]! - 300), `${name} at t=${t}`).toBeLessThan(30);
    }
  });

  it('Holt worked example: α 0.5, β 0.3; 10 then 20 → level 15, trend 1.5, forecast 16.5', () => {
    const h = new HoltPredictor(0.5, 0.3);
    expect(h.predict()).toBeUndefined();
    h.observe(10);
    h.observe(20);
    expect(h.predict()).toBeCloseTo(16.5, 9);
  });

  it('kalman: a sustained shift is adopted within `confirm` + 1 intervals, a lone spike is not', () => {
    const k = new KalmanPredictor();
    for (let i = 0; i < 30; i++) k.observe(100 + (i % 2 === 0 ? 1 : -1));
    k.observe(400); // lone spike
    expect(k.predict()!).toBeLessThan(130);
    for (let i = 0; i < 5; i++) k.observe(100 + (i % 2 === 0 ? 1 : -1));
    k.observe(400);
    k.observe(400); // second in a row: a shift
    k.observe(400);
    expect(Math.abs(k.predict()! - 400)).toBeLessThan(40);
  });
});
