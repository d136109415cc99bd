import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { medianRound, servedOrder, writeChart } from './chart.js';
import {
  mailbox,
  commandDelta,
  commandStats,
  describeCommands,
  fmt,
  fmtInt,
  interleave,
  selected,
  monitorCommands,
  type MonitoredCommands,
  median,
  REPORTS_AFTER,
  sleep,
  summarize,
  table,
  target,
  type BenchContext,
  type BenchSection,
} from './harness.js';
import { STAMPEDE_STRATEGIES, type FromWorker, type WorkerRound } from './stampede.protocol.js';

const WORKERS = 4;
const FULL = { callers: 250, buildMs: 200 };
// Quick mode is a smoke test: the slow peers serialize every caller, so fewer callers.
const QUICK = { callers: 25, buildMs: 100 };
/** After the last caller is served: time for releases, unsubscribes and late pollers to land. */
const SETTLE_MS = 300;

interface Worker {
  readonly process: ChildProcess;
  next(): Promise<FromWorker>;
}

function startWorker(port: number, callers: number, buildMs: number, quick: boolean): Worker {
  const child = fork(fileURLToPath(new URL('./stampede.worker.js', import.meta.url)), [], {
    env: {
      ...process.env,
      BENCH_REDIS_PORT: String(port),
      BENCH_CALLERS: String(callers),
      BENCH_BUILD_MS: String(buildMs),
      ...(quick ? { BENCH_QUICK: '1' } : {}),
    },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return { process: child, next: mailbox<FromWorker>(child, 'stampede worker') };
}

async function expect<T extends FromWorker['type']>(
  worker: Worker,
  type: T,
): Promise<Extract<FromWorker, { type: T }>> {
  const message = await worker.next();
  if (message.type !== type) throw new Error(`expected ${type} from a worker, got ${message.type}`);
  return message as Extract<FromWorker, { type: T }>;
}

interface RoundSummary {
  readonly builds: number;
  readonly commands: number;
  readonly commandText: string;
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
  readonly lastAfterBuild: number;
  readonly errors: number;
  readonly firstError?: string;
  /** Every caller's latency, for the chart. */
  readonly latencies: readonly number[];
}

function summarizeRound(
  results: readonly WorkerRound[],
  commands: number,
  text: string,
): RoundSummary {
  const all = results.flatMap((r) => r.latencies);
  const latencies = summarize(all);
  const buildEnds = results.flatMap((r) => r.buildEnds);
  const lastServed = Math.max(...results.map((r) => r.lastServed));
  return {
    builds: results.reduce((n, r) => n + r.builds, 0),
    commands,
    commandText: text,
    p50: latencies.p50,
    p99: latencies.p99,
    max: latencies.max,
    lastAfterBuild: buildEnds.length ? lastServed - Math.max(...buildEnds) : Number.NaN,
    errors: results.reduce((n, r) => n + r.errors, 0),
    firstError: results.find((r) => r.firstError)?.firstError,
    latencies: all,
  };
}

export const stampedeSection: BenchSection = {
  id: 'stampede',
  title: '2. Stampede',
  async run(context: BenchContext) {
    const { quick, redis, report } = context;
    const rounds = quick ? 1 : 5;
    const { callers, buildMs } = quick ? QUICK : FULL;
    report.progress(`stampede: starting ${WORKERS} workers`);
    const workers = Array.from({ length: WORKERS }, () =>
      startWorker(redis.port, callers, buildMs, quick),
    );
    const admin = redis.client();
    try {
      const ready = await Promise.all(workers.map((w) => expect(w, 'ready')));
      const unavailable = ready[0]!.unavailable;
      const strategies = STAMPEDE_STRATEGIES.filter((s) => !unavailable[s] && selected(context, s));
      const results = new Map<string, RoundSummary[]>(strategies.map((s) => [s, []]));
      let serial = 0;
      await interleave(
        strategies,
        rounds,
        quick ? 0 : 1,
        async (strategy, round) => {
          report.progress(`stampede: ${strategy}, round ${round}`);
          const key = `stampede:${serial++}:${Date.now()}`;
          const before = await commandStats(admin);
          for (const w of workers) w.process.send({ type: 'go', strategy, key });
          const done = await Promise.all(workers.map((w) => expect(w, 'done')));
          await sleep(SETTLE_MS);
          const delta = commandDelta(before, await commandStats(admin));
          return summarizeRound(
            done.map((d) => d.result),
            delta.total,
            describeCommands(delta.byCommand),
          );
        },
        (strategy, summary) => results.get(strategy)!.push(summary),
      );
      // One more round each under MONITOR, to tell round trips from commands run inside scripts.
      const monitored = new Map<string, MonitoredCommands>();
      for (const strategy of quick ? [] : strategies) {
        report.progress(`stampede: ${strategy}, counting round trips with MONITOR`);
        const key = `stampede:${serial++}:${Date.now()}`;
        monitored.set(
          strategy,
          await monitorCommands(redis, async () => {
            for (const w of workers) w.process.send({ type: 'go', strategy, key });
            await Promise.all(workers.map((w) => expect(w, 'done')));
            await sleep(SETTLE_MS);
          }),
        );
      }

      const rows = STAMPEDE_STRATEGIES.map((strategy) => {
        const mine = results.get(strategy);
        if (!mine && !unavailable[strategy]) {
          return [strategy, 'not run (--filter)', '', '', '', '', '', '', '', ''];
        }
        const seen = monitored.get(strategy);
        if (!mine) {
          return [strategy, unavailable[strategy] ?? '', '', '', '', '', '', '', '', ''];
        }
        const m = (pick: (r: RoundSummary) => number): number => median(mine.map(pick));
        const errors = mine.reduce((n, r) => n + r.errors, 0);
        return [
          strategy,
          `${fmt(
            m((r) => r.builds),
            0,
          )} (max ${Math.max(...mine.map((r) => r.builds))})`,
          fmtInt(m((r) => r.commands)),
          fmt(m((r) => r.commands) / WORKERS, 1),
          seen
            ? `${fmt(seen.fromClients / WORKERS, 1)} (+${fmt(seen.inScripts / WORKERS, 1)} in scripts)`
            : 'full run only',
          mine[mine.length - 1]!.commandText,
          fmt(
            m((r) => r.p50),
            1,
          ),
          fmt(
            m((r) => r.p99),
            1,
          ),
          fmt(
            m((r) => r.max),
            1,
          ),
          `${fmt(
            m((r) => r.lastAfterBuild),
            1,
          )}${errors ? ` (${errors} errors: ${mine.find((r) => r.firstError)?.firstError?.slice(0, 70)})` : ''}`,
        ];
      });
      const chart = writeChart(
        context,
        'chart-stampede.svg',
        {
          title: `Stampede: ${WORKERS} processes × ${callers} callers, one cold key, ${buildMs} ms build`,
          xLabel: 'callers served, % of all (in the order they were served)',
          yLabel: 'latency from the go signal, ms',
          yScale: 'log',
          series: strategies.map((strategy) =>
            servedOrder(
              strategy,
              medianRound(results.get(strategy)!).latencies,
              strategy.startsWith('@SingleFlight'),
            ),
          ),
        },
        `The chart: each strategy's median round by p99, its ${WORKERS * callers} callers ` +
          `sorted by latency. Every caller starts at the go signal, so that is also the order in ` +
          `which they were served: a flat line at the build time is a stampede absorbed, a ` +
          `staircase is callers retrying a lock.`,
      );
      report.add(
        `## 2. Stampede\n\n` +
          `${WORKERS} worker processes × ${callers} concurrent callers ask for one cold key; the ` +
          `build takes ${buildMs} ms and caches its value in Redis. ${rounds} round(s) per ` +
          `strategy, interleaved; medians over rounds. Commands: every command the Redis server ` +
          `ran from the go signal until ${SETTLE_MS} ms after the last caller was served ` +
          `(\`INFO commandstats\` deltas, which also count the commands a Lua script runs), including ` +
          `cache GET/SET; "busiest" is from the last round. Round trips: commands sent by clients, ` +
          `counted with MONITOR in one extra round per strategy (not timed). ` +
          `Latency is per caller from the go signal. "last served" is ms from the end of the last ` +
          `build to the last caller's answer; ${REPORTS_AFTER}. The @SingleFlight rows run a Nest application ` +
          `context per worker with \`BufferLockModule.forRoot({ redis: url, ttl: 10, ` +
          `lockTimeout: 5 })\` on a method that does the build-then-cache; the lock peers wrap the ` +
          `same code in a cache check, their lock with default retry settings, and a second check. ` +
          `murlock has no defaults; it runs with \`wait: 100, maxAttempts: 10\` (5 in quick mode); @anchan828/nest-redlock with its ` +
          `defaults (redlock 5: 10 retries 200 ms apart).\n\n` +
          table(
            [
              'strategy',
              'builds',
              'Redis cmds',
              'cmds/process',
              'round trips/process (MONITOR)',
              'busiest commands',
              'p50 ms',
              'p99 ms',
              'max ms',
              'last served after build, ms',
            ],
            rows,
          ) +
          (chart && `\n${chart}`),
      );
      const share = results.get('@SingleFlight share');
      if (!share) {
        for (const name of [
          '1 build',
          '≤ 10 Redis commands per process',
          'p99 ≤ build + 15 ms',
          'last caller ≤ 10 ms after build end',
        ]) {
          target(
            `stampede share: ${name}`,
            unavailable['@SingleFlight share'] ?? 'not run (--filter)',
            undefined,
          );
        }
      } else {
        const maxBuilds = Math.max(...share.map((r) => r.builds));
        const perProcess = median(share.map((r) => r.commands)) / WORKERS;
        const trips = monitored.get('@SingleFlight share');
        const p99 = median(share.map((r) => r.p99));
        const last = median(share.map((r) => r.lastAfterBuild));
        target(
          'stampede share: exactly 1 build (every round)',
          `max ${maxBuilds}`,
          maxBuilds === 1 && share.every((r) => r.builds === 1),
        );
        target(
          'stampede share: ≤ 10 Redis commands per process',
          `${fmt(perProcess, 1)} (commandstats); ${fmt(trips ? trips.fromClients / WORKERS : undefined, 1)} round trips`,
          perProcess <= 10,
        );
        target(
          `stampede share: p99 ≤ build + 15 ms (${buildMs + 15} ms)`,
          `${fmt(p99, 1)} ms`,
          p99 <= buildMs + 15,
        );
        target(
          'stampede share: last caller ≤ 10 ms after build end',
          `${fmt(last, 1)} ms`,
          last <= 10,
        );
      }
    } finally {
      for (const w of workers) if (w.process.connected) w.process.send({ type: 'exit' });
      await Promise.all(
        workers.map((w) =>
          w.process.exitCode !== null
            ? undefined
            : new Promise((r) => {
                const timer = setTimeout(() => w.process.kill('SIGKILL'), 5000);
                w.process.once('exit', () => r(clearTimeout(timer)));
              }),
        ),
      );
      admin.disconnect();
    }
  },
};
