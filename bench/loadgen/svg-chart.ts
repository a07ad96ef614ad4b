/**
 * A dependency-free SVG line chart for the HTML report: axes with "nice" ticks, a grid,
 * one polyline per series and a legend. Output is a self-contained <svg> string.
 */

export interface Series {
  name: string;
  /** x values and y values of equal length. */
  x: readonly number[];
  y: readonly number[];
  color?: string;
  /** Draw as steps (for CDFs of discrete samples this reads better than straight lines). */
  step?: boolean;
}

export interface ChartOptions {
  title: string;
  xLabel: string;
  yLabel: string;
  series: readonly Series[];
  width?: number;
  height?: number;
  /** Force the y range (e.g. [0, 1] for a CDF). */
  yRange?: [number, number];
}

const PALETTE = ['#2563eb', '#dc2626', '#059669', '#d97706', '#7c3aed', '#0891b2'];

export function escapeXml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** About `count` round tick values covering [lo, hi]. */
export function niceTicks(lo: number, hi: number, count = 5): number[] {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? raw;
  const ticks: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

function tickLabel(v: number): string {
  if (v === 0) return '0';
  if (Math.abs(v) >= 10000) return `${(v / 1000).toFixed(0)}k`;
  if (Math.abs(v) >= 100) return v.toFixed(0);
  if (Math.abs(v) >= 1) return String(Number(v.toFixed(2)));
  return String(Number(v.toPrecision(2)));
}

export function lineChart(o: ChartOptions): string {
  const width = o.width ?? 560;
  const height = o.height ?? 300;
  const m = { left: 60, right: 16, top: 30, bottom: 44 };
  const pw = width - m.left - m.right;
  const ph = height - m.top - m.bottom;
  let xMin = Infinity;
  let xMax = -Infinity;
  let yMin = Infinity;
  let yMax = -Infinity;
  for (const s of o.series) {
    for (const v of s.x) (xMin = Math.min(xMin, v)), (xMax = Math.max(xMax, v));
    for (const v of s.y) (yMin = Math.min(yMin, v)), (yMax = Math.max(yMax, v));
  }
  const empty = !Number.isFinite(xMin);
  if (empty) [xMin, xMax, yMin, yMax] = [0, 1, 0, 1];
  if (o.yRange) [yMin, yMax] = o.yRange;
  else yMin = Math.min(0, yMin);
  if (xMin === xMax) xMax = xMin + 1;
  if (yMin === yMax) yMax = yMin + 1;
  const xTicks = niceTicks(xMin, xMax);
  const yTicks = niceTicks(yMin, yMax);
  xMin = Math.min(xMin, xTicks[0] as number);
  xMax = Math.max(xMax, xTicks[xTicks.length - 1] as number);
  yMax = Math.max(yMax, yTicks[yTicks.length - 1] as number);
  const sx = (v: number) => m.left + ((v - xMin) / (xMax - xMin)) * pw;
  const sy = (v: number) => m.top + ph - ((v - yMin) / (yMax - yMin)) * ph;

  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="${escapeXml(o.title)}">`);
  parts.push(`<text x="${width / 2}" y="18" text-anchor="middle" font-size="14" font-weight="600">${escapeXml(o.title)}</text>`);
  for (const t of yTicks) {
    const y = sy(t).toFixed(1);
    parts.push(`<line x1="${m.left}" x2="${m.left + pw}" y1="${y}" y2="${y}" stroke="#e5e7eb"/>`);
    parts.push(`<text x="${m.left - 6}" y="${y}" text-anchor="end" dominant-baseline="middle" font-size="11">${tickLabel(t)}</text>`);
  }
  for (const t of xTicks) {
    const x = sx(t).toFixed(1);
    parts.push(`<line x1="${x}" x2="${x}" y1="${m.top}" y2="${m.top + ph}" stroke="#f3f4f6"/>`);
    parts.push(`<text x="${x}" y="${m.top + ph + 16}" text-anchor="middle" font-size="11">${tickLabel(t)}</text>`);
  }
  parts.push(`<rect x="${m.left}" y="${m.top}" width="${pw}" height="${ph}" fill="none" stroke="#9ca3af"/>`);
  parts.push(`<text x="${m.left + pw / 2}" y="${height - 6}" text-anchor="middle" font-size="12">${escapeXml(o.xLabel)}</text>`);
  parts.push(`<text transform="translate(14 ${m.top + ph / 2}) rotate(-90)" text-anchor="middle" font-size="12">${escapeXml(o.yLabel)}</text>`);
  if (empty) parts.push(`<text x="${m.left + pw / 2}" y="${m.top + ph / 2}" text-anchor="middle" font-size="12" fill="#6b7280">no data</text>`);
  o.series.forEach((s, i) => {
    const color = s.color ?? PALETTE[i % PALETTE.length];
    const pts: string[] = [];
    for (let k = 0; k < s.x.length; k++) {
      const x = sx(s.x[k] as number).toFixed(1);
      const y = sy(s.y[k] as number).toFixed(1);
      if (s.step && k > 0) pts.push(`${x},${sy(s.y[k - 1] as number).toFixed(1)}`);
      pts.push(`${x},${y}`);
    }
    if (pts.length > 0) parts.push(`<polyline fill="none" stroke="${color}" stroke-width="1.8" points="${pts.join(' ')}"/>`);
    if (o.series.length > 1) {
      const ly = m.top + 12 + i * 16;
      parts.push(`<rect x="${m.left + 8}" y="${ly - 8}" width="12" height="3" fill="${color}"/>`);
      parts.push(`<text x="${m.left + 26}" y="${ly - 3}" font-size="11">${escapeXml(s.name)}</text>`);
    }
  });
  parts.push('</svg>');
  return parts.join('');
}
