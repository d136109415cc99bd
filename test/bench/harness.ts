import type { ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import { monitor } from '../support/monitor.js';
import type { RedisServer } from '../support/redis-server.js';
import type { Baseline } from './baseline.js';

/** What a section gets from the runner. */
export interface BenchContext {
  /** `--quick`: small counts so the whole suite runs in CI in under a minute. */
  readonly quick: boolean;
  /** The bench's own redis-server (the outage section pauses it). */
  readonly redis: RedisServer;
  /** Appends markdown to RESULTS.md and prints it. */
  readonly report: Report;
  /** `--filter`: run only the strategies whose names contain one of these (and the floor, ours and a baseline). */
  readonly filter?: readonly string[];
  /** `--soak-minutes`: how long the soak section runs (default 10, `--quick` 0.5). */
  readonly soakMinutes?: number;
  /** `--baseline`: the library built at another commit, rows of its own in sections 1, 6 and 10. */
  readonly baseline?: Baseline;
  /** `--rounds`: rounds of the lock micro-benchmark (default 15, `--quick` 1). */
  readonly rounds?: number;
  /** Where charts go: beside the results file (test/bench/, or .build/ for a quick run). */
  readonly chartDir: string;
}

/** Whether `name` passes `--filter` (no filter: everything does). */
export function selected(context: BenchContext, name: string): boolean {
  return !context.filter || context.filter.some((part) => name.includes(part));
}

/** A section of the suite: a title and the code that measures and reports. */
export interface BenchSection {
  readonly id: string;
  readonly title: string;
  /** Runs only when named in `--only` (the soak takes minutes): never in a default or CI run. */
  readonly optIn?: boolean;
  run(context: BenchContext): Promise<void>;
}

/** The row text used when the library does not have the feature a row measures. */
export const NOT_AVAILABLE = 'not available yet';

/** Milliseconds since the epoch with sub-millisecond precision, comparable across processes. */
export const epochMs = (): number => performance.timeOrigin + performance.now();

/**
 * How long after its last caller a stampede worker waits before it reports its round: the report
 * (every caller's latency, over IPC) and the parent's reading of it must not take a core from a
 * worker still answering its callers.
 */
export const REPORT_AFTER_MS = 100;

/** What a stampede section says of REPORT_AFTER_MS. */
export const REPORTS_AFTER =
  `a worker reports its round ${REPORT_AFTER_MS} ms after its own last answer, so that the ` +
  `report does not take a core from a worker still answering`;

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Forced garbage collection, `passes` times (one pass can leave garbage that a finalizer or weak
 * ref kept one more cycle). Throws unless Node runs with --expose-gc, as `npm run bench` does.
 */
export function collectGarbage(passes = 1): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run the bench with node --expose-gc (npm run bench does)');
  for (let i = 0; i < passes; i++) gc();
}

/** Nearest-rank percentile of an ascending array; `p` in [0, 100]. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = values.toSorted((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export interface LatencySummary {
  readonly count: number;
  readonly p50: number;
  readonly p99: number;
  readonly p999: number;
  readonly max: number;
}

/** p50/p99/p99.9/max of latency samples (any order). */
export function summarize(samples: readonly number[] | Float64Array): LatencySummary {
  const sorted = Float64Array.from(samples).toSorted();
  return {
    count: sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    p999: percentile(sorted, 99.9),
    max: sorted.length ? sorted[sorted.length - 1]! : Number.NaN,
  };
}

/** A number for a table: `digits` decimals, or '–' when missing. */
export function fmt(value: number | undefined, digits = 2): string {
  if (value === undefined || !Number.isFinite(value)) return '–';
  return value.toFixed(digits);
}

/** An integer with thin thousands separators. */
export function fmtInt(value: number | undefined): string {
  if (value === undefined || !Number.isFinite(value)) return '–';
  return Math.round(value).toLocaleString('en-US');
}

export function fmtRatio(value: number | undefined): string {
  return value === undefined || !Number.isFinite(value) ? '–' : `${value.toFixed(2)}×`;
}

