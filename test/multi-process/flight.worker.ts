/**
 * A worker process of test/multi-process/single-flight.spec.ts and test/faults/: a Nest
 * application context with BufferLockModule (share: true, fencing: true) and @SingleFlight
 * methods, driven over IPC.
 * Environment: REDIS_URL (standalone) or CLUSTER_PORTS (comma separated, a Cluster), NS, TTL,
 * LOCK_TIMEOUT, and BUFFER_LOCK_CLIENT_FAMILY: the client family of a standalone Redis (default
 * ioredis; see test/support/client-families.ts); CLIENT=fail-fast has the module build the client
 * from ioredis options (so with FAIL_FAST_CLIENT_DEFAULTS) with COMMAND_TIMEOUT ms instead;
 * REPORT=1 sends events (builds, acquires, extends, releases, lost locks) as they happen.
 */
/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cluster } from 'ioredis';
import {
  BufferLockModule,
  RedisLockService,
  SingleFlight,
  SingleFlightEngine,
  type ExtendResult,
  type LockGuard,
  type ReleaseResult,
} from '../../lib/index.js';
import { ACQUIRE_KEY } from '../../lib/lock/redis-lock.service.js';
import { FAMILY_ENV, lockFamily } from '../support/client-families.js';
import type { Build, Built, Call, Command, Reply, WorkerEvent } from './flight.protocol.js';

const send = (reply: Reply): void => void process.send!(reply);
const reporting = process.env['REPORT'] === '1';
const report = (event: WorkerEvent): void => {
  if (reporting) send(event);
};
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** The real lock service, with its acquire calls counted. */
@Injectable()
class CountingLock extends RedisLockService {
  acquires = 0;
  // The engine acquires by the Redis key it derived already.
  override async [ACQUIRE_KEY](...args: Parameters<RedisLockService[typeof ACQUIRE_KEY]>) {
    this.acquires++;
    const result = await super[ACQUIRE_KEY](...args);
    const [guard] = result;
    if (guard) {
      const { fence } = guard;
      report({ event: 'acquired', pid: process.pid, ...token(guard), fence, at: Date.now() });
    }
    return result;
  }

  override async extend(guard: LockGuard, ttl?: number): Promise<ExtendResult> {
    const result = await super.extend(guard, ttl);
    report(settled('extend', guard, result));
    return result;
  }

  override async release(guard: LockGuard): Promise<ReleaseResult> {
    const result = await super.release(guard);
    report(settled('release', guard, result));
    return result;
  }
}

const token = (guard: LockGuard): { key: string; token: string } => ({
  key: guard.key,
  token: guard.token,
});

function settled(
  op: 'extend' | 'release',
  guard: LockGuard,
  [done, error]: ExtendResult | ReleaseResult,
): WorkerEvent {
  return {
    event: 'settled',
    pid: process.pid,
    op,
    ...token(guard),
    done,
    error: error?.code,
    at: Date.now(),
  };
}

@Injectable()
class Builder {
  runs = 0;

  @SingleFlight((key: string) => key)
  async build(key: string, buildMs: number): Promise<Built> {
    this.runs++;
    const startedAt = Date.now();
    send({ started: key, pid: process.pid });
    await new Promise((r) => setTimeout(r, buildMs));
    return { pid: process.pid, startedAt, finishedAt: Date.now() };
  }

  @SingleFlight((key: string) => key, { share: false })
  async fence(_key: string): Promise<number | undefined> {
    return SingleFlight.fence();
  }

  /** Waits `buildMs`, then blocks the event loop for `blockMs`, then waits `afterMs` again. */
  @SingleFlight((key: string) => key)
  async work(key: string, buildMs: number, blockMs = 0, afterMs = 0): Promise<Build> {
    this.runs++;
    const startedAt = Date.now();
    const signal = SingleFlight.signal();
    report({ event: 'began', key, pid: process.pid, at: startedAt, fence: SingleFlight.fence() });
    if (buildMs > 0) await sleep(buildMs);
    // Synchronous on purpose: no timer, socket or IPC message is served meanwhile.
    for (const until = Date.now() + blockMs; Date.now() < until;);
    if (afterMs > 0) await sleep(afterMs);
    const build: Build = {
      key,
      pid: process.pid,
      startedAt,
      finishedAt: Date.now(),
      fence: SingleFlight.fence(),
      aborted: signal.aborted,
    };
    report({ event: 'built', build });
    return build;
  }
}

