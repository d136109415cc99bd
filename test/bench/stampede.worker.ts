// One worker process of the stampede benchmark: 250 concurrent callers per `go`, each asking for
// the same cold key through one strategy. Started by stampede.bench.ts with fork().
import 'reflect-metadata';
import { createRequire } from 'node:module';
import {
  Injectable,
  Module,
  type DynamicModule,
  type INestApplicationContext,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExecutionError, Redlock } from '@sesamecare-oss/redlock';
import { Redis } from 'ioredis';
import { MurLock, MurLockModule } from 'murlock';
import { Mutex } from 'redis-semaphore';
import { decorate, singleFlightApi, type MethodDecoratorFn } from './features.js';
import { epochMs, NOT_AVAILABLE, REPORT_AFTER_MS, sleep } from './harness.js';
import type { FromWorker, ToWorker, WorkerRound } from './stampede.protocol.js';

const port = Number(process.env['BENCH_REDIS_PORT']);
const callers = Number(process.env['BENCH_CALLERS'] ?? 250);
const buildMs = Number(process.env['BENCH_BUILD_MS'] ?? 200);
const url = `redis://127.0.0.1:${port}`;

const cache = new Redis({ port, host: '127.0.0.1' });
let builds = 0;
let buildEnds: number[] = [];

/** The code every strategy protects: read the cache, else build for `buildMs` and cache. */
async function getOrBuild(key: string): Promise<string> {
  const hit = await cache.get(key);
  if (hit !== null) return hit;
  builds++;
  await sleep(buildMs);
  const value = `report for ${key}`;
  await cache.set(key, value, 'PX', 60_000);
  buildEnds.push(epochMs());
  return value;
}

type Call = (key: string) => Promise<unknown>;

const strategies = new Map<string, Call>();
const unavailable: Record<string, string> = {};
const apps: INestApplicationContext[] = [];

async function setUp(): Promise<void> {
  strategies.set('no lock', getOrBuild);

  // The peers' documented pattern: cache check, lock with default retries, check again, build.
  const redlock = new Redlock([new Redis({ port, host: '127.0.0.1' })]);
  strategies.set('@sesamecare-oss/redlock (defaults)', async (key) => {
    const hit = await cache.get(key);
    if (hit !== null) return hit;
    const lock = await redlock.acquire([`lock:${key}`], 10_000);
    try {
      return await getOrBuild(key);
    } finally {
      await lock.release().catch((error: unknown) => {
        if (!(error instanceof ExecutionError)) throw error;
      });
    }
  });
  const semaphoreClient = new Redis({ port, host: '127.0.0.1' });
  strategies.set('redis-semaphore Mutex (defaults)', async (key) => {
    const hit = await cache.get(key);
    if (hit !== null) return hit;
    const mutex = new Mutex(semaphoreClient, key);
    await mutex.acquire();
    try {
      return await getOrBuild(key);
    } finally {
      await mutex.release();
    }
  });

  await setUpSingleFlight();
  await setUpMurLock();
  await setUpNestRedlock();
}

interface NestRedlockExports {
  Redlock(key: (target: unknown, key: string) => string, duration?: number): MethodDecoratorFn;
  RedlockModule: { register(options: { clients: Redis[] }): DynamicModule };
}

/**
 * @anchan828/nest-redlock with its defaults (redlock 5: 10 retries, 200 ms apart, 100 ms jitter).
 * Its ESM build does not load (extensionless imports), so its CommonJS build is required.
 */
async function setUpNestRedlock(): Promise<void> {
  const name = '@anchan828/nest-redlock @Redlock';
  try {
    const { Redlock: RedlockDecorator, RedlockModule } = createRequire(import.meta.url)(
      '@anchan828/nest-redlock',
    ) as NestRedlockExports;
    class NestRedlockReports {
      build(key: string): Promise<string> {
        return getOrBuild(key);
      }
    }
    Injectable()(NestRedlockReports);
    decorate(
      NestRedlockReports.prototype,
      'build',
      RedlockDecorator((_target, key) => `lock:${key}`, 10_000),
    );
    // oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class is empty
    const NestRedlockApp = class {};
    Module({
      imports: [RedlockModule.register({ clients: [new Redis({ port, host: '127.0.0.1' })] })],
      providers: [NestRedlockReports],
    })(NestRedlockApp);
    const app = await NestFactory.createApplicationContext(NestRedlockApp, { logger: false });
    apps.push(app);
    const reports = app.get(NestRedlockReports);
    strategies.set(name, (key) => reports.build(key));
  } catch (error) {
    unavailable[name] =
      `failed to start: ${error instanceof Error ? error.message : String(error)}`;
  }
}

