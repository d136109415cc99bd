import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import type { Redis } from 'ioredis';
import { medianRound, servedOrder, writeChart, type Chart } from './chart.js';
import {
  connectionPorts,
  mailbox,
  commandDelta,
  commandStats,
  describeCommands,
  fmt,
  fmtInt,
  fmtRatio,
  interleave,
  median,
  monitorCommands,
  type MonitoredCommands,
  processCpuSeconds,
  REPORTS_AFTER,
  selected,
  sleep,
  summarize,
  table,
  target,
  type BenchContext,
  type BenchSection,
} from './harness.js';
import {
  CACHE_STRATEGIES,
  HIT_ROUTES,
  L1_MAX_AGE,
  L1_ROUTE,
  ONE_URL_ROUTE,
  L1_STRATEGY,
  type CacheMode,
  type CacheRound,
  type CacheServerMessage,
  type FromCacheWorker,
} from './cache.protocol.js';

const WORKERS = 4;
const FULL = { callers: 250, buildMs: 200 };
const QUICK = { callers: 50, buildMs: 100 };
/** After the last caller is served: time for releases and unsubscribes to land. */
const SETTLE_MS = 300;
/** How long a stale round waits after priming: past the 300 ms ttl the workers give entries. */
const STALE_AFTER_MS = 500;
/** Commands of a lock (in scripts too, as commandstats counts them): none may come with a hit. */
const LOCK_COMMANDS = new Set([
  'set',
  'del',
  'unlink',
  'pexpire',
  'pttl',
  'publish',
  'spublish',
  'subscribe',
  'ssubscribe',
  'unsubscribe',
  'sunsubscribe',
]);

interface HitLoad {
  readonly rps: number;
  readonly p50: number;
  readonly p99: number;
  readonly commandsPerRequest: number;
  readonly lockCommandsPerRequest: number;
  readonly serverCpuUs: number;
  readonly failures: number;
}

let nextId = 0;

async function hitLoad(
  port: number,
  route: string,
  connections: number,
  seconds: number,
  admin: Redis,
  serverPid: number,
): Promise<HitLoad> {
  const before = await commandStats(admin);
  const cpu0 = processCpuSeconds(serverPid);
  const result = await autocannon({
    url: `http://127.0.0.1:${port}`,
    connections,
    duration: seconds,
    requests: [
      {
        method: 'GET',
        setupRequest: (request) => ({
          ...request,
          path: route === ONE_URL_ROUTE ? `/${route}/1` : `/${route}/${nextId++}`,
        }),
      },
    ],
  });
  const cpu = processCpuSeconds(serverPid) - cpu0;
  const delta = commandDelta(before, await commandStats(admin));
  const requests = Math.max(1, result['2xx'] + result.non2xx);
  let lock = 0;
  for (const [name, calls] of delta.byCommand) if (LOCK_COMMANDS.has(name)) lock += calls;
  return {
    rps: result['2xx'] / result.duration,
    p50: result.latency.p50,
    p99: result.latency.p99,
    commandsPerRequest: delta.total / requests,
    lockCommandsPerRequest: lock / requests,
    serverCpuUs: (cpu * 1e6) / requests,
    failures: result.non2xx + result.errors,
  };
}

/**
 * Requests the l1 route until one sends nothing to Redis: its tier subscribes on first use, and
 * a copy is kept at most maxAge (the rounds of the other routes outlast it).
 */
async function warmL1(port: number, admin: Redis): Promise<void> {
  const deadline = Date.now() + 5000;
  while (Date.now() < deadline) {
    const before = await commandStats(admin);
    const response = await fetch(`http://127.0.0.1:${port}/${L1_ROUTE}/warm-up`);
    await response.arrayBuffer();
    if (commandDelta(before, await commandStats(admin)).total === 0) return;
    await sleep(5);
  }
  throw new Error(`${L1_ROUTE}: every request still reaches Redis after 5 s`);
}

