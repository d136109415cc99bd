import type { ChildProcess } from 'node:child_process';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import type { Redis } from 'ioredis';
import { loadBaseline, type Baseline } from './baseline.js';
import { HIT_ROWS, type HitRow } from './cache-hit.js';
import { callgrindAvailable, countInstructions, spawnUnderCallgrind } from './callgrind.js';
import {
  commandDelta,
  commandStats,
  fmt,
  fmtInt,
  fmtRatio,
  median,
  table,
  target,
  type BenchContext,
  type BenchSection,
} from './harness.js';
import {
  INTERCEPTOR_LOAD,
  interceptorInstructions,
  type InterceptorCounts,
} from './interceptor-hit.js';
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

/**
 * Instructions per operation of one row (a lock strategy's acquire+release pair, or a cache hit),
 * in its own process: one count per round. `baseline`: the build the worker loads.
 */
async function rowInstructions(
  name: string,
  port: number,
  { warmup, count, rounds }: { warmup: number; count: number; rounds: number },
  baseline: Baseline | undefined,
): Promise<number[]> {
  const worker = spawnUnderCallgrind(
    here('./instructions.worker.js'),
    [
      name,
      String(warmup),
      String(count),
      String(rounds),
      String(port),
      ...(baseline ? [baseline.ref, baseline.entry] : []),
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const result = JSON.parse(await output(worker, name)) as {
    instructions: number[];
    count: number;
  };
  return result.instructions.map((instructions) => instructions / result.count);
}

/** Counted rounds of a cache hit row, in its one process: the median is reported. */
const HIT_ROUNDS = 5;

/** A row's rounds: their median, then lowest–highest. */
const cell = (rounds: number[]): string =>
  `${fmtInt(median(rounds))} (${fmtInt(Math.min(...rounds))}–${fmtInt(Math.max(...rounds))})`;

/** The cache hit rows' table: instructions per hit of this build and, with one, the baseline's. */
function hitRows(
  jobs: readonly { row: HitRow; build: Baseline | undefined }[],
  counts: readonly number[][],
  baseline: Baseline | undefined,
): string {
  const of = (row: HitRow, build: Baseline | undefined): number[] =>
    counts[jobs.findIndex((job) => job.row === row && job.build === build)]!;
  const rows = HIT_ROWS.map((row) => {
    const ours = of(row, undefined);
    if (!baseline) return [row, cell(ours)];
    const ratio = median(ours) / median(of(row, baseline));
    target(
      `${row}: instructions per hit within 2 % of ${baseline.ref}`,
      `${fmt(ratio, 3)}×`,
      Math.abs(ratio - 1) <= 0.02,
    );
    return [row, cell(ours), cell(of(row, baseline)), `${fmt(ratio, 3)}×`];
  });
  const perHit = 'instructions/hit, median (range)';
  return table(
    baseline
      ? ['call', perHit, `at ${baseline.ref}: ${perHit}`, 'this build over it']
      : ['call', perHit],
    rows,
  );
}

/** The app's load: requests per route and round, uncounted rounds first, then counted ones. */
const APP_LOAD = { rounds: 5, requests: 3_000, connections: 16, warmRounds: 3 } as const;

/** The interceptor hit's table: this build and, with one, the baseline; no more than 2 % above it. */
function interceptorRows(counts: InterceptorCounts, baseline: Baseline | undefined): string {
  const perRequest = 'instructions/request, median (range)';
  if (!baseline || !counts.baseline) {
    return table(['build', perRequest], [['this build', cell(counts.ours)]]);
  }
  const ratio = median(counts.ours) / median(counts.baseline);
  target(
    `BufferCacheInterceptor hit: instructions per request at most 2 % above ${baseline.ref}`,
    `${fmt(ratio, 3)}×`,
    ratio <= 1.02,
  );
  return table(
    ['build', perRequest, 'over the baseline'],
    [
      ['this build', cell(counts.ours), `${fmt(ratio, 3)}×`],
      [`at ${baseline.ref}`, cell(counts.baseline), '1.000×'],
    ],
  );
}

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
    // Hits: this build's row, then the baseline's; each row in a process of its own.
    const hitJobs = HIT_ROWS.flatMap((row) => [
      { row, build: undefined },
      ...(baseline ? [{ row, build: baseline }] : []),
    ]);
    const hitCount = { warmup, count: pairs, rounds: quick ? 1 : HIT_ROUNDS };
    report.progress(`instructions: ${hitJobs.length} cache hit rows under callgrind`);
    const counts = await pooled(
      [
        ...names.map(
          (name) => () =>
            rowInstructions(name, redis.port, { warmup, count: pairs, rounds: 1 }, baseline),
        ),
        ...hitJobs.map(
          ({ row, build }) =>
            () =>
              rowInstructions(row, redis.port, hitCount, build),
        ),
      ],
      Math.max(1, cpus().length),
    );
    const perPair = counts.slice(0, names.length).map((c) => c[0]!);
    const hitTable = hitRows(hitJobs, counts.slice(names.length), baseline);
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
          `Quick mode: lock and cache hit parts only, ${fmtInt(pairs)} operations after ${fmtInt(warmup)} uncounted ` +
          `(too few to quote).\n\n` +
          table(['strategy', 'instructions/pair', 'vs floor'], lockRows) +
          `\n### Cache: a fresh hit of one key\n\n` +
          hitTable,
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
    report.progress('instructions: a BufferCacheInterceptor hit under callgrind');
    const interceptorTable = interceptorRows(
      await interceptorInstructions(redis.port, baseline),
      baseline,
    );
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
        `\n### Cache: a fresh hit of one key\n\n` +
        `An app's read of one entry already written (ttl 3600 s): a Nest application context ` +
        `with BufferLockModule on the built-in store (no \`l1\`: one script per hit; with ` +
        `\`l1: { maxAge: 3600 }\`: a copy held in the process), read through ` +
        `\`BufferCache.getOrSet(key, build, { ttl })\` or a \`@Cached(key, { ttl })\` method. ` +
        `Each row in its own process, ${fmtInt(warmup)} hits uncounted, then ${HIT_ROUNDS} ` +
        `rounds of ${fmtInt(pairs)} counted.` +
        (baseline
          ? ` The same rows on the library built from commit ${baseline.commit} ` +
            `(\`--baseline=${baseline.ref}\`), each in a process of its own too.`
          : '') +
        `\n\n` +
        hitTable +
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
        `routes pay those too, for their own promises).\n` +
        `\n### HTTP: a BufferCacheInterceptor hit, ${INTERCEPTOR_LOAD.connections} connections\n\n` +
        `An Express app whose route sits under \`BufferCacheInterceptor\` with \`@CacheTTL\` and ` +
        `no \`@CacheKey\`, every request to one URL: a hit of its URL key (the method, \`Host\` ` +
        `and URL), the stored response's status and headers replayed, \`Age\` and \`ETag\` set. ` +
        `Each build in an app process of its own under callgrind, ` +
        `${fmtInt(INTERCEPTOR_LOAD.requests)} requests a round, ` +
        `${INTERCEPTOR_LOAD.warmRounds} uncounted rounds each, then ${INTERCEPTOR_LOAD.rounds} ` +
        `counted rounds, the builds taking turns to go first. HTTP counts move with the load ` +
        `(requests read per socket read), so both builds run the same load on an otherwise ` +
        `idle app.\n\n` +
        interceptorTable,
    );
  },
};
