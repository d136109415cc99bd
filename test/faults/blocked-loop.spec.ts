import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { RedisLockService } from '../../lib/index.js';
import type { WorkerEvent } from '../multi-process/flight.protocol.js';
import {
  builds,
  calls,
  faultRig,
  figures,
  overlapping,
  sleep,
  startHolderAndWaiters,
  type Call,
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
const BLOCK_MS = 1500;

const NS = 'blocked:';

let admin: Redis;
/** Only for the Redis key of a cache key (`redisKey`). */
let lockKeys: RedisLockService;
const rig = faultRig((server) => {
  admin = server.client();
  lockKeys = new RedisLockService({ redis: admin, namespace: NS });
  return startHolderAndWaiters(
    server,
    NS,
    { ttl: HOLDER_TTL, lockTimeout: 0.5 },
    { ttl: WAITER_TTL, lockTimeout: WAITER_TTL - 1 },
  );
});

type Event<K extends WorkerEvent['event']> = Extract<WorkerEvent, { event: K }>;

/** The worker's events of one kind about `key` (its cache key, or its lock's Redis key). */
function eventsOf<K extends WorkerEvent['event']>(
  worker: FaultWorker,
  kind: K,
  key: string,
): Event<K>[] {
  const about = (e: WorkerEvent): boolean =>
    e.event === 'built'
      ? e.build.key === key
      : e.event === 'acquired' || e.event === 'settled'
        ? e.key === lockKeys.redisKey(key)
        : e.event === 'lockLost'
          ? e.cacheKey === key
          : e.key === key;
  return worker.events.filter((e): e is Event<K> => e.event === kind && about(e));
}

/** What one stall showed: the holder's and the waiters' calls, builds and events, and Redis. */
interface Stall {
  readonly key: string;
  readonly holder: FaultWorker;
  readonly waiters: readonly FaultWorker[];
  readonly holderCalls: readonly Call[];
  readonly waiterCalls: readonly Call[];
  /** The lock key's value and PTTL in Redis once the old holder was done, the new one not yet. */
  readonly token: string | null;
  readonly pttl: number;
}

/**
 * The holder takes `key`, blocks its event loop for BLOCK_MS, then goes on for `afterMs`; the
 * waiters (3 callers each) arrive during the stall, and the new holder builds for `buildMs`.
 */
async function stall(key: string, afterMs: number, buildMs: number): Promise<Stall> {
  const [holder, ...waiters] = rig.workers as [FaultWorker, ...FaultWorker[]];
  const began = holder.events.length;
  const held = calls(holder, {
    cmd: 'calls',
    key,
    callers: 3,
    buildMs: 50,
    blockMs: BLOCK_MS,
    afterMs,
  });
  while (!holder.events.slice(began).some((e) => e.event === 'began')) await sleep(5);
  const waited = Promise.all(
    waiters.map((w) => calls(w, { cmd: 'calls', key, callers: 3, buildMs })),
  );
  const holderCalls = await held;
  const redisKey = eventsOf(holder, 'acquired', key)[0]!.key;
  const [token, pttl] = [await admin.get(redisKey), await admin.pttl(redisKey)];
  return { key, holder, waiters, holderCalls, waiterCalls: (await waited).flat(), token, pttl };
}

/** The checks both kinds of stall share: what the old holder did to the new holder's lock. */
function expectNewHolderUntouched({
  key,
  holder,
  waiters,
  holderCalls,
  waiterCalls,
  token,
  pttl,
}: Stall): void {
  const old = eventsOf(holder, 'built', key)[0]!.build;
  const lost = eventsOf(holder, 'lockLost', key);
  const newHolder = waiters.flatMap((w) => eventsOf(w, 'acquired', key));
  const all = builds(rig.workers).filter((b) => b.key === key);
  figures(`holder event loop blocked ${BLOCK_MS} ms (ttl ${HOLDER_TTL * 1000} ms), ${key}`, {
    lockLostAfterWakeMs: lost[0] ? lost[0].at - (old.startedAt + 50 + BLOCK_MS) : 'none',
    builds: all.length,
    overlappingBuilds: overlapping(all).length,
    newHolderPttlMs: pttl,
  });

  // The old holder learnt of it once awake.
  expect(lost.map((e) => [e.cacheKey, e.reason])).toEqual([[key, 'lost']]);
  expect(holderCalls.every((c) => c.value?.startedAt === old.startedAt)).toBe(true);
  // It extended or deleted nothing of the new holder's: the key holds the new token, with the
  // new holder's longer TTL.
  const extensions = eventsOf(holder, 'settled', key).filter((e) => e.op === 'extend');
  expect(extensions.every((e) => !e.done && e.error === undefined)).toBe(true);
  expect(newHolder).toHaveLength(1);
  expect(token).toBe(newHolder[0]!.token);
  expect(pttl).toBeGreaterThan(HOLDER_TTL * 1000);
  expect(newHolder[0]!.fence).toBeGreaterThan(old.fence!);
  // One duplicate build, the old holder's; every waiter got the new holder's result.
  expect(all).toHaveLength(2);
  expect(overlapping(all)).toHaveLength(1);
  expect(waiterCalls.filter((c) => c.error !== undefined)).toEqual([]);
  const fresh = all.find((b) => b.fence === newHolder[0]!.fence)!;
  expect(waiterCalls.every((c) => c.value?.startedAt === fresh.startedAt)).toBe(true);
  for (const w of waiters) expect(eventsOf(w, 'lockLost', key)).toEqual([]);
}

describe("the holder's event loop blocked for longer than its TTL", () => {
  it('work that goes on after waking: its next extension is refused, lockLost fires and its signal aborts; the new holder keeps its lock; at most one duplicate build', async () => {
    const seen = await stall('goes-on', 400, 2000);
    const extensions = eventsOf(seen.holder, 'settled', seen.key).filter((e) => e.op === 'extend');
    expect(extensions.length).toBeGreaterThan(0);
    expect(eventsOf(seen.holder, 'built', seen.key)[0]!.build.aborted).toBe(true);
    expectNewHolderUntouched(seen);
  });

  it('work that returns right on waking (a synchronous build): lockLost still fires; the new holder keeps its lock; at most one duplicate build', async () => {
    const seen = await stall('returns', 0, 1200);
    expectNewHolderUntouched(seen);
  });
});