export function fmtMb(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

/** A markdown table with padded columns, readable in a terminal and on GitHub. */
export function table(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [line(headers), `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`, ...rows.map(line)]
    .join('\n')
    .concat('\n');
}

/**
 * Runs every strategy once per round, rotating the starting strategy each round, so that drift
 * in machine load (other processes, thermal) spreads evenly over all of them. `warmup` rounds run
 * first and are not passed to `record`.
 */
export async function interleave<S, R>(
  strategies: readonly S[],
  rounds: number,
  warmup: number,
  run: (strategy: S, round: number) => Promise<R>,
  record: (strategy: S, result: R, round: number) => void,
): Promise<void> {
  for (let round = -warmup; round < rounds; round++) {
    const offset = ((round % strategies.length) + strategies.length) % strategies.length;
    for (let i = 0; i < strategies.length; i++) {
      const strategy = strategies[(i + offset) % strategies.length]!;
      const result = await run(strategy, round);
      if (round >= 0) record(strategy, result, round);
    }
  }
}

/** `INFO commandstats` as command name → calls. */
export async function commandStats(client: Redis): Promise<Map<string, number>> {
  const text = await client.info('commandstats');
  const stats = new Map<string, number>();
  for (const match of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    stats.set(match[1]!, Number(match[2]));
  }
  return stats;
}

export interface CommandDelta {
  readonly total: number;
  readonly byCommand: ReadonlyMap<string, number>;
}

/**
 * Commands run between two `commandStats` snapshots, without the one INFO that took the first
 * snapshot (Redis counts a command after it ran, so it shows up in the second).
 */
export function commandDelta(
  before: ReadonlyMap<string, number>,
  after: ReadonlyMap<string, number>,
  ownCommands: ReadonlyMap<string, number> = new Map([['info', 1]]),
): CommandDelta {
  const byCommand = new Map<string, number>();
  let total = 0;
  for (const [name, calls] of after) {
    const delta = calls - (before.get(name) ?? 0) - (ownCommands.get(name) ?? 0);
    if (delta > 0) {
      byCommand.set(name, delta);
      total += delta;
    }
  }
  return { total, byCommand };
}

/** Commands seen by MONITOR: sent by clients, and run inside Lua scripts. */
export interface MonitoredCommands {
  readonly fromClients: number;
  readonly inScripts: number;
  readonly byCommand: ReadonlyMap<string, number>;
  /** Commands sent by clients, per client address (`ip:port`, MONITOR's source field). */
  readonly bySource: ReadonlyMap<string, number>;
  /** Of those, the `PING`s: a subscriber connection's heartbeat, on no call's path. */
  readonly pingsBySource: ReadonlyMap<string, number>;
}

/**
 * Counts, with MONITOR, the commands Redis runs while `during` runs. Unlike commandstats, MONITOR
 * tells a client's command (a round trip) from one a Lua script ran. MONITOR slows Redis down, so
 * this is a separate pass, never one whose latency is reported.
 */
export async function monitorCommands(
  redis: RedisServer,
  during: () => Promise<void>,
): Promise<MonitoredCommands> {
  const fenceClient = redis.client();
  await fenceClient.ping();
  const fence = `bench-fence-${Date.now()}`;
  const byCommand = new Map<string, number>();
  const bySource = new Map<string, number>();
  const pingsBySource = new Map<string, number>();
  let fromClients = 0;
  let inScripts = 0;
  let fenced: (() => void) | undefined;
  const seenFence = new Promise<void>((r) => (fenced = r));
  const stop = await monitor(fenceClient, ({ source, args }) => {
    const name = String(args[0]).toLowerCase();
    if (name === 'echo' && args[1] === fence) return fenced?.();
    if (source === 'lua') inScripts++;
    else {
      fromClients++;
      bySource.set(source, (bySource.get(source) ?? 0) + 1);
      if (name === 'ping') pingsBySource.set(source, (pingsBySource.get(source) ?? 0) + 1);
    }
    byCommand.set(name, (byCommand.get(name) ?? 0) + 1);
  });
  await during();
  // Everything sent before the fence has been shown by MONITOR once the fence shows up.
  await fenceClient.echo(fence);
  await seenFence;
  stop();
  fenceClient.disconnect();
  return { fromClients, inScripts, byCommand, bySource, pingsBySource };
}

/** `get:4 evalsha:2`, busiest first. */
export function describeCommands(byCommand: ReadonlyMap<string, number>, limit = 4): string {
  const entries = [...byCommand].toSorted((a, b) => b[1] - a[1]);
  const shown = entries.slice(0, limit).map(([name, calls]) => `${name}:${calls}`);
  if (entries.length > limit) shown.push('…');
  return shown.join(' ');
}

/** redis-server's CPU time (user + system) in seconds, from INFO cpu. */
export async function redisCpuSeconds(admin: Redis): Promise<number> {
  const info = await admin.info('cpu');
  const read = (name: string): number =>
    Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1] ?? 0);
  return read('used_cpu_user') + read('used_cpu_sys');
}

/** Clock ticks per second of /proc/<pid>/stat times: 100 on Linux (USER_HZ). */
const CLOCK_TICKS = 100;

/**
 * CPU seconds (user + system) a process has used, from /proc on Linux; NaN where there is none.
 *
 * @example
 * ```ts
 * const before = processCpuSeconds(child.pid!);
 * ```
 */
export function processCpuSeconds(pid: number): number {
  try {
    // Fields after the command name: state is 3rd, utime 14th and stime 15th of the whole line.
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return Number.NaN;
  }
}

/**
 * The local ports of a process's open TCP connections to `remotePort`, from /proc on Linux (none
 * elsewhere): MONITOR names a command's client by that port, so this tells which process sent it.
 */