async function setUpSingleFlight(): Promise<void> {
  const api = await singleFlightApi();
  if (!api) {
    unavailable['@SingleFlight wait'] = `${NOT_AVAILABLE} (no SingleFlight export)`;
    unavailable['@SingleFlight share'] = `${NOT_AVAILABLE} (no SingleFlight export)`;
    return;
  }
  class Reports {
    wait(key: string): Promise<string> {
      return getOrBuild(key);
    }
    share(key: string): Promise<string> {
      return getOrBuild(key);
    }
  }
  Injectable()(Reports);
  decorate(
    Reports.prototype,
    'wait',
    api.SingleFlight((key: string) => key),
  );
  if (api.supports('share', true)) {
    decorate(
      Reports.prototype,
      'share',
      api.SingleFlight((key: string) => key, { share: true }),
    );
  } else {
    unavailable['@SingleFlight share'] = `${NOT_AVAILABLE} (no share option)`;
  }
  // oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class is empty
  const SingleFlightApp = class {};
  Module({
    imports: [
      api.BufferLockModule.forRoot({ redis: url, namespace: 'bench:sf:', ttl: 10, lockTimeout: 5 }),
    ],
    providers: [Reports],
  })(SingleFlightApp);
  const app = await NestFactory.createApplicationContext(SingleFlightApp, { logger: false });
  apps.push(app);
  const reports = app.get(Reports);
  strategies.set('@SingleFlight wait', (key) => reports.wait(key));
  if (!unavailable['@SingleFlight share']) {
    strategies.set('@SingleFlight share', (key) => reports.share(key));
  }
}

/**
 * murlock has no default retry settings; 10 attempts, waiting 100 ms × attempt (5.5 s in all).
 * Quick mode: 5 attempts (1.5 s), to keep the smoke test short.
 */
async function setUpMurLock(): Promise<void> {
  try {
    class MurLockReports {
      build(key: string): Promise<string> {
        return getOrBuild(key);
      }
    }
    Injectable()(MurLockReports);
    decorate(MurLockReports.prototype, 'build', MurLock(10_000, '0') as never);
    // oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class is empty
    const MurLockApp = class {};
    Module({
      imports: [
        MurLockModule.forRoot({
          redisOptions: { url },
          wait: 100,
          maxAttempts: process.env['BENCH_QUICK'] ? 5 : 10,
          logLevel: 'none',
        }),
      ],
      providers: [MurLockReports],
    })(MurLockApp);
    const app = await NestFactory.createApplicationContext(MurLockApp, { logger: false });
    apps.push(app);
    const reports = app.get(MurLockReports);
    strategies.set('murlock @MurLock', (key) => reports.build(key));
  } catch (error) {
    unavailable['murlock @MurLock'] =
      `failed to start: ${error instanceof Error ? error.message : String(error)}`;
  }
}

async function go(strategy: string, key: string): Promise<WorkerRound> {
  const call = strategies.get(strategy);
  if (!call) throw new Error(`strategy ${strategy} is not available`);
  builds = 0;
  buildEnds = [];
  const latencies: number[] = [];
  let lastServed = 0;
  let errors = 0;
  let firstError: string | undefined;
  const start = epochMs();
  await Promise.all(
    Array.from({ length: callers }, async () => {
      try {
        await call(key);
      } catch (error) {
        errors++;
        firstError ??= error instanceof Error ? error.message : String(error);
      }
      const now = epochMs();
      latencies.push(now - start);
      lastServed = Math.max(lastServed, now);
    }),
  );
  await sleep(REPORT_AFTER_MS);
  return { builds, buildEnds, latencies, lastServed, errors, firstError };
}

const send = (message: FromWorker): void => void process.send!(message);

process.on('message', (message: ToWorker) => {
  if (message.type === 'exit') {
    void Promise.all(apps.map((app) => app.close())).finally(() => process.exit(0));
    return;
  }
  go(message.strategy, message.key).then(
    (result) => send({ type: 'done', result }),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
});

setUp().then(
  () => send({ type: 'ready', unavailable }),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
