import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { WorkerEvent } from '../multi-process/flight.protocol.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import {
  builds,
  calls,
  compileWorkers,
  figures,
  overlapping,
  sleep,
  startWorkers,
  type FaultWorker,
} from './fault-helpers.js';

/**
 * The holder's event loop blocked (a busy loop in the worker) for longer than its TTL: no
 * extension can run, the lock expires, and a waiter in another process takes it. On waking the
 * holder must find out (its next extension answers "not ours": `lockLost`, its signal aborts) and
 * must leave the new holder's lock alone. The holder's lock lives HOLDER_TTL; the waiting
 * processes hold theirs for WAITER_TTL, so that an extension by the old holder would show in the
 * key's PTTL, and wait up to their lockTimeout, long enough to outlast the new holder's build.
 */

const HOLDER_TTL = 1;
const WAITER_TTL = 6;
const BLOCK_MS = 2000;
/** How long the holder goes on after waking (its work after the stall). */
const AFTER_MS = 400;
const BUILD_MS = 3000;

let server: RedisServer;
let admin: Redis;
let workers: FaultWorker[] = [];
beforeAll(async () => {
  await compileWorkers();
  server = await startRedis();
  admin = server.client();
  const env = { REDIS_URL: server.url, NS: 'blocked:', CLIENT: 'fail-fast', REPORT: '1' };
  workers = (
    await Promise.all([
      startWorkers(1, { ...env, TTL: String(HOLDER_TTL), LOCK_TIMEOUT: '0.5' }),
      startWorkers(2, { ...env, TTL: String(WAITER_TTL), LOCK_TIMEOUT: String(WAITER_TTL - 1) }),
    ])
  ).flat();
}, 120_000);
afterAll(async () => {
  await Promise.all(workers.map((w) => w.stop()));
  await server.stop();
});

type Event<K extends WorkerEvent['event']> = Extract<WorkerEvent, { event: K }>;
const eventsOf = <K extends WorkerEvent['event']>(worker: FaultWorker, kind: K): Event<K>[] =>
  worker.events.filter((e): e is Event<K> => e.event === kind);

describe("the holder's event loop blocked for longer than its TTL", () => {
  it('on waking it learns the lock is lost (lockLost, signal aborted), leaves the new holder its lock, and at most one duplicate build happens', async () => {
    const [holder, ...waiters] = workers as [FaultWorker, ...FaultWorker[]];
    const key = 'report';
    const held = calls(holder, {
      cmd: 'calls',
      key,
      callers: 3,
      buildMs: 50,
      blockMs: BLOCK_MS,
      afterMs: AFTER_MS,
    });
    while (eventsOf(holder, 'began').length === 0) await sleep(5);
    const waited = Promise.all(
      waiters.map((w) => calls(w, { cmd: 'calls', key, callers: 3, buildMs: BUILD_MS })),
    );
    const holderCalls = await held;
    // The old holder is done, extensions and release included; the new one still builds.
    const [redisKey, token, pttl] = [
      eventsOf(holder, 'acquired')[0]!.key,
      await admin.get(eventsOf(holder, 'acquired')[0]!.key),
      await admin.pttl(eventsOf(holder, 'acquired')[0]!.key),
    ];
    const waiterCalls = (await waited).flat();

    const newHolder = waiters.flatMap((w) => eventsOf(w, 'acquired'));
    const old = eventsOf(holder, 'built')[0]?.build;
    const all = builds(workers);
    const lost = eventsOf(holder, 'lockLost');
    const extends_ = eventsOf(holder, 'settled').filter((e) => e.op === 'extend');
    figures(`holder event loop blocked ${BLOCK_MS} ms (ttl ${HOLDER_TTL * 1000} ms)`, {
      lockLostAfterWakeMs: lost[0] ? lost[0].at - (old!.startedAt + 50 + BLOCK_MS) : 'none',
      builds: all.length,
      overlappingBuilds: overlapping(all).length,
      newHolderPttlMs: pttl,
    });

    // The old holder learnt it on waking, and its work saw the signal abort.
    expect(lost.map((e) => [e.cacheKey, e.reason])).toEqual([[key, 'lost']]);
    expect(old!.aborted).toBe(true);
    expect(holderCalls.every((c) => c.value?.startedAt === old!.startedAt)).toBe(true);
    // Its extension was refused, and it extended or deleted nothing of the new holder's.
    expect(extends_.length).toBeGreaterThan(0);
    expect(extends_.every((e) => !e.done && e.error === undefined)).toBe(true);
    expect(newHolder).toHaveLength(1);
    expect(newHolder[0]!.key).toBe(redisKey);
    expect(token).toBe(newHolder[0]!.token);
    expect(pttl).toBeGreaterThan(HOLDER_TTL * 1000);
    expect(newHolder[0]!.fence).toBeGreaterThan(old!.fence!);
    // One duplicate build, the old holder's, and every waiter got the new holder's result.
    expect(all).toHaveLength(2);
    expect(overlapping(all)).toHaveLength(1);
    expect(waiterCalls.filter((c) => c.error !== undefined)).toEqual([]);
    const fresh = all.find((b) => b.fence === newHolder[0]!.fence)!;
    expect(waiterCalls.every((c) => c.value?.startedAt === fresh.startedAt)).toBe(true);
    for (const w of waiters) expect(eventsOf(w, 'lockLost')).toEqual([]);
  });
});