export function connectionPorts(pid: number, remotePort: number): Set<number> {
  const ports = new Set<number>();
  const sockets = new Set<string>();
  try {
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        const socket = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (socket) sockets.add(socket[1]!);
      } catch {
        // closed since the directory was read
      }
    }
    for (const family of ['tcp', 'tcp6']) {
      // sl local_address:port rem_address:port st tx:rx tr:when retrnsmt uid timeout inode …
      for (const line of readFileSync(`/proc/${pid}/net/${family}`, 'utf8').split('\n').slice(1)) {
        const fields = line.trim().split(/\s+/);
        if (fields.length < 10 || !sockets.has(fields[9]!)) continue;
        if (parseInt(fields[2]!.split(':')[1]!, 16) !== remotePort) continue;
        ports.add(parseInt(fields[1]!.split(':')[1]!, 16));
      }
    }
  } catch {
    // not Linux, or the process is gone: no ports
  }
  return ports;
}

/** The machine's CPU time so far, in clock ticks: all of it, and the part stolen (see below). */
export interface CpuTicks {
  readonly total: number;
  readonly steal: number;
}

/**
 * The `cpu` line of /proc/stat (Linux; zeros elsewhere). On a virtual machine "steal" is time a
 * CPU of ours was ready to run but the hypervisor ran another guest: what makes timings move on a
 * shared host, and what slows a round trip between two processes most.
 *
 * @example
 * ```ts
 * const before = cpuTicks();
 * await work();
 * console.log(stealShare(before, cpuTicks()));
 * ```
 */
export function cpuTicks(): CpuTicks {
  try {
    const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1);
    // user nice system idle iowait irq softirq steal guest guest_nice (guest time is in user)
    const ticks = fields.slice(0, 8).map(Number);
    return { total: ticks.reduce((a, b) => a + b, 0), steal: ticks[7] ?? 0 };
  } catch {
    return { total: 0, steal: 0 };
  }
}

/** The stolen share of all CPU time between two readings (NaN when nothing passed). */
export function stealShare(before: CpuTicks, after: CpuTicks): number {
  const total = after.total - before.total;
  return total > 0 ? (after.steal - before.steal) / total : Number.NaN;
}

/** Joins sample arrays. */
export function concat(parts: readonly Float64Array[]): Float64Array {
  const out = new Float64Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** Machine, runtime and Redis facts for the head of RESULTS.md. */
export async function environment(client: Redis): Promise<string> {
  const info = await client.info('server');
  const redisVersion = /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown';
  const cpu = cpus();
  return table(
    ['fact', 'value'],
    [
      ['CPUs', `${cpu.length} × ${cpu[0]?.model.trim() ?? 'unknown'}`],
      [
        'load average at start (1/5/15 min)',
        loadavg()
          .map((l) => l.toFixed(2))
          .join(' / '),
      ],
      ['Node', process.version],
      ['Redis', redisVersion],
      ['platform', `${process.platform} ${process.arch}`],
    ],
  );
}

/** Collects markdown for RESULTS.md, printing each piece as it comes. */
export class Report {
  private readonly parts: string[] = [];

  add(markdown: string): void {
    this.parts.push(markdown);
    process.stdout.write(`${markdown}\n`);
  }

  /** A line only for the terminal (progress), not for RESULTS.md. */
  progress(text: string): void {
    process.stderr.write(`  … ${text}\n`);
  }

  toString(): string {
    return this.parts.join('\n');
  }
}

/** A target line for the summary: what, the measured figure, met or not. */
export interface TargetResult {
  readonly target: string;
  readonly measured: string;
  readonly met: boolean | undefined;
}

export const targets: TargetResult[] = [];

export function target(name: string, measured: string, met: boolean | undefined): void {
  targets.push({ target: name, measured, met });
}

export function metText(met: boolean | undefined): string {
  if (met === undefined) return NOT_AVAILABLE;
  return met ? 'met' : 'NOT met';
}

/**
 * The messages a forked worker sends, in order: `next()` resolves the oldest one not yet taken,
 * or rejects once the worker has exited with none left.
 */
export function mailbox<M>(child: ChildProcess, name: string): () => Promise<M> {
  const queue: M[] = [];
  const waiting: { resolve(m: M): void; reject(e: Error): void }[] = [];
  let failure: Error | undefined;
  child.on('message', (message: M) => {
    const waiter = waiting.shift();
    if (waiter) waiter.resolve(message);
    else queue.push(message);
  });
  child.on('exit', (code) => {
    failure = new Error(`${name} exited with ${code}`);
    for (const waiter of waiting.splice(0)) waiter.reject(failure);
  });
  return () =>
    new Promise<M>((resolve, reject) => {
      if (queue.length > 0) resolve(queue.shift()!);
      else if (failure) reject(failure);
      else waiting.push({ resolve, reject });
    });
}
