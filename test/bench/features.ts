import 'reflect-metadata';
import { Injectable, Module, type DynamicModule } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { Redis } from 'ioredis';
import {
  collectGarbage,
  commandDelta,
  commandStats,
  fmtMb,
  sleep,
  table,
  type BenchContext,
} from './harness.js';

/**
 * The library as the bench sees it: the public exports, plus the internals a section looks up by
 * name (the per-call option resolver, the defaults, the breaker, the client defaults). A row whose feature is missing
 * prints 'not available yet' instead of failing.
 */
export async function libExports(): Promise<Readonly<Record<string, unknown>>> {
  const [index, options, perCall, breaker, clients] = await Promise.all([
    import('../../lib/index.js'),
    import('../../lib/options/buffer-lock.options.js'),
    import('../../lib/options/single-flight.options.js'),
    import('../../lib/single-flight/circuit-breaker.js'),
    import('../../lib/redis/client-defaults.js'),
  ]);
  return {
    ...index,
    FAIL_FAST_CLIENT_DEFAULTS: clients.FAIL_FAST_CLIENT_DEFAULTS,
    resolveSingleFlightOptions: perCall.resolveSingleFlightOptions,
    BUFFER_LOCK_DEFAULTS: new options.BufferLockOptionsDto(),
    CircuitBreaker: breaker.CircuitBreaker,
  };
}

/** A legacy (experimentalDecorators) method decorator. */
export type MethodDecoratorFn = (
  target: object,
  propertyKey: string,
  descriptor: PropertyDescriptor,
) => unknown;

/** The part of the library's Nest surface the bench uses. */
export interface SingleFlightApi {
  readonly BufferLockModule: { forRoot(options: Record<string, unknown>): DynamicModule };
  readonly SingleFlight: (
    key: string | ((...args: never[]) => string),
    options?: Record<string, unknown>,
  ) => MethodDecoratorFn;
  /** Whether `@SingleFlight` keeps a given option (e.g. `share: true`): the feature exists. */
  supports(option: string, value: unknown): boolean;
  readonly lib: Readonly<Record<string, unknown>>;
}

/** `BufferLockModule` and `@SingleFlight`, or undefined when the library has no such exports. */
export async function singleFlightApi(): Promise<SingleFlightApi | undefined> {
  const lib = await libExports();
  const module = lib['BufferLockModule'] as { forRoot?: unknown } | undefined;
  if (typeof lib['SingleFlight'] !== 'function' || typeof module?.forRoot !== 'function') {
    return undefined;
  }
  return {
    BufferLockModule: module as SingleFlightApi['BufferLockModule'],
    SingleFlight: lib['SingleFlight'] as SingleFlightApi['SingleFlight'],
    lib,
    supports(option, value) {
      const resolve = lib['resolveSingleFlightOptions'];
      const Messages = lib['BufferLockMessages'];
      if (typeof resolve !== 'function' || typeof Messages !== 'function') return false;
      try {
        const messages: unknown = new (Messages as new () => unknown)();
        const resolved = (resolve as (o: object, m: unknown) => Record<string, unknown>)(
          { [option]: value },
          messages,
        );
        return resolved[option] === value;
      } catch {
        return false;
      }
    },
  };
}

/** Applies a method decorator at run time, as `@decorator` on the method would. */
export function decorate(target: object, method: string, decorator: MethodDecoratorFn): void {
  const descriptor = Object.getOwnPropertyDescriptor(target, method);
  if (!descriptor) throw new Error(`no method ${method}`);
  const returned = decorator(target, method, descriptor);
  Object.defineProperty(
    target,
    method,
    (returned as PropertyDescriptor | undefined) && typeof returned === 'object'
      ? (returned as PropertyDescriptor)
      : descriptor,
  );
}

/** What the memory section reports about the wake-on-release subscriber. */
export interface SubscriberProbe {
  readonly waits: number;
  readonly table: string;
  readonly summary: string;
  readonly backToBaseline: boolean;
}

const isOpen = (connection: Redis): boolean =>
  connection.status !== 'end' && connection.status !== 'close';

/** Past a channel's idle second: every wake-up subscription has ended by then. */
const IDLE_WAIT_MS = 2_500;
/** Past the 30 s the subscriber connection outlives its last subscription, for the next wait. */
const KEEP_WAIT_MS = 32_500;

const BATCH = 100;

/** Listeners on every event of an emitter. */
const listenerTotal = (emitter: Redis): number =>
  emitter.eventNames().reduce((n, name) => n + emitter.listenerCount(name), 0);

/**
 * Makes `waits` `@SingleFlight` calls wait for a holder (a lock taken with `RedisLockService`,
 * released once the call is waiting), through `BufferLockModule` with a client object whose
 * `duplicate()` is watched, so the subscriber connections the library makes can be counted.
 * Undefined when the library has no `@SingleFlight`, or waits without a subscriber (polling).
 */