/** One call of `work`, timed, its error as text. */
async function call(run: () => Promise<Build>): Promise<Call> {
  const calledAt = Date.now();
  try {
    const value = await run();
    return { calledAt, resolvedAt: Date.now(), value };
  } catch (error) {
    return { calledAt, resolvedAt: Date.now(), error: String(error) };
  }
}

const ports = process.env['CLUSTER_PORTS']?.split(',').map(Number);
const url = new URL(process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379');
const redis = ports
  ? () => new Cluster(ports.map((port) => ({ host: '127.0.0.1', port })))
  : process.env['CLIENT'] === 'fail-fast'
    ? {
        host: url.hostname,
        port: Number(url.port),
        commandTimeout: Number(process.env['COMMAND_TIMEOUT'] ?? 1000),
      }
    : () => lockFamily(process.env[FAMILY_ENV]).connect({ port: Number(url.port) });

@Module({
  imports: [
    BufferLockModule.forRoot({
      redis,
      namespace: process.env['NS'] ?? 'mp:',
      ttl: Number(process.env['TTL'] ?? 10),
      lockTimeout: Number(process.env['LOCK_TIMEOUT'] ?? 8),
      share: true,
      fencing: true,
      logger: { log() {}, warn() {}, error() {} },
      overrides: [{ provide: RedisLockService, useClass: CountingLock }],
    }),
  ],
  providers: [Builder],
})
class WorkerModule {}

const app = await NestFactory.createApplicationContext(WorkerModule, { logger: false });
app.enableShutdownHooks();
const builder = app.get(Builder);
const lock = app.get(RedisLockService) as CountingLock;
await lock.getClient(); // connected before the parent fires
app
  .get(SingleFlightEngine)
  .on('lockLost', ({ cacheKey, reason }) =>
    report({ event: 'lockLost', pid: process.pid, cacheKey, reason, at: Date.now() }),
  );

process.on('message', (command: Command) => {
  void handle(command).catch((error: unknown) =>
    send({ id: command.id, error: error instanceof Error ? error.stack! : String(error) }),
  );
});
process.on('disconnect', () => void app.close().then(() => process.exit(0)));

async function handle(command: Command): Promise<void> {
  if (command.cmd === 'fence') {
    return send({ id: command.id, fence: await builder.fence(command.key) });
  }
  if (command.cmd === 'calls') {
    const { key, buildMs, blockMs, afterMs } = command;
    const calls = await Promise.all(
      Array.from({ length: command.callers }, () =>
        call(() => builder.work(key, buildMs, blockMs, afterMs)),
      ),
    );
    return send({ id: command.id, calls });
  }
  if (command.cmd === 'load') {
    const { prefix, durationMs, gapMs } = command;
    const end = Date.now() + durationMs;
    const loops = Array.from({ length: command.loops }, async (_, i) => {
      const calls: Call[] = [];
      while (Date.now() < end) {
        calls.push(await call(() => builder.work(`${prefix}${i}`, 0)));
        await sleep(gapMs);
      }
      return calls;
    });
    return send({ id: command.id, calls: (await Promise.all(loops)).flat() });
  }
  const acquiresBefore = lock.acquires;
  const runsBefore = builder.runs;
  const results = await Promise.all(
    Array.from({ length: command.callers }, async () => {
      const value = await builder.build(command.key, command.buildMs);
      return { value, resolvedAt: Date.now() };
    }),
  );
  send({
    id: command.id,
    results,
    acquires: lock.acquires - acquiresBefore,
    runs: builder.runs - runsBefore,
  });
}

send({ ready: true, pid: process.pid });
