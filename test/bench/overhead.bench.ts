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
  table,
  target,
  type BenchContext,
  type BenchSection,
} from './harness.js';

type ServerMessage = { type: 'listening'; port: number } | { type: 'unavailable' };

interface Load {
  readonly rps: number;
  readonly p50: number;
  readonly p99: number;
  readonly non2xx: number;
  readonly errors: number;
  readonly commandsPerRequest: number;
}

/** autocannon on `route`, every request a new id (so @SingleFlight takes a new, free key). */
async function load(
  port: number,
  route: string,
  connections: number,
  seconds: number,
  admin: Redis,
): Promise<Load> {
  let id = 0;
  const before = await commandStats(admin);
  const result = await autocannon({
    url: `http://127.0.0.1:${port}`,
    connections,
    duration: seconds,
    requests: [
      { method: 'GET', setupRequest: (request) => ({ ...request, path: `/${route}/${id++}` }) },
    ],
  });
  const commands = commandDelta(before, await commandStats(admin)).total;
  return {
    commandsPerRequest: commands / Math.max(1, result['2xx'] + result.non2xx),
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
    const exited = new Promise((r) => server.once('exit', r));
    const admin = redis.client();
    try {
      const message = await new Promise<ServerMessage>((resolve, reject) => {
        server.once('message', resolve);
        server.once('exit', (code) => reject(new Error(`overhead server exited with ${code}`)));
      });
      if (message.type === 'unavailable') {
        report.add(
          `## 3. Decorator overhead\n\n${NOT_AVAILABLE}: the library exports no @SingleFlight.\n`,
        );
        target('decorator overhead: throughput ≥ 0.9× bare', NOT_AVAILABLE, undefined);
        return;
      }
      const rounds = quick ? 1 : 5;
      const seconds = quick ? 1 : 5;
      // 16 connections: latency-bound (each request waits for its two Redis round trips);
      // 64: the machine's CPUs are saturated, so the ratio shows what the lock costs in CPU.
      const levels = [16, 64];
      const routes = ['bare', 'single-flight'] as const;
      const runs = levels.flatMap((connections) => routes.map((route) => ({ connections, route })));
      const results = new Map<(typeof runs)[number], Load[]>(runs.map((r) => [r, []]));
      await interleave(
        runs,
        rounds,
        1,
        (run, round) => {
          report.progress(`overhead: ${run.route}, ${run.connections} connections, round ${round}`);
          return load(message.port, run.route, run.connections, round < 0 ? 1 : seconds, admin);
        },
        (run, result) => results.get(run)!.push(result),
      );
      const row = (name: string, connections: number, loads: Load[]): string[] => [
        name,
        String(connections),
        fmtInt(median(loads.map((l) => l.rps))),
        fmt(median(loads.map((l) => l.p50)), 2),
        fmt(median(loads.map((l) => l.p99)), 2),
        fmt(median(loads.map((l) => l.commandsPerRequest)), 2),
        String(loads.reduce((n, l) => n + l.non2xx + l.errors, 0)),
      ];
      const rows: string[][] = [];
      const summary: string[] = [];
      for (const connections of levels) {
        const of = (route: string): Load[] =>
          results.get(runs.find((r) => r.connections === connections && r.route === route)!)!;
        const bare = of('bare');
        const sf = of('single-flight');
        const ratio = median(sf.map((r, i) => r.rps / bare[i]!.rps));
        const p99Diff = median(sf.map((r) => r.p99)) - median(bare.map((r) => r.p99));
        rows.push(row('bare', connections, bare), row('@SingleFlight', connections, sf));
        summary.push(
          `${connections} connections: throughput ratio **${fmtRatio(ratio)}**, p99 difference ` +
            `**${fmt(p99Diff, 2)} ms**`,
        );
        target(
          `decorator overhead (${connections} connections): throughput ≥ 0.9× bare`,
          `${fmtRatio(ratio)}, p99 ${p99Diff >= 0 ? '+' : ''}${fmt(p99Diff, 2)} ms`,
          ratio >= 0.9,
        );
      }
      report.add(
        `## 3. Decorator overhead\n\n` +
          `One Nest (Express) app in its own process with two routes whose handlers return ` +
          `\`{ id }\`: \`/bare/:id\` and \`/single-flight/:id\` under ` +
          `\`@SingleFlight((id) => 'item:' + id)\`. Every request has a new id, so every ` +
          `call takes and releases a free lock (two Redis round trips). autocannon in the bench ` +
          `process, ${rounds} round(s) of ${seconds} s per route and connection count, ` +
          `interleaved; ratios are medians of per-round ratios. With 16 connections the server ` +
          `is not saturated and the ratio mostly shows the two added round trips of latency; with ` +
          `64 the CPUs are (load generator, server and Redis share them) and it shows CPU cost.\n\n` +
          table(
            [
              'route',
              'connections',
              'requests/s',
              'p50 ms',
              'p99 ms',
              'Redis cmds/request',
              'errors + non-2xx',
            ],
            rows,
          ) +
          `\n${summary.join('; ')}.\n`,
      );
    } finally {
      admin.disconnect();
      if (server.connected) server.send('exit');
      const timer = setTimeout(() => server.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
  },
};