export async function waitSubscriberProbe(
  context: BenchContext,
  waits: number,
): Promise<SubscriberProbe | undefined> {
  const api = await singleFlightApi();
  if (!api) return undefined;
  const { redis } = context;
  const admin = redis.client();
  const client = redis.client();
  await client.ping();
  const duplicates: Redis[] = [];
  const duplicate = client.duplicate.bind(client);
  client.duplicate = (...args: Parameters<Redis['duplicate']>): Redis => {
    const copy = duplicate(...args);
    duplicates.push(copy);
    return copy;
  };
  class Waiter {
    run(key: string): string {
      return key;
    }
  }
  Injectable()(Waiter);
  decorate(
    Waiter.prototype,
    'run',
    api.SingleFlight((key: string) => key),
  );
  // oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class is empty
  const ProbeApp = class {};
  Module({
    imports: [
      api.BufferLockModule.forRoot({
        redis: client,
        namespace: 'bench:waits:',
        ttl: 10,
        lockTimeout: 5,
      }),
    ],
    providers: [Waiter],
  })(ProbeApp);
  const app = await NestFactory.createApplicationContext(ProbeApp, { logger: false });
  try {
    const waiter = app.get(Waiter);
    type Guard = { key: string; token: string };
    const lock = app.get(
      api.lib['RedisLockService'] as new () => {
        acquire(key: string): Promise<readonly [Guard | undefined, unknown]>;
        release(guard: Guard): Promise<unknown>;
      },
    );
    collectGarbage();
    const heapBefore = process.memoryUsage().heapUsed;
    const clientsBefore = await connectionCount(admin);
    const listenersBefore = listenerTotal(client);
    const before = await commandStats(admin);
    for (let done = 0; done < waits; done += BATCH) {
      const keys = Array.from({ length: Math.min(BATCH, waits - done) }, (_, i) => `w:${done + i}`);
      const guards = await Promise.all(keys.map(async (key) => (await lock.acquire(key))[0]!));
      const calls = keys.map((key) => waiter.run(key));
      await sleep(20); // every call has found the lock busy and is waiting
      await Promise.all(guards.map((guard) => lock.release(guard)));
      await Promise.all(calls);
    }
    const subscribes = commandDelta(before, await commandStats(admin)).byCommand;
    const subscribed = (subscribes.get('ssubscribe') ?? 0) + (subscribes.get('subscribe') ?? 0);
    if (duplicates.length === 0 && subscribed === 0) return undefined;
    const duringConnections = duplicates.filter((d) => d.status !== 'end').length;
    const duringListeners = duplicates.reduce((n, d) => n + listenerTotal(d), 0);
    await sleep(IDLE_WAIT_MS);
    const channels = ((await admin.call('PUBSUB', 'SHARDCHANNELS')) as unknown[]).length;
    const kept = duplicates.filter(isOpen).length;
    await sleep(KEEP_WAIT_MS - IDLE_WAIT_MS);
    const open = duplicates.filter(isOpen);
    const subscriberListeners = open.reduce((n, d) => n + listenerTotal(d), 0);
    const clientsAfter = await connectionCount(admin);
    collectGarbage();
    const heapAfter = process.memoryUsage().heapUsed;
    const listenersAfter = listenerTotal(client);
    const backToBaseline =
      channels === 0 &&
      open.length === 0 &&
      clientsAfter === clientsBefore &&
      listenersAfter === listenersBefore;
    return {
      waits,
      backToBaseline,
      summary:
        `subscriber connections made ${duplicates.length}; after ${IDLE_WAIT_MS} ms idle ` +
        `${channels} channels, ${kept} connections kept; after ${KEEP_WAIT_MS} ms ` +
        `${open.length} open; server connections ${clientsBefore} → ${clientsAfter}; client listeners ` +
        `${listenersBefore} → ${listenersAfter}`,
      table: table(
        ['', 'value'],
        [
          ['(S)SUBSCRIBE commands during the waits', String(subscribed)],
          ['subscriber connections made (client.duplicate calls)', String(duplicates.length)],
          ['subscriber connections open right after the last wait', String(duringConnections)],
          [
            'listeners on subscriber connections right after the last wait',
            String(duringListeners),
          ],
          [`shard channels subscribed ${IDLE_WAIT_MS} ms later`, String(channels)],
          [`subscriber connections open ${IDLE_WAIT_MS} ms later (kept)`, String(kept)],
          [`subscriber connections open ${KEEP_WAIT_MS} ms later`, String(open.length)],
          ['listeners on open subscriber connections', String(subscriberListeners)],
          ['Redis server connections: before → after', `${clientsBefore} → ${clientsAfter}`],
          ['listeners on the client: before → after', `${listenersBefore} → ${listenersAfter}`],
          [
            'heap used after GC: before → after the waits',
            `${fmtMb(heapBefore)} → ${fmtMb(heapAfter)}`,
          ],
        ],
      ),
    };
  } finally {
    await app.close();
    client.disconnect();
    admin.disconnect();
  }
}

/** Connections the Redis server has open (CLIENT LIST lines), the asking one included. */
async function connectionCount(admin: Redis): Promise<number> {
  const list = (await admin.client('LIST')) as string;
  return list.split('\n').filter((line) => line.trim() !== '').length;
}
