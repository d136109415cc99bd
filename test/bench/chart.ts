// Line charts as plain SVG text, for the latency sections of RESULTS.md.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { BenchContext } from './harness.js';

/** The most points a series keeps (files stay small; the slowest callers are always kept). */
export const MAX_POINTS = 400;

export interface Series {
  readonly label: string;
  /** [x, y] pairs, in x order. */
  readonly points: readonly (readonly [number, number])[];
  /** Drawn thicker and on top: the library's own rows beside the anchors. */
  readonly strong?: boolean;
}

export interface Chart {
  readonly title: string;
  readonly xLabel: string;
  readonly yLabel: string;
  readonly series: readonly Series[];
  /** `log` when the series span orders of magnitude (a lock peer's seconds beside our 200 ms). */
  readonly yScale: 'linear' | 'log';
}

/**
 * Per-caller latencies of one round, sorted: x is the share of callers served (%), y the latency.
 * Every caller starts at the go signal, so its latency is also when it was served, and the sorted
 * order is the order of service. Downsampled evenly by rank, first and last kept.
 */
export function servedOrder(label: string, latencies: readonly number[], strong = false): Series {
  const sorted = latencies.toSorted((a, b) => a - b);
  const n = sorted.length;
  const picks =
    n <= MAX_POINTS
      ? sorted.map((_, i) => i)
      : Array.from({ length: MAX_POINTS }, (_, i) => Math.round((i * (n - 1)) / (MAX_POINTS - 1)));
  return { label, strong, points: picks.map((i) => [(100 * (i + 1)) / n, sorted[i]!] as const) };
}

/**
 * Reads over time: `servedAt` (x) and `latencies` (y) side by side. The run is cut into
 * MAX_POINTS slices of time and each slice keeps its slowest read, so a spike is never averaged
 * or sampled away.
 */
export function slowestOverTime(
  label: string,
  servedAt: readonly number[],
  latencies: readonly number[],
  strong = false,
): Series {
  // No spread: a run has hundreds of thousands of reads, past what a call's arguments can hold.
  const end = servedAt.reduce((a, b) => Math.max(a, b), 0);
  const slowest = new Map<number, readonly [number, number]>();
  servedAt.forEach((at, i) => {
    const slice = Math.min(MAX_POINTS - 1, Math.floor((at / end) * MAX_POINTS));
    const latency = latencies[i]!;
    if (latency > (slowest.get(slice)?.[1] ?? -Infinity)) slowest.set(slice, [at, latency]);
  });
  const points = [...slowest].toSorted((a, b) => a[0] - b[0]).map(([, point]) => point);
  return { label, strong, points };
}

const COLOURS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2'];
const WIDTH = 1000;
const HEIGHT = 440;
const PLOT = { left: 70, top: 40, right: 620, bottom: 380 };
const LEGEND_X = PLOT.right + 30;

const escape = (text: string): string =>
  text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

const coord = (value: number): string => value.toFixed(1);

/**
 * "Nice" linear ticks (steps of 1, 2 or 5 × 10^k) over [min, max]: from 0, unless every value is
 * above half the largest (a cold stampede: no caller is served before the build ends).
 */
function linearTicks(min: number, max: number): number[] {
  const from = min > max / 2 ? min : 0;
  const rough = Math.max(max - from, 1e-9) / 6;
  const power = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= rough) ?? rough;
  const first = Math.floor(from / step + 1e-9);
  const last = Math.ceil(max / step - 1e-9);
  return Array.from({ length: Math.max(1, last - first) + 1 }, (_, i) =>
    Number(((first + i) * step).toPrecision(12)),
  );
}

/** Log ticks at 1, 2 and 5 × 10^k (only 10^k when that would crowd), covering [min, max]. */
function logTicks(min: number, max: number): number[] {
  const low = Math.floor(Math.log10(min));
  const high = Math.ceil(Math.log10(max));
  const steps = high - low > 3 ? [1] : [1, 2, 5];
  const ticks: number[] = [];
  for (let k = low; k <= high; k++) for (const m of steps) ticks.push(m * 10 ** k);
  const first = ticks.findLastIndex((t) => t <= min);
  const last = ticks.findIndex((t) => t >= max);
  return ticks.slice(Math.max(0, first), last < 0 ? undefined : last + 1);
}

function tickText(value: number): string {
  if (value === 0) return '0';
  if (Math.abs(value) >= 1000) return `${value / 1000}k`;
  return String(Number(value.toPrecision(3)));
}

