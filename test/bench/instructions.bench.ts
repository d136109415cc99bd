import type { ChildProcess } from 'node:child_process';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import type { Redis } from 'ioredis';
import { loadBaseline, type Baseline } from './baseline.js';
import { callgrindAvailable, countInstructions, spawnUnderCallgrind } from './callgrind.js';
import {
  commandDelta,
  commandStats,
  fmt,
  fmtInt,
  fmtRatio,
  median,
  table,
  type BenchContext,
  type BenchSection,
} from './harness.js';
import { lockStrategies } from './lock.bench.js';
import { withOverheadServer } from './overhead.protocol.js';

const here = (file: string): string => fileURLToPath(new URL(file, import.meta.url));

/** Resolves to what `child` printed on stdout once it exits; rejects on a non-zero exit. */
function output(child: ChildProcess, what: string): Promise<string> {
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve, reject) =>
    child.once('exit', (code) =>
      code === 0
        ? resolve(stdout)
        : reject(new Error(`${what} exited ${code}: ${stderr.slice(-2000)}`)),
    ),
  );
}

/** Runs `jobs` with at most `limit` at a time, results in order. */
async function pooled<T>(jobs: readonly (() => Promise<T>)[], limit: number): Promise<T[]> {
  const results: T[] = [];
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < jobs.length) {
      const i = next++;
      results[i] = await jobs[i]!();
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, jobs.length) }, lane));
  return results;
}

