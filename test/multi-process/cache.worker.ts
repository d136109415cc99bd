/**
 * A worker process of test/multi-process/cache-stampede.spec.ts: a Nest application context with
 * BufferLockModule.forRoot({ redis: url }) and a method that reads through BufferCache.getOrSet,
 * driven over IPC. Environment: REDIS_URL, NS, and L1 (the module's `l1` option as JSON, if any).
 */
/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import 'reflect-metadata';
import { Inject, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BufferCache, BufferLockModule, SingleFlightEngine } from '../../lib/index.js';
import { CROSS_PROCESS } from '../../lib/single-flight/single-flight.engine.js';
import type { Built, CacheCommand, CacheReply, FactoryRun } from './cache.protocol.js';

const send = (reply: CacheReply): void => void process.send!(reply);

const runs: FactoryRun[] = [];
const built: { key: string; at: number }[] = [];
let taggedBuilds = 0;

@Injectable()
class Reports {
  constructor(@Inject(BufferCache) private readonly cache: BufferCache) {}

  report(
    key: string,
    buildMs: number,
    ttl: number,
    grace: number,
    beta = 0,
    padBytes = 0,
  ): Promise<Built & { pad?: string }> {
    return this.cache.getOrSet(
      key,
      async () => {
        const run: { -readonly [K in keyof FactoryRun]: FactoryRun[K] } = {
          key,
          pid: process.pid,
          startedAt: Date.now(),
          finishedAt: undefined,
        };
        runs.push(run);
        send({ started: key, pid: process.pid });
        await new Promise((r) => setTimeout(r, buildMs));
        run.finishedAt = Date.now();
        const made = { pid: process.pid, startedAt: run.startedAt, finishedAt: run.finishedAt };
        return padBytes > 0 ? { ...made, pad: 'x'.repeat(padBytes) } : made;
      },
      { ttl, grace, earlyRefresh: beta > 0 ? beta : false },
    );
  }
}

@Module({
  imports: [
    BufferLockModule.forRoot({
      redis: process.env['REDIS_URL']!,
      namespace: process.env['NS'] ?? 'mp:cache:',
      logger: { log() {}, warn() {}, error() {} },
      ...(process.env['L1'] ? { l1: JSON.parse(process.env['L1']) as object } : {}),
    }),
  ],
  providers: [Reports],
})
class WorkerModule {}

const app = await NestFactory.createApplicationContext(WorkerModule, { logger: false });
app.enableShutdownHooks();
const reports = app.get(Reports);
const cache = app.get(BufferCache);
cache.on('built', (key) => void built.push({ key, at: Date.now() }));

// Every cross-process build (lock, factory, write and release) the cache starts, tracked until it
// ends, so that `settle` can tell when this worker has nothing left in flight.
const engine = app.get(SingleFlightEngine);
const crossProcess = engine[CROSS_PROCESS].bind(engine);
const inFlight = new Set<Promise<unknown>>();
let attempts = 0;
engine[CROSS_PROCESS] = ((...args: Parameters<typeof crossProcess>) => {
  attempts++;
  const flight = crossProcess(...args);
  const tracked = flight.then(
    () => undefined,
    () => undefined,
  );
  inFlight.add(tracked);
  void tracked.then(() => inFlight.delete(tracked));
  return flight;
}) as typeof crossProcess;

// Connected (and the GET script loaded) before the parent fires.
await cache.get('warm-up');

process.on('message', (command: CacheCommand) => {
  void handle(command).catch((error: unknown) =>
    send({ id: command.id, error: error instanceof Error ? error.stack! : String(error) }),
  );
});
process.on('disconnect', () => void app.close().then(() => process.exit(0)));

async function handle(command: CacheCommand): Promise<void> {
  if (command.cmd === 'settle') {
    while (inFlight.size > 0) await Promise.all(inFlight);
    return send({ id: command.id, runs, built, attempts });
  }
  if (command.cmd === 'read') {
    return send({ id: command.id, value: (await cache.get(command.key)) ?? null });
  }
  if (command.cmd === 'write') {
    const { key, value } = command;
    await (value === null ? cache.delete(key) : cache.set(key, value));
    return send({ id: command.id, done: true });
  }
  if (command.cmd === 'tagged') {
    const { key, tags } = command;
    const value = await cache.getOrSet(key, () => `${process.pid}:${++taggedBuilds}`, { tags });
    return send({ id: command.id, value });
  }
  if (command.cmd === 'untag') {
    await cache.deleteByTag(command.tags);
    return send({ id: command.id, done: true });
  }
  if (command.cmd === 'hot') {
    const { key, buildMs, ttl, beta, forMs, everyMs } = command;
    let misses = 0;
    const counted = (at: string): void => void (at === key && misses++);
    cache.on('miss', counted);
    let reads = 0;
    for (const end = Date.now() + forMs; Date.now() < end; reads++) {
      await reports.report(key, buildMs, ttl, 0, beta);
      await new Promise((r) => setTimeout(r, everyMs));
    }
    cache.off('miss', counted);
    return send({ id: command.id, reads, misses });
  }
  const { key, buildMs, ttl, grace, padBytes } = command;
  const results = await Promise.all(
    Array.from({ length: command.callers }, async () => {
      const { pad, ...value } = await reports.report(key, buildMs, ttl, grace, 0, padBytes);
      const answeredAt = Date.now();
      return { value: pad === undefined ? value : { ...value, padBytes: pad.length }, answeredAt };
    }),
  );
  send({ id: command.id, results });
}

send({ ready: true, pid: process.pid });
