import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import type { Redis } from 'ioredis';
import {
  commandDelta,
  commandStats,
  fmt,
  fmtInt,
  fmtRatio,
  interleave,
  median,
  NOT_AVAILABLE,
  processCpuSeconds,
  redisCpuSeconds,
  table,
  target,
  type BenchContext,
  type BenchSection,
} from './harness.js';
import {
  OVERHEAD_CACHE_TTL_SECONDS,
  type OverheadWork,
  type ServerMessage,
  withOverheadServer,
} from './overhead.protocol.js';

interface Load {
  readonly rps: number;
  readonly p50: number;
  readonly p99: number;
  readonly non2xx: number;
  readonly errors: number;
  readonly commandsPerRequest: number;
  /** CPU µs per request of the app process and of redis-server (steadier than requests/s). */
  readonly serverCpuUs: number;
  readonly redisCpuUs: number;
}

/** The handler bodies compared, as rows of the table and lines of the targets. */
const WORKS: readonly { readonly work: OverheadWork; readonly label: string }[] = [
  { work: 'empty', label: 'empty handler' },
  { work: 'cached', label: 'cached handler (GET + SET)' },
];

// Ids are unique over the whole run (not per load), so the cached route misses on every request.
let nextId = 0;

/** autocannon on `path`, every request a new id (so @SingleFlight takes a new, free key). */
async function load(
  port: number,
  path: string,
  connections: number,
  seconds: number,
  admin: Redis,
  serverPid: number,
): Promise<Load> {
  const before = await commandStats(admin);
  const serverCpu0 = processCpuSeconds(serverPid);
  const redisCpu0 = await redisCpuSeconds(admin);
  const result = await autocannon({
    url: `http://127.0.0.1:${port}`,
    connections,
    duration: seconds,
    requests: [
      { method: 'GET', setupRequest: (request) => ({ ...request, path: `/${path}/${nextId++}` }) },
    ],
  });
  const serverCpu = processCpuSeconds(serverPid) - serverCpu0;
  const redisCpu = (await redisCpuSeconds(admin)) - redisCpu0;
  const commands = commandDelta(before, await commandStats(admin)).total;
  const requests = Math.max(1, result['2xx'] + result.non2xx);
  return {
    commandsPerRequest: commands / requests,
    serverCpuUs: (serverCpu * 1e6) / requests,
    redisCpuUs: (redisCpu * 1e6) / requests,
    rps: result['2xx'] / result.duration,
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors,
  };
}