/** Instructions per acquire+release pair of one lock strategy, in its own process. */
async function lockInstructions(
  name: string,
  port: number,
  warmup: number,
  pairs: number,
  baseline: Baseline | undefined,
): Promise<number> {
  const worker = spawnUnderCallgrind(
    here('./instructions.worker.js'),
    [
      name,
      String(warmup),
      String(pairs),
      String(port),
      ...(baseline ? [baseline.ref, baseline.entry] : []),
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const result = JSON.parse(await output(worker, name)) as { instructions: number; pairs: number };
  return result.instructions / result.pairs;
}

/** The app's load: requests per route and round, uncounted rounds first, then counted ones. */
const APP_LOAD = { rounds: 5, requests: 3_000, connections: 16, warmRounds: 3 } as const;

/** The app's routes counted, as overhead.server.ts names them. */
const ROUTES = ['bare', 'floor', 'single-flight'] as const;
type Route = (typeof ROUTES)[number];

/**
 * Instructions per request of the decorator-overhead app (overhead.server.ts, empty handler) on
 * each of its routes: one app process under callgrind serves them all, as in section 3, so every
 * route pays for whatever the library turns on process-wide.
 */
interface RouteCounts {
  /** Instructions per request, one per counted round. */
  readonly instructions: number[];
  /** Redis commands per request (INFO commandstats, commands inside scripts included). */
  readonly commands: number[];
}

async function routeInstructions(port: number, admin: Redis): Promise<Record<Route, RouteCounts>> {
  const { rounds, requests, connections, warmRounds } = APP_LOAD;
  const server = spawnUnderCallgrind(here('./overhead.server.js'), [], {
    env: { ...process.env, BENCH_REDIS_PORT: String(port), BENCH_COMMAND_TIMEOUT_MS: '60000' },
    stdio: ['ignore', 'inherit', 'pipe', 'ipc'],
  });
  server.stderr?.resume();
  return withOverheadServer(server, 30_000, async (message) => {
    if (message.type !== 'listening') throw new Error('the library exports no @SingleFlight');
    let id = 0;
    const load = (route: string, amount: number) =>
      autocannon({
        url: `http://127.0.0.1:${message.port}`,
        connections,
        amount,
        timeout: 120,
        requests: [
          {
            method: 'GET',
            setupRequest: (request) => ({ ...request, path: `/empty/${route}/${id++}` }),
          },
        ],
      });
    for (let i = 0; i < warmRounds; i++) {
      for (const route of ROUTES) await load(route, requests);
    }
    const counts = Object.fromEntries(
      ROUTES.map((route) => [route, { instructions: [], commands: [] }]),
    ) as unknown as Record<Route, RouteCounts>;
    for (let round = 0; round < rounds; round++) {
      // The order rotates every round, as in the timed sections.
      for (let i = 0; i < ROUTES.length; i++) {
        const route = ROUTES[(i + round) % ROUTES.length]!;
        let result: autocannon.Result | undefined;
        const before = await commandStats(admin);
        const instructions = await countInstructions(server.pid!, async () => {
          result = await load(route, requests);
        });
        const commands = commandDelta(before, await commandStats(admin)).total;
        if (!result || result.non2xx > 0 || result.errors > 0) {
          throw new Error(`${route}: ${result?.non2xx} non-2xx answers, ${result?.errors} errors`);
        }
        counts[route].instructions.push(instructions / result['2xx']);
        counts[route].commands.push(commands / result['2xx']);
      }
    }
    return counts;
  });
}

export const instructionsSection: BenchSection = {
  id: 'instructions',
  title: '6. CPU instructions per operation',
  async run({ quick, redis, report, filter, baseline }: BenchContext) {
    const title = `## 6. CPU instructions per operation\n\n`;
    if (!(await callgrindAvailable())) {
      report.add(`${title}Not measured: valgrind (callgrind) is not installed.\n`);
      return;
    }
    const admin = redis.client();
    let names: string[];
    try {
      const atBaseline = baseline && {
        ref: baseline.ref,
        Service: await loadBaseline(baseline.entry),
      };
      names = (await lockStrategies(admin, { baseline: atBaseline }))
        .filter(
          (s) =>
            s.kind === 'floor' ||
            s.kind === 'ours' ||
            s.kind === 'baseline' ||
            !filter ||
            filter.some((f) => s.name.includes(f)),
        )
        .map((s) => s.name);
    } finally {
      admin.disconnect();
    }
    if (quick) names = names.slice(0, 2);
    const warmup = quick ? 200 : 30_000;
    const pairs = quick ? 100 : 10_000;
    report.progress(`instructions: ${names.length} lock strategies under callgrind`);
    const perPair = await pooled(
      names.map((name) => () => lockInstructions(name, redis.port, warmup, pairs, baseline)),
      Math.max(1, cpus().length),
    );
    const floor = perPair[0]!;
    const lockRows = names.map((name, i) => [
      name,
      fmtInt(perPair[i]),
      fmtRatio(perPair[i]! / floor),
    ]);

    if (quick) {
      // Node and Nest start slowly under valgrind: the app's part would take the quick run past
      // its minute. The lock part above runs the same counting.
      report.add(
        title +
          `Quick mode: lock part only, ${fmtInt(pairs)} pairs after ${fmtInt(warmup)} uncounted ` +
          `(too few to quote).\n\n` +
          table(['strategy', 'instructions/pair', 'vs floor'], lockRows),
      );
      return;
    }
    const { rounds, requests, connections, warmRounds } = APP_LOAD;
    report.progress(`instructions: decorator routes under callgrind, ${rounds} round(s)`);
    const appAdmin = redis.client();
    let routes: Record<Route, RouteCounts>;
    try {
      routes = await routeInstructions(redis.port, appAdmin);
    } finally {
      appAdmin.disconnect();
    }
    const bare = median(routes.bare.instructions);
    const floorRoute = median(routes.floor.instructions);
    const singleFlight = median(routes['single-flight'].instructions);

    report.add(
      title +
        `Instructions counted with valgrind's callgrind (all threads of the Node process, user ` +
        `space; the kernel's share, socket reads and writes above all, is not in them). Unlike ` +
        `time, the count does not move with the other load on a shared machine: repeated runs ` +
        `agreed within 5 % in our checks (most within 1 %). It measures CPU work, not the Redis round trips that bound ` +
        `throughput at c=1. Each process warms up uncounted first.\n\n` +
        `### Lock: acquire+release pairs, c=1, distinct keys\n\n` +
        `Each strategy in its own process: ${fmtInt(warmup)} pairs uncounted, then ` +
        `${fmtInt(pairs)} counted.\n\n` +
        table(['strategy', 'instructions/pair', 'vs floor'], lockRows) +
        `\n### Decorator: empty handler, ${connections} connections\n\n` +
        `The app of section 3 under callgrind; its three routes in one process, ${fmtInt(requests)} ` +
        `requests per route and round after ${warmRounds} uncounted round(s) each, ${rounds} counted round(s), ` +
        `median. The order of the routes rotates every round. The range is the lowest and ` +
        `highest round: the app's counts move more between rounds than the lock's (GC and JIT ` +
        `work land in some rounds and not in others). A forced GC before each count was tried ` +
        `and dropped: every route's count rose by about half. Both lock clients ` +
        `get a 60 s commandTimeout here (valgrind slows the app many times), so that every ` +
        `call takes the locked path; the Redis commands per request show it.\n\n` +
        table(
          ['route', 'instructions/request', 'range over rounds', 'vs bare', 'Redis cmds/request'],
          (
            [
              ['bare', routes.bare],
              ['floor: SET NX PX + DEL by hand', routes.floor],
              ['@SingleFlight', routes['single-flight']],
            ] as const
          ).map(([name, { instructions, commands }]) => [
            name,
            fmtInt(median(instructions)),
            `${fmtInt(Math.min(...instructions))}–${fmtInt(Math.max(...instructions))}`,
            fmtRatio(median(instructions) / bare),
            fmt(median(commands), 2),
          ]),
        ) +
        `\nAdded by @SingleFlight: ${fmtInt(singleFlight - bare)} instructions per request, of ` +
        `which the floor's two Redis commands through ioredis are ${fmtInt(floorRoute - bare)}; ` +
        `the rest is the token, the script, the engine and the promise hooks that ` +
        `AsyncLocalStorage turns on for the whole process on Node 20 (the bare and floor ` +
        `routes pay those too, for their own promises).\n`,
    );
  },
};
