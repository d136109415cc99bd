// Where a cold stampede's last caller spends its time after the build ends, from the events the
// cache workers write with BENCH_WAKE_TRACE=<file> (see cache.worker.ts):
//
//   BENCH_WAKE_TRACE=/tmp/wake.jsonl npm run bench -- --only=cache --filter=BufferCache.getOrSet
//   node .build/test/bench/wake-trace.js /tmp/wake.jsonl
//
// Only rounds with one build are read: the builder's first command after it is its release.
import { readFileSync } from 'node:fs';
import { fmt, median, table } from './harness.js';

interface ProcessRound {
  readonly strategy: string;
  readonly key: string;
  readonly pid: number;
  readonly events: readonly [number, string][];
}

/** ms from one event to another, per phase, in one round. */
type Phases = Record<string, number>;

const PHASES = [
  'build end → release sent',
  'release sent → its answer (builder)',
  'release sent → first waiting process hears it',
  'release sent → last waiting process hears it',
  'heard → last caller answered (slowest waiting process)',
  'build end → last caller (any process)',
] as const;

/** When `p` first had an event that `matches`, from `after` on. */
const first = (p: ProcessRound, matches: (event: string) => boolean, after = -Infinity): number =>
  p.events.find(([t, event]) => t >= after && matches(event))?.[0] ?? Number.NaN;

const named =
  (name: string) =>
  (event: string): boolean =>
    event === name;

function phasesOf(processes: readonly ProcessRound[]): Phases | undefined {
  const builders = processes.filter((p) => p.events.some(([, event]) => event === 'build end'));
  if (builders.length !== 1) return undefined;
  const builder = builders[0]!;
  const end = first(builder, named('build end'));
  const sent = first(builder, (event) => event.startsWith('sent '), end);
  const answered = first(builder, (event) => event.startsWith('answered '), sent);
  const waiters = processes.filter((p) => p !== builder);
  const heard = waiters.map((p) => first(p, named('heard'), end));
  const lastServed = Math.max(...processes.map((p) => first(p, named('last served'))));
  return {
    [PHASES[0]]: sent - end,
    [PHASES[1]]: answered - sent,
    [PHASES[2]]: Math.min(...heard) - sent,
    [PHASES[3]]: Math.max(...heard) - sent,
    [PHASES[4]]: Math.max(...waiters.map((p, i) => first(p, named('last served')) - heard[i]!)),
    [PHASES[5]]: lastServed - end,
  };
}

const lines = readFileSync(process.argv[2]!, 'utf8').split('\n').filter(Boolean);
const rounds = new Map<string, ProcessRound[]>();
for (const line of lines) {
  const p = JSON.parse(line) as ProcessRound;
  const id = `${p.strategy}\n${p.key}`;
  rounds.set(id, [...(rounds.get(id) ?? []), p]);
}
const byStrategy = new Map<string, Phases[]>();
for (const [id, processes] of rounds) {
  const phases = phasesOf(processes);
  if (!phases) continue;
  const strategy = id.split('\n')[0]!;
  byStrategy.set(strategy, [...(byStrategy.get(strategy) ?? []), phases]);
}
for (const [strategy, all] of byStrategy) {
  console.log(`${strategy}: ${all.length} round(s) with one build\n`);
  const rows = PHASES.map((phase) => {
    const values = all.map((p) => p[phase]!);
    return [
      phase,
      `${fmt(median(values), 2)} ms`,
      `${fmt(Math.min(...values), 2)} – ${fmt(Math.max(...values), 2)} ms`,
    ];
  });
  console.log(table(['phase', 'median', 'range'], rows));
  console.log('');
}