export const overheadSection: BenchSection = {
  id: 'overhead',
  title: '3. Decorator overhead',
  async run({ quick, redis, report }: BenchContext) {
    const server = fork(fileURLToPath(new URL('./overhead.server.js', import.meta.url)), [], {
      env: { ...process.env, BENCH_REDIS_PORT: String(redis.port) },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const admin = redis.client();
    try {
      await withOverheadServer(server, 5000, measure);
    } finally {
      admin.disconnect();
    }

    async function measure(message: ServerMessage): Promise<void> {
      if (message.type === 'unavailable') {
        report.add(
          `## 3. Decorator overhead\n\n${NOT_AVAILABLE}: the library exports no @SingleFlight.\n`,
        );
        for (const { label } of WORKS) {
          target(`decorator overhead, ${label}: throughput ≥ 0.9× bare`, NOT_AVAILABLE, undefined);
        }
        return;
      }
      const rounds = quick ? 1 : 5;
      const seconds = quick ? 1 : 5;
      // 16 connections: latency-bound (each request waits for its two Redis round trips);
      // 64: the machine's CPUs are saturated, so the ratio shows what the lock costs in CPU.
      const levels = [16, 64];
      const routes = ['bare', 'floor', 'single-flight'] as const;
      const runs = WORKS.flatMap(({ work }) =>
        levels.flatMap((connections) => routes.map((route) => ({ work, connections, route }))),
      );
      const results = new Map<(typeof runs)[number], Load[]>(runs.map((r) => [r, []]));
      await interleave(
        runs,
        rounds,
        1,
        (run, round) => {
          report.progress(
            `overhead: ${run.work} ${run.route}, ${run.connections} connections, round ${round}`,
          );
          return load(
            message.port,
            `${run.work}/${run.route}`,
            run.connections,
            round < 0 ? 1 : seconds,
            admin,
            server.pid!,
          );
        },
        (run, result) => results.get(run)!.push(result),
      );
      const row = (work: string, name: string, connections: number, loads: Load[]): string[] => [
        work,
        name,
        String(connections),
        fmtInt(median(loads.map((l) => l.rps))),
        fmt(median(loads.map((l) => l.p50)), 2),
        fmt(median(loads.map((l) => l.p99)), 2),
        fmt(median(loads.map((l) => l.commandsPerRequest)), 2),
        fmt(median(loads.map((l) => l.serverCpuUs)), 0),
        fmt(median(loads.map((l) => l.redisCpuUs)), 0),
        String(loads.reduce((n, l) => n + l.non2xx + l.errors, 0)),
      ];
      const rows: string[][] = [];
      const summary: string[] = [];
      for (const { work, label } of WORKS) {
        const lines: string[] = [];
        for (const connections of levels) {
          const of = (route: string): Load[] =>
            results.get(
              runs.find(
                (r) => r.work === work && r.connections === connections && r.route === route,
              )!,
            )!;
          const bare = of('bare');
          const floor = of('floor');
          const sf = of('single-flight');
          const ratio = (a: Load[], b: Load[]): number =>
            median(a.map((r, i) => r.rps / b[i]!.rps));
          const overBare = ratio(sf, bare);
          const p99Diff = median(sf.map((r) => r.p99)) - median(bare.map((r) => r.p99));
          rows.push(
            row(label, 'bare', connections, bare),
            row(label, 'floor: SET NX PX + DEL by hand', connections, floor),
            row(label, '@SingleFlight', connections, sf),
          );
          lines.push(
            `${connections} connections: @SingleFlight **${fmtRatio(overBare)}** of bare ` +
              `(p99 ${p99Diff >= 0 ? '+' : ''}${fmt(p99Diff, 2)} ms), ` +
              `**${fmtRatio(ratio(sf, floor))}** of the floor; the floor ` +
              `${fmtRatio(ratio(floor, bare))} of bare`,
          );
          target(
            `decorator overhead, ${label} (${connections} connections): throughput ≥ 0.9× bare`,
            `${fmtRatio(overBare)}, p99 ${p99Diff >= 0 ? '+' : ''}${fmt(p99Diff, 2)} ms`,
            overBare >= 0.9,
          );
        }
        summary.push(`- ${label}: ${lines.join('; ')}.`);
      }
      report.add(
        `## 3. Decorator overhead\n\n` +
          `One Nest (Express) app in its own process with three routes for each of two handler ` +
          `bodies: **bare**; the **floor**, the body between a \`SET NX PX\` and a \`DEL\` written ` +
          `by hand on an ioredis client with the module's client settings (the same two round ` +
          `trips, with no token, no script, no engine: what any Redis lock costs an endpoint at ` +
          `least); and \`@SingleFlight((kind, id) => 'item:' + id)\`. The **empty handler** returns ` +
          `\`{ id }\`: it measures the decorator against no work at all. The **cached handler** is ` +
          `what a cached endpoint does: it reads its entry \`GET cache:item:<id>\` through the ` +
          `app's own ioredis client on the same Redis and, on a miss, builds a small value and ` +
          `\`SET\`s it with \`EX ${OVERHEAD_CACHE_TTL_SECONDS}\` (2 round trips for the bare ` +
          `route; the @SingleFlight route does the same inside the decorated method). Every request ` +
          `has a new id, unique over the run, so every call takes and releases a free lock (two ` +
          `more Redis round trips) and every cache read misses. autocannon in the bench process, ` +
          `${rounds} round(s) of ${seconds} s per route, handler and connection count, all ` +
          `interleaved; ratios are medians of per-round ratios. With 16 connections the server ` +
          `is not saturated and the ratio mostly shows the two added round trips of latency; with ` +
          `64 the CPUs are (load generator, server and Redis share them) and it shows CPU cost. ` +
          `CPU per request (medians over rounds; the app's from /proc, Redis's from INFO cpu) is ` +
          `steadier than requests/s on a shared machine. The module builds the lock's client from ` +
          `the URL, so it has \`FAIL_FAST_CLIENT_DEFAULTS\`; the ` +
          `app's cache client is a default ioredis client in both routes.\n\n` +
          table(
            [
              'handler',
              'route',
              'connections',
              'requests/s',
              'p50 ms',
              'p99 ms',
              'Redis cmds/request',
              'app µs CPU/request',
              'Redis µs CPU/request',
              'errors + non-2xx',
            ],
            rows,
          ) +
          `\n${summary.join('\n')}\n`,
      );
    }
  },
};