async function hitPath(context: BenchContext): Promise<void> {
  const { quick, redis, report } = context;
  const server = fork(fileURLToPath(new URL('./cache.server.js', import.meta.url)), [], {
    env: { ...process.env, BENCH_REDIS_PORT: String(redis.port) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const exited = new Promise((resolve) => server.once('exit', resolve));
  const admin = redis.client();
  try {
    const { port, l1Port } = await new Promise<CacheServerMessage>((resolve, reject) => {
      server.once('message', resolve);
      server.once('exit', (code) => reject(new Error(`cache server exited with ${code}`)));
    });
    const rounds = quick ? 1 : 5;
    const seconds = quick ? 1 : 3;
    const levels = [16, 64];
    const runs = levels.flatMap((connections) =>
      HIT_ROUTES.map(({ route }) => ({ route, connections })),
    );
    const results = new Map<(typeof runs)[number], HitLoad[]>(runs.map((r) => [r, []]));
    await interleave(
      runs,
      rounds,
      1,
      async (run, round) => {
        report.progress(
          `cache hit path: ${run.route}, ${run.connections} connections, round ${round}`,
        );
        const l1 = run.route === L1_ROUTE;
        if (l1) await warmL1(l1Port, admin);
        return hitLoad(
          l1 ? l1Port : port,
          run.route,
          run.connections,
          round < 0 ? 1 : seconds,
          admin,
          server.pid!,
        );
      },
      (run, load) => results.get(run)!.push(load),
    );
    const rows: string[][] = [];
    for (const connections of levels) {
      const of = (route: string): HitLoad[] =>
        results.get(runs.find((r) => r.route === route && r.connections === connections)!)!;
      const aside = of('aside');
      for (const { route, label } of HIT_ROUTES) {
        const loads = of(route);
        const ratio = median(loads.map((l, i) => l.rps / aside[i]!.rps));
        const lock = Math.max(...loads.map((l) => l.lockCommandsPerRequest));
        rows.push([
          label,
          String(connections),
          fmtInt(median(loads.map((l) => l.rps))),
          fmtRatio(ratio),
          fmt(median(loads.map((l) => l.p50)), 2),
          fmt(median(loads.map((l) => l.p99)), 2),
          fmt(median(loads.map((l) => l.commandsPerRequest)), 2),
          fmt(lock, 2),
          fmt(median(loads.map((l) => l.serverCpuUs)), 0),
          String(loads.reduce((n, l) => n + l.failures, 0)),
        ]);
        if (route.startsWith('buffer-cache')) {
          const form = route === 'buffer-cache' ? 'getOrSet(key, f, { ttl })' : 'getOrSet(key, f)';
          target(
            `cache hit path, ${form} (${connections} connections): ≥ 0.95× hand-written cache-aside`,
            fmtRatio(ratio),
            ratio >= 0.95,
          );
          target(
            `cache hit path, ${form} (${connections} connections): 0 lock commands per hit`,
            `${fmt(lock, 3)} (max over rounds)`,
            lock === 0,
          );
        }
        if (route === L1_ROUTE) {
          // What no cache can pass: the same route answering a constant.
          const constant = of('constant');
          const ceiling = median(constant.map((l, i) => l.rps / aside[i]!.rps));
          target(
            `HTTP hot route with l1 (@Cached, ${connections} connections): ≥ 1.3× the ` +
              `hand-written cache-aside route`,
            `${fmtRatio(ratio)} (${fmtInt(median(loads.map((l) => l.rps)))} vs ` +
              `${fmtInt(median(aside.map((l) => l.rps)))} requests/s; a constant answer ` +
              `with no cache: ${fmtRatio(ceiling)})`,
            ratio >= 1.3,
          );
        }
      }
    }
    report.add(
      `### Hit path\n\n` +
        `One Nest (Express) app in its own process; every route serves the same warm entry (a ` +
        `small JSON object). **cache-aside by hand**: \`GET\` with ioredis, \`JSON.parse\`, ` +
        `return (the client has the module's client settings, \`FAIL_FAST_CLIENT_DEFAULTS\`, ` +
        `as the BufferCache route's client has). ` +
        `**BufferCache.getOrSet**: the built-in store on the lock's client (one EVALSHA of a GET ` +
        `script per hit), once with \`{ ttl }\` per call (validated on every call) and once with ` +
        `no options (the module's \`cacheDefaults\`). **@SingleFlight around the handler**: the hand-written route under ` +
        `\`@SingleFlight((id) => 'item:' + id)\`, each request a new id: a lock and a release per ` +
        `request, as today's pattern pays. **CacheInterceptor**: \`@nestjs/cache-manager\` 12 with ` +
        `\`@CacheKey\` on one key, cache-manager 7 over a Keyv **Redis** store (\`@keyv/redis\`, ` +
        `its own node-redis client) on the same Redis. **BufferCacheInterceptor (URL key)**: ` +
        `this library's interceptor with \`@CacheTTL\` and no \`@CacheKey\`, every request to one ` +
        `URL: its key from the method, \`Host\` and URL, the stored response's status and ` +
        `headers replayed, \`Age\` and \`ETag\` set (what header handling costs a hit). ` +
        `**@Cached, module l1**: a second Nest ` +
        `app in the same process (its own port), whose module is the first one's plus ` +
        `\`l1: { maxAge: ${L1_MAX_AGE} }\`, serving the same entry through ` +
        `\`@Cached('item-l1', { ttl })\`; before each of its rounds it is requested until a ` +
        `request sends nothing to Redis (a copy then lives ${L1_MAX_AGE} s at most: about one ` +
        `store read per ${L1_MAX_AGE} s under load). **no cache: a constant answer**: the same ` +
        `object returned as it is, no cache and no Redis: what the app and HTTP cost, the most ` +
        `any cache in the process can give. autocannon in the bench process, ` +
        `${rounds} round(s) of ${seconds} s per route and connection count, interleaved; ratios ` +
        `are medians of per-round ratios to the hand-written route. Lock commands: SET, DEL, ` +
        `SPUBLISH, PEXPIRE, (S)SUBSCRIBE… per request from \`INFO commandstats\`, which counts ` +
        `those run inside scripts too (max over rounds).\n\n` +
        table(
          [
            'route',
            'connections',
            'requests/s',
            'vs cache-aside',
            'p50 ms',
            'p99 ms',
            'Redis cmds/request',
            'lock cmds/request',
            'app µs CPU/request',
            'errors + non-2xx',
          ],
          rows,
        ),
    );
  } finally {
    admin.disconnect();
    if (server.connected) server.send('exit');
    const timer = setTimeout(() => server.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  }
}

interface Worker {
  readonly process: ChildProcess;
  next<T extends FromCacheWorker['type']>(type: T): Promise<Extract<FromCacheWorker, { type: T }>>;
}

function startWorker(port: number, callers: number, buildMs: number): Worker {
  const child = fork(fileURLToPath(new URL('./cache.worker.js', import.meta.url)), [], {
    env: {
      ...process.env,
      BENCH_REDIS_PORT: String(port),
      BENCH_CALLERS: String(callers),
      BENCH_BUILD_MS: String(buildMs),
    },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const take = mailbox<FromCacheWorker>(child, 'cache worker');
  return {
    process: child,
    async next(type) {
      const message = await take();
      if (message.type !== type)
        throw new Error(`expected ${type} from a worker, got ${message.type}`);
      return message as Extract<FromCacheWorker, { type: typeof type }>;
    },
  };
}

interface Round {
  readonly builds: number;
  readonly commands: number;
  readonly beyondReads: number;
  readonly busiest: string;
  readonly waited: number;
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
  readonly lastAfterBuild: number;
  readonly errors: number;
  readonly firstError?: string;
  /** Every caller's latency, for the charts. */
  readonly latencies: readonly number[];
}

function summarizeRound(
  results: readonly CacheRound[],
  before: Map<string, number>,
  after: Map<string, number>,
): Round {
  const delta = commandDelta(before, after);
  const all = results.flatMap((r) => r.latencies);
  const latencies = summarize(all);
  const buildEnds = results.flatMap((r) => r.buildEnds);
  const lastServed = Math.max(...results.map((r) => r.lastServed));
  const readCommands = results.reduce((n, r) => n + r.reads * r.commandsPerRead, 0);
  return {
    builds: results.reduce((n, r) => n + r.builds, 0),
    commands: delta.total,
    beyondReads: delta.total - readCommands,
    busiest: describeCommands(delta.byCommand),
    waited: results.reduce((n, r) => n + r.waited, 0),
    p50: latencies.p50,
    p99: latencies.p99,
    max: latencies.max,
    lastAfterBuild: buildEnds.length ? lastServed - Math.max(...buildEnds) : Number.NaN,
    errors: results.reduce((n, r) => n + r.errors, 0),
    firstError: results.find((r) => r.firstError)?.firstError,
    latencies: all,
  };
}

/** Wake-ups of the floor: a few, since each is one message. */
const WAKE_ROUNDS = 15;
/** The floor once more with the workers idle this long only: what waking idle processes costs. */
const SHORT_IDLE_MS = 5;

/**
 * One wake-up of the floor: ms from worker 0's SPUBLISH, sent `idleMs` after the last wake-up's
 * messages, until the last other worker heard it; then a pause of `pauseMs`.
 */
async function wakeUp(
  workers: readonly Worker[],
  idleMs: number,
  pauseMs: number,
): Promise<number> {
  const [publisher, ...listeners] = workers;
  const heard = listeners.map((w) => w.next('heard'));
  publisher!.process.send({ type: 'wake', idleMs });
  const { sentAt } = await publisher!.next('woke');
  const times = await Promise.all(heard);
  await sleep(pauseMs);
  return Math.max(...times.map((t) => t.at)) - sentAt;
}

/** Client commands (round trips) of the worker processes that did not run the build. */
interface WaitingTrips {
  readonly processes: number;
  readonly mean: number;
  readonly max: number;
  /** Heartbeat `PING`s of the waiting workers' subscriber connections, per worker: not counted above. */
  readonly pings: number;
  /** Client commands whose source port was no worker's connection at the end of the round. */
  readonly unattributed: number;
}

/**
 * Gives each client command MONITOR saw to the worker whose connection sent it (`ports[i]`: the
 * local ports of worker i's connections to Redis), and sums them for the workers that ran no build.
 */
function waitingTrips(
  seen: MonitoredCommands,
  results: readonly CacheRound[],
  ports: readonly ReadonlySet<number>[],
): WaitingTrips {
  const perWorker = ports.map(() => 0);
  const pingsPerWorker = ports.map(() => 0);
  let unattributed = 0;
  for (const [source, calls] of seen.bySource) {
    const port = Number(source.slice(source.lastIndexOf(':') + 1));
    const owner = ports.findIndex((own) => own.has(port));
    const pings = seen.pingsBySource.get(source) ?? 0;
    if (owner < 0) unattributed += calls;
    else {
      perWorker[owner]! += calls - pings;
      pingsPerWorker[owner]! += pings;
    }
  }
  const waitingIndex = (_: number, i: number): boolean => results[i]!.builds === 0;
  const waiting = perWorker.filter(waitingIndex);
  const pings = pingsPerWorker.filter(waitingIndex);
  return {
    processes: waiting.length,
    mean: waiting.reduce((a, b) => a + b, 0) / waiting.length,
    max: Math.max(...waiting),
    pings: pings.reduce((a, b) => a + b, 0) / (pings.length || 1),
    unattributed,
  };
}

async function stampedes(context: BenchContext): Promise<void> {
  const { quick, redis, report } = context;
  const rounds = quick ? 1 : 5;
  const { callers, buildMs } = quick ? QUICK : FULL;
  report.progress(`cache stampede: starting ${WORKERS} workers`);
  const workers = Array.from({ length: WORKERS }, () => startWorker(redis.port, callers, buildMs));
  const admin = redis.client();
  try {
    const ready = await Promise.all(workers.map((w) => w.next('ready')));
    const unavailable = ready[0]!.unavailable;
    const strategies = CACHE_STRATEGIES.filter((s) => !unavailable[s] && selected(context, s));
    // A cold key has no copy for l1 to hold: the l1 row runs in the hit and stale rounds.
    const strategiesOf = (mode: CacheMode): typeof strategies =>
      mode === 'cold' ? strategies.filter((s) => s !== L1_STRATEGY) : strategies;
    const modes: CacheMode[] = ['cold', 'hit', 'stale'];
    const results = new Map<string, Round[]>();
    const of = (mode: CacheMode, strategy: string): Round[] => {
      const name = `${mode} ${strategy}`;
      if (!results.has(name)) results.set(name, []);
      return results.get(name)!;
    };
    let serial = 0;
    let notHeld = 0;
    const trips = new Map<string, WaitingTrips>();
    const floor: number[] = [];
    const shortIdleFloor: number[] = [];
    for (const mode of modes) {
      await interleave(
        strategiesOf(mode),
        rounds,
        quick ? 0 : 1,
        async (strategy, round) => {
          report.progress(`cache stampede: ${mode}, ${strategy}, round ${round}`);
          const key = `cache:${mode}:${serial++}:${Date.now()}`;
          if (mode !== 'cold') {
            workers[0]!.process.send({ type: 'prime', strategy, key, mode });
            await workers[0]!.next('primed');
            // With l1, every worker reads the entry while it is fresh, and holds a copy of it.
            if (strategy === L1_STRATEGY) {
              for (const w of workers) w.process.send({ type: 'hold', strategy, key });
              const held = await Promise.all(workers.map((w) => w.next('held')));
              notHeld += held.filter((h) => !h.ok).length;
            }
            if (mode === 'stale') await sleep(STALE_AFTER_MS);
          }
          const before = await commandStats(admin);
          for (const w of workers) w.process.send({ type: 'go', strategy, key, mode });
          const done = await Promise.all(workers.map((w) => w.next('done')));
          await sleep(SETTLE_MS);
          return summarizeRound(
            done.map((d) => d.result),
            before,
            await commandStats(admin),
          );
        },
        (strategy, summary) => of(mode, strategy).push(summary),
      );
      if (mode !== 'cold') continue;
      // One more cold round each under MONITOR (not timed), right after the timed ones: the round
      // trips of the waiting workers of a fleet that waited a moment ago.
      for (const strategy of strategiesOf('cold')) {
        report.progress(`cache stampede: cold, ${strategy}, counting round trips with MONITOR`);
        const key = `cache:cold:${serial++}:${Date.now()}`;
        let done: CacheRound[] = [];
        let ports: Set<number>[] = [];
        const seen = await monitorCommands(redis, async () => {
          for (const w of workers)
            w.process.send({ type: 'go', strategy, key, mode: 'cold', monitored: true });
          done = (await Promise.all(workers.map((w) => w.next('done')))).map((d) => d.result);
          await sleep(SETTLE_MS);
          ports = workers.map((w) => connectionPorts(w.process.pid!, redis.port));
        });
        trips.set(strategy, waitingTrips(seen, done, ports));
      }
      // As the stampede has it (idle through a build), then back to back.
      for (const [into, idleMs, pauseMs] of [
        [floor, buildMs, 100],
        [shortIdleFloor, SHORT_IDLE_MS, 0],
      ] as const) {
        for (let i = 0; i < (quick ? 3 : WAKE_ROUNDS); i++) {
          report.progress(`cache stampede: the wake-up floor after ${idleMs} ms idle, ${i + 1}`);
          into.push(await wakeUp(workers, idleMs, pauseMs));
        }
      }
    }
    const m = (rs: readonly Round[], pick: (r: Round) => number): number => median(rs.map(pick));
    const errorText = (rs: readonly Round[]): string => {
      const errors = rs.reduce((n, r) => n + r.errors, 0);
      return errors ? `${errors}: ${rs.find((r) => r.firstError)?.firstError?.slice(0, 70)}` : '0';
    };
    const missing = (strategy: string): string[] | undefined =>
      unavailable[strategy]
        ? [strategy, unavailable[strategy]!]
        : !strategies.includes(strategy as (typeof strategies)[number])
          ? [strategy, 'not run (--filter)']
          : undefined;

    const tripText = (strategy: string): string => {
      const t = trips.get(strategy)!;
      const lost = t.unattributed ? `; ${t.unattributed} unattributed` : '';
      return t.processes === 0
        ? `– (every process built${lost})`
        : `${fmt(t.mean, 1)} (max ${t.max}, ${t.processes} processes${lost}; ` +
            `+ ${fmt(t.pings, 1)} heartbeat PINGs)`;
    };
    const chartOf = (
      mode: CacheMode,
      file: string,
      name: string,
      yScale: Chart['yScale'],
    ): string => {
      const chart = writeChart(
        context,
        file,
        {
          title: `${name}: ${WORKERS} processes × ${callers} callers, one key, ${buildMs} ms build`,
          xLabel: 'callers served, % of all (in the order they were served)',
          yLabel: 'latency from the go signal, ms',
          yScale,
          series: strategiesOf(mode).map((strategy) =>
            servedOrder(
              strategy,
              medianRound(of(mode, strategy)).latencies,
              strategy === 'BufferCache.getOrSet',
            ),
          ),
        },
        `The chart: each strategy's median round by p99, its ${WORKERS * callers} callers sorted ` +
          `by latency (every caller starts at the go signal, so this is the order in which they ` +
          `were served).`,
      );
      return chart && `\n${chart}`;
    };
    const coldRows = CACHE_STRATEGIES.filter((s) => s !== L1_STRATEGY).map((strategy) => {
      const absent = missing(strategy);
      if (absent) return [...absent, '', '', '', '', '', '', '', '', ''];
      const rs = of('cold', strategy);
      return [
        strategy,
        `${fmt(
          m(rs, (r) => r.builds),
          0,
        )} (max ${Math.max(...rs.map((r) => r.builds))})`,
        fmtInt(m(rs, (r) => r.commands)),
        fmt(m(rs, (r) => r.beyondReads) / WORKERS, 1),
        tripText(strategy),
        rs[rs.length - 1]!.busiest,
        fmt(
          m(rs, (r) => r.p50),
          1,
        ),
        fmt(
          m(rs, (r) => r.p99),
          1,
        ),
        fmt(
          m(rs, (r) => r.max),
          1,
        ),
        fmt(
          m(rs, (r) => r.lastAfterBuild),
          1,
        ),
        errorText(rs),
      ];
    });
    const staleRows = CACHE_STRATEGIES.map((strategy) => {
      const absent = missing(strategy);
      if (absent) return [...absent, '', '', '', '', '', '', ''];
      const rs = of('stale', strategy);
      const hits = of('hit', strategy);
      const hitP99 = m(hits, (r) => r.p99);
      return [
        strategy,
        `${fmt(
          m(rs, (r) => r.builds),
          0,
        )} (max ${Math.max(...rs.map((r) => r.builds))})`,
        `${fmt(
          m(rs, (r) => r.waited),
          0,
        )} (max ${Math.max(...rs.map((r) => r.waited))})`,
        fmt(
          m(rs, (r) => r.p50),
          1,
        ),
        fmt(
          m(rs, (r) => r.p99),
          1,
        ),
        fmt(hitP99, 1),
        fmt(m(rs, (r) => r.p99) - hitP99, 1),
        fmt(m(rs, (r) => r.beyondReads) / WORKERS, 1),
        errorText(rs),
      ];
    });
    report.add(
      `### Cold stampede\n\n` +
        `${WORKERS} worker processes × ${callers} concurrent callers ask for one cold key; the ` +
        `build takes ${buildMs} ms. ${rounds} round(s) per strategy, interleaved; medians over ` +
        `rounds. **BufferCache.getOrSet**: a Nest application context per worker with ` +
        `\`BufferLockModule.forRoot({ redis: url, lockTimeout: 5 })\`, the built-in store. ` +
        `**CacheInterceptor-style**: what the interceptor does per request, on cache-manager 7 ` +
        `over Keyv + \`@keyv/redis\`: get, and on a miss build and set, nothing coalesced. ` +
        `**cache-manager wrap()**: the same cache, \`wrap(key, build, ttl)\` (one flight per key ` +
        `in a process). **bentocache getOrSet**: bentocache 1.6 with its Redis (L2) layer alone ` +
        `on an ioredis 6 client (no memory layer, no bus). Commands: every command the server ` +
        `ran from the go signal until ${SETTLE_MS} ms after the last answer (\`INFO ` +
        `commandstats\`, commands inside scripts counted too); "beyond reads" leaves out the ` +
        `callers' own cache reads (one GET each, or for BufferCache one EVALSHA and the GET it ` +
        `runs per store read: overlapping lookups of one key in a process share a read), counted ` +
        `in the workers; the re-read under the lock counts as beyond. Round trips per waiting ` +
        `process: one more cold round per strategy under MONITOR (not timed), the commands ` +
        `clients sent (not those a script ran), each given to the worker whose connection sent ` +
        `it (MONITOR's source port against the local ports of each worker's connections to ` +
        `Redis, read from /proc at the end of the round), averaged over the workers whose factory ` +
        `did not run in that round ("–" when every worker built), without the PINGs a subscriber ` +
        `connection sends every 400 ms to find a silent connection (shown apart). Latency is ` +
        `per caller from the go signal; "last served" is ms from the end of the last build to the ` +
        `last answer; ${REPORTS_AFTER}. The wake-up floor, under the table: what no library goes below on this ` +
        `machine, one \`SPUBLISH\` sent by a worker as its ${buildMs} ms timer ends, until it ` +
        `reached the last of the other ${WORKERS - 1} (each on a plain ioredis subscriber), ` +
        `${quick ? 3 : WAKE_ROUNDS} times; then as many back to back, each ${SHORT_IDLE_MS} ms ` +
        `after the one before: the gap between the two is what waking processes that sat idle ` +
        `through a build costs on this machine, before any library runs.\n\n` +
        table(
          [
            'strategy',
            'builds',
            'Redis cmds',
            'cmds/process beyond reads',
            'round trips/waiting process (MONITOR)',
            'busiest commands',
            'p50 ms',
            'p99 ms',
            'max ms',
            'last served after build, ms',
            'errors',
          ],
          coldRows,
        ) +
        chartOf('cold', 'chart-cache-cold.svg', 'Cold stampede', 'linear'),
    );
    report.add(
      `### Stale stampede\n\n` +
        `The same load on an entry past its ttl: one worker primes the key, and the round starts ` +
        `${STALE_AFTER_MS} ms later. BufferCache: \`{ ttl: 0.3, grace: 60 }\`; bentocache: ` +
        `\`{ ttl: 300, grace: '1m', timeout: 0 }\` (a graced value returned at once, refreshed in ` +
        `the background); wrap(): ttl ${10_000} ms with \`refreshThreshold\` ${10_000 - 300} ms ` +
        `(its stale-while-refresh: under 300 ms of use, the value is returned and rebuilt in the ` +
        `background); CacheInterceptor-style has no grace (ttl 300 ms): its entry is gone, so ` +
        `this is a cold stampede for it. Refreshes: factory runs in the fleet (each worker waits ` +
        `${buildMs} ms + 100 ms after its last answer, so background ones count). Waited: ` +
        `callers whose value was built in the round. "hit p99" is the p99 of the same load on a ` +
        `fresh entry (${rounds} round(s) per strategy, the same way), the hit path this is held ` +
        `against. **${L1_STRATEGY}**: each worker also has the same module with ` +
        `\`l1: { maxAge: ${L1_MAX_AGE} }\` (an application context of its own), and after the ` +
        `prime every worker reads the entry with \`get()\` (which never refreshes) until a read ` +
        `sends nothing to Redis: the round then starts with a copy in each process, past its ttl, ` +
        `within grace (a copy keeps the entry's ttl and grace), and its hit round the same with ` +
        `a fresh one. Copies not held when a round began: ${notHeld}.\n\n` +
        table(
          [
            'strategy',
            'refreshes',
            'callers waited',
            'p50 ms',
            'p99 ms',
            'hit p99 ms',
            'p99 − hit p99, ms',
            'cmds/process beyond reads',
            'errors',
          ],
          staleRows,
        ) +
        chartOf('stale', 'chart-cache-stale.svg', 'Stale stampede', 'log'),
    );

    const wrapName = 'cache-manager wrap()';
    if (strategies.includes(L1_STRATEGY)) {
      const l1P99 = m(of('stale', L1_STRATEGY), (r) => r.p99);
      const wrapStaleP99 = strategies.includes(wrapName)
        ? m(of('stale', wrapName), (r) => r.p99)
        : undefined;
      target(
        "stale stampede with l1: p99 ≤ wrap()'s p99 (same run)",
        wrapStaleP99 === undefined
          ? (unavailable[wrapName] ?? 'not run (--filter)')
          : `${fmt(l1P99, 2)} ms vs ${fmt(wrapStaleP99, 2)} ms`,
        wrapStaleP99 === undefined ? undefined : l1P99 <= wrapStaleP99,
      );
    }

    const name = 'BufferCache.getOrSet';
    if (!strategies.includes(name)) return;
    const cold = of('cold', name);
    const stale = of('stale', name);
    const hit = of('hit', name);
    const coldMax = Math.max(...cold.map((r) => r.builds));
    target(
      'cold stampede: exactly 1 build (every round)',
      `max ${coldMax}`,
      coldMax === 1 && cold.every((r) => r.builds === 1),
    );
    const beyond = m(cold, (r) => r.beyondReads) / WORKERS;
    target(
      'cold stampede: ≤ 10 Redis commands per process beyond cache reads',
      fmt(beyond, 1),
      beyond <= 10,
    );
    const coldP99 = m(cold, (r) => r.p99);
    target(
      `cold stampede: p99 ≤ build + 15 ms (${buildMs + 15} ms)`,
      `${fmt(coldP99, 1)} ms`,
      coldP99 <= buildMs + 15,
    );
    target(
      `cold stampede: p99 ≤ build + 10 ms (${buildMs + 10} ms)`,
      `${fmt(coldP99, 1)} ms`,
      coldP99 <= buildMs + 10,
    );
    const wrap = 'cache-manager wrap()';
    const wrapP99 = strategies.includes(wrap) ? m(of('cold', wrap), (r) => r.p99) : undefined;
    target(
      'cold stampede: p99 ≤ cache-manager wrap() p99 in the same run',
      wrapP99 === undefined
        ? (unavailable[wrap] ?? 'not run (--filter)')
        : `${fmt(coldP99, 1)} ms vs ${fmt(wrapP99, 1)} ms`,
      wrapP99 === undefined ? undefined : coldP99 <= wrapP99,
    );
    const coldLast = m(cold, (r) => r.lastAfterBuild);
    target(
      'cold stampede: last caller ≤ 3 ms after the build ends',
      `${fmt(coldLast, 1)} ms (wake-up floor: p50 ${fmt(median(floor), 1)} ms, max ${fmt(Math.max(...floor), 1)}; ` +
        `after ${SHORT_IDLE_MS} ms idle: p50 ${fmt(median(shortIdleFloor), 1)} ms)`,
      coldLast <= 3,
    );
    const ourTrips = trips.get(name)!;
    target(
      'cold stampede: ≤ 3 round trips per waiting process',
      ourTrips.processes
        ? `${fmt(ourTrips.mean, 1)} (max ${ourTrips.max}; MONITOR, one round; the subscriber's ` +
            `heartbeat PINGs apart: ${fmt(ourTrips.pings, 1)} a process)`
        : 'no waiting process',
      ourTrips.processes ? ourTrips.max <= 3 : undefined,
    );
    const staleMax = Math.max(...stale.map((r) => r.builds));
    target(
      'stale stampede: exactly 1 refresh (every round)',
      `max ${staleMax}`,
      stale.every((r) => r.builds === 1),
    );
    const waited = Math.max(...stale.map((r) => r.waited));
    target('stale stampede: 0 callers waiting', `max ${waited}`, waited === 0);
    const gap = m(stale, (r) => r.p99) - m(hit, (r) => r.p99);
    target(
      'stale stampede: p99 within 5 ms of the hit path p99 (same load, fresh entry)',
      `${gap >= 0 ? '+' : ''}${fmt(gap, 1)} ms`,
      Math.abs(gap) <= 5,
    );
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
}

export const cacheSection: BenchSection = {
  id: 'cache',
  title: '7. Cache',
  async run(context: BenchContext) {
    context.report.add(`## 7. Cache\n`);
    await hitPath(context);
    await stampedes(context);
  },
};