/** The chart as SVG text: a white canvas, grid, ticks, one line per series and a legend. */
export function renderChart(chart: Chart): string {
  // No series (all filtered out): an empty frame rather than no file.
  const all = chart.series.flatMap((s) => s.points);
  if (all.length === 0) all.push([1, 1]);
  const xTicks = linearTicks(0, Math.max(...all.map((p) => p[0])));
  const xMax = xTicks[xTicks.length - 1]!;
  const ys = all.map((p) => p[1]);
  const log = chart.yScale === 'log';
  const floor = Math.max(0.01, Math.min(...ys.filter((y) => y > 0)));
  const yTicks = log
    ? logTicks(floor, Math.max(...ys))
    : linearTicks(Math.min(...ys), Math.max(...ys));
  const yMin = yTicks[0]!;
  const yMax = yTicks[yTicks.length - 1]!;
  const x = (v: number): number => PLOT.left + (v / xMax) * (PLOT.right - PLOT.left);
  const y = (v: number): number => {
    const share = log
      ? (Math.log10(Math.max(v, yMin)) - Math.log10(yMin)) / (Math.log10(yMax) - Math.log10(yMin))
      : (v - yMin) / (yMax - yMin);
    return PLOT.bottom - share * (PLOT.bottom - PLOT.top);
  };
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="sans-serif" font-size="12">`,
    `<rect width="${WIDTH}" height="${HEIGHT}" fill="#fff"/>`,
    `<text x="${WIDTH / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${escape(chart.title)}</text>`,
  ];
  for (const t of xTicks) {
    out.push(
      `<line x1="${coord(x(t))}" y1="${PLOT.top}" x2="${coord(x(t))}" y2="${PLOT.bottom}" stroke="#e5e5e5"/>`,
      `<text x="${coord(x(t))}" y="${PLOT.bottom + 16}" text-anchor="middle">${tickText(t)}</text>`,
    );
  }
  for (const t of yTicks) {
    out.push(
      `<line x1="${PLOT.left}" y1="${coord(y(t))}" x2="${PLOT.right}" y2="${coord(y(t))}" stroke="#e5e5e5"/>`,
      `<text x="${PLOT.left - 6}" y="${coord(y(t) + 4)}" text-anchor="end">${tickText(t)}</text>`,
    );
  }
  out.push(
    `<rect x="${PLOT.left}" y="${PLOT.top}" width="${PLOT.right - PLOT.left}" height="${PLOT.bottom - PLOT.top}" fill="none" stroke="#333"/>`,
    `<text x="${(PLOT.left + PLOT.right) / 2}" y="${PLOT.bottom + 36}" text-anchor="middle">${escape(chart.xLabel)}</text>`,
    `<text transform="translate(18 ${(PLOT.top + PLOT.bottom) / 2}) rotate(-90)" text-anchor="middle">${escape(chart.yLabel)}${log ? ' (log scale)' : ''}</text>`,
  );
  const coloured = chart.series.map((s, i) => ({ ...s, colour: COLOURS[i % COLOURS.length]! }));
  // The library's rows last, so that no anchor's line hides them.
  for (const s of coloured.toSorted((a, b) => Number(a.strong) - Number(b.strong))) {
    const points = s.points.map(([px, py]) => `${coord(x(px))},${coord(y(py))}`).join(' ');
    out.push(
      `<polyline fill="none" stroke="${s.colour}" stroke-width="${s.strong ? 3 : 1.5}" stroke-linejoin="round" points="${points}"/>`,
    );
  }
  coloured.forEach((s, i) => {
    const ly = PLOT.top + 10 + i * 22;
    out.push(
      `<line x1="${LEGEND_X}" y1="${ly}" x2="${LEGEND_X + 24}" y2="${ly}" stroke="${s.colour}" stroke-width="${s.strong ? 3 : 1.5}"/>`,
      `<text x="${LEGEND_X + 30}" y="${ly + 4}"${s.strong ? ' font-weight="bold"' : ''}>${escape(s.label)}</text>`,
    );
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

/**
 * Writes `file` beside the results file (test/bench/ in a full run, .build/ in a quick one) and
 * returns the markdown that shows it under `caption`, in a full run; nothing in a quick one.
 */
export function writeChart(
  context: BenchContext,
  file: string,
  chart: Chart,
  caption: string,
): string {
  const path = join(context.chartDir, file);
  writeFileSync(path, renderChart(chart));
  context.report.progress(`wrote ${path}`);
  return context.quick ? '' : `${caption}\n\n![${chart.title}](${file})\n`;
}

/** The round a chart shows: the median round by p99 (the lower middle of an even count). */
export function medianRound<R extends { readonly p99: number }>(rounds: readonly R[]): R {
  return rounds.toSorted((a, b) => a.p99 - b.p99)[(rounds.length - 1) >> 1]!;
}
