/**
 * Synthetic traces, binned directly (a day at 2,000 req/s is 170M requests: never listed one by
 * one). Shapes:
 *   constant        peakRps throughout
 *   step            troughRps for the first half, peakRps after
 *   diurnal         trough at 00:00, peak at 12:00: r(t) = trough + (peak − trough)·(1 − cos 2πt/24h)/2
 *   diurnal-bursty  diurnal, plus bursts: `burstsPerHour` on average (Poisson), each multiplying
 *                   the rate by 1.5–2× for 2–10 minutes
 * Counts per tick are Poisson around the rate. Per-request ISL and OSL have a 30% coefficient of
 * variation, so a tick's mean of c requests varies by 0.3/√c around its mean.
 */
import { SeededRandom } from '../../runtime/random.js';
import { emptyBins, type TraceBins } from './trace.js';

export const SYNTHETIC_SHAPES = ['constant', 'step', 'diurnal', 'diurnal-bursty'] as const;
export type SyntheticShape = (typeof SYNTHETIC_SHAPES)[number];

export interface SyntheticTraceOptions {
  shape: SyntheticShape;
  hours: number;
  peakRps: number;
  /** Peak ÷ trough of the diurnal swing (and of the step). */
  swing: number;
  isl: number;
  osl: number;
  burstsPerHour: number;
  seed: number;
  tickS: number;
}

export const DEFAULT_SYNTHETIC: SyntheticTraceOptions = { shape: 'diurnal-bursty', hours: 24, peakRps: 100, swing: 8, isl: 3000, osl: 300, burstsPerHour: 1, seed: 1, tickS: 1 };

export function syntheticTrace(partial: Partial<SyntheticTraceOptions> = {}): TraceBins {
  const o = { ...DEFAULT_SYNTHETIC, ...partial };
  const ticks = Math.max(1, Math.round((o.hours * 3600) / o.tickS));
  const rng = new SeededRandom(o.seed);
  const bins = emptyBins(ticks, o.tickS);
  const trough = o.peakRps / o.swing;
  const burst = new Float64Array(ticks).fill(1);
  if (o.shape === 'diurnal-bursty') {
    let t = 0;
    const perTick = (o.burstsPerHour * o.tickS) / 3600;
    while (perTick > 0) {
      t += -Math.log(Math.max(rng.next(), 1e-12)) / perTick;
      if (t >= ticks) break;
      const factor = 1.5 + 0.5 * rng.next();
      const len = Math.round((120 + 480 * rng.next()) / o.tickS);
      for (let i = Math.floor(t); i < Math.min(ticks, Math.floor(t) + len); i++) burst[i] = Math.max(burst[i]!, factor);
    }
  }
  const day = 86400;
  for (let i = 0; i < ticks; i++) {
    const s = i * o.tickS;
    let rate: number;
    if (o.shape === 'constant') rate = o.peakRps;
    else if (o.shape === 'step') rate = i < ticks / 2 ? trough : o.peakRps;
    else rate = trough + ((o.peakRps - trough) * (1 - Math.cos((2 * Math.PI * s) / day))) / 2;
    const c = rng.poisson(rate * burst[i]! * o.tickS);
    bins.count[i] = c;
    const cv = 0.3 / Math.sqrt(Math.max(1, c));
    bins.islSum[i] = c * o.isl * Math.max(0.1, 1 + cv * rng.normal());
    bins.oslSum[i] = c * o.osl * Math.max(0.1, 1 + cv * rng.normal());
  }
  return bins;
}
