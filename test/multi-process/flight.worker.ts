/**
 * A worker process of test/multi-process/single-flight.spec.ts: a Nest application context with
 * BufferLockModule (share: true, fencing: true) and a @SingleFlight method, driven over IPC.
 * Environment: REDIS_URL (standalone) or CLUSTER_PORTS (comma separated, a Cluster), NS, TTL,
 * LOCK_TIMEOUT, and BUFFER_LOCK_CLIENT_FAMILY: the client family of a standalone Redis (default
 * ioredis; see test/support/client-families.ts).
 */
/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cluster } from 'ioredis';
import { BufferLockModule, RedisLockService, SingleFlight } from '../../lib/index.js';
import { ACQUIRE_KEY } from '../../lib/lock/redis-lock.service.js';
import { FAMILY_ENV, lockFamily } from '../support/client-families.js';
import type { Built, Command, Reply } from './flight.protocol.js';

const send = (reply: Reply): void => void process.send!(reply);

/** The real lock service, with its acquire calls counted. */
@Injectable()
class CountingLock extends RedisLockService {
  acquires = 0;
  // The engine acquires by the Redis key it derived already.
  override [ACQUIRE_KEY](...args: Parameters<RedisLockService[typeof ACQUIRE_KEY]>) {
    this.acquires++;
    return super[ACQUIRE_KEY](...args);
  }
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
}

const ports = process.env['CLUSTER_PORTS']?.split(',').map(Number);
const redis = ports
  ? () => new Cluster(ports.map((port) => ({ host: '127.0.0.1', port })))
  : () =>
      lockFamily(process.env[FAMILY_ENV]).connect({
        port: Number(new URL(process.env['REDIS_URL']!).port),
      });

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
