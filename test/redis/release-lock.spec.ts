import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { derivedKey, releaseChannel, resultKey } from '../../lib/redis/keys.js';
import { claimLock, releaseLock } from '../../lib/redis/lock-commands.js';
import type { LockGuard } from '../../lib/lock/lock-results.js';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import { commandStats } from '../support/command-stats.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { recordingClient } from '../lock/lock-helpers.js';

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

/** A raw SSUBSCRIBE on the lock's release channel, recording every message in order. */
async function record(lockKey: string): Promise<{ messages: string[]; next: () => Promise<void> }> {
  const sub = server.client();
  const messages: string[] = [];
  let arrived: (() => void) | undefined;
  sub.on('smessage', (_channel: string, message: string) => {
    messages.push(message);
    arrived?.();
  });
  await sub.ssubscribe(releaseChannel(lockKey));
  const next = (): Promise<void> => new Promise((resolve) => (arrived = resolve));
  return { messages, next };
}

describe('release: wake-up published in the same script as the delete', () => {
  it('the holder’s release deletes the key and publishes exactly one wake-up', async () => {
    const lock = new RedisLockService({ redis: () => server.client(), namespace: 'rl:one:' });
    const [guard] = await lock.acquire('k');
    expect(releaseChannel(guard!.key)).toBe(guard!.key);
    const sub = await record(guard!.key);
    const woken = sub.next();
    expect(await lock.release(guard!)).toEqual([true, undefined]);
    await woken;
    // The wake-up's text is the released token: the waiters only need to hear that it went.
    expect(sub.messages).toEqual([guard!.token]);
    expect(await server.client().exists(guard!.key)).toBe(0);
  });

  it('a release with another holder’s token neither deletes nor publishes', async () => {
    const lock = new RedisLockService({ redis: () => server.client(), namespace: 'rl:other:' });
    const [guard] = await lock.acquire('k');
    const sub = await record(guard!.key);
    const woken = sub.next();
    expect(await lock.release({ key: guard!.key, token: 'not-the-token' })).toEqual([
      true,
      undefined,
    ]);
    expect(await server.client().get(guard!.key)).toBe(guard!.token);
    // Messages on one connection keep their order: had the first release published, its message
    // would arrive before this one.
    await lock.release(guard!);
    await woken;
    expect(sub.messages).toEqual([guard!.token]);
  });

  it('a release after expiry answers [true] and publishes nothing', async () => {
    const lock = new RedisLockService({ redis: () => server.client(), namespace: 'rl:exp:' });
    const [expired] = await lock.acquire('k', 0.05);
    const sub = await record(expired!.key);
    while ((await server.client().exists(expired!.key)) === 1) {
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(await lock.release(expired!)).toEqual([true, undefined]);
    const [fresh] = await lock.acquire('k');
    const woken = sub.next();
    await lock.release(fresh!);
    await woken;
    expect(sub.messages).toEqual([fresh!.token]);
  });

  it('a key with braces (a hash-tag subclass) publishes on the same channel as releaseChannel', async () => {
    class Tagged extends RedisLockService {
      protected override key(cacheKey: string): string {
        return `{tagged}${this.namespace}${cacheKey}`;
      }
    }
    const lock = new Tagged({ redis: () => server.client(), namespace: 'rl:tag:' });
    const [guard] = await lock.acquire('k');
    expect(guard!.key).toBe('{tagged}rl:tag:k');
    // releaseChannel('{tagged}rl:tag:k') = '{tagged}rl:tag:k'
    const sub = await record(guard!.key);
    const woken = sub.next();
    expect(await lock.release(guard!)).toEqual([true, undefined]);
    await woken;
    expect(sub.messages).toEqual([guard!.token]);
    expect(await server.client().exists(guard!.key)).toBe(0);
  });

  it('costs one EVALSHA per release, publish included', async () => {
    const lock = new RedisLockService({ redis: () => server.client(), namespace: 'rl:cost:' });
    const [guard] = await lock.acquire('k');
    const admin = server.client();
    const calls = async (): Promise<Record<string, number>> => {
      const info = await admin.info('commandstats');
      const counts: Record<string, number> = {};
      for (const [, name, n] of info.matchAll(/cmdstat_(\w+):calls=(\d+)/g))
        counts[name!] = Number(n);
      return counts;
    };
    const before = await calls();
    await lock.release(guard!);
    const after = await calls();
    expect((after.evalsha ?? 0) - (before.evalsha ?? 0)).toBe(1);
    // Commands a script runs are counted too: GET, DEL and SPUBLISH, once each.
    for (const name of ['get', 'del', 'spublish']) {
      expect((after[name] ?? 0) - (before[name] ?? 0), name).toBe(1);
    }
  });
});

describe('release: the channel and the message are what the release sends anyway', () => {
  it('it sends the lock key (also the channel) and the token (also the message), nothing more', async () => {
    const client = recordingClient(server.client());
    const lock = new RedisLockService({ redis: client, namespace: 'rl:args:' });
    const [guard] = await lock.acquire('k');
    await server.client().script('FLUSH');
    client.calls.length = 0;
    expect(await lock.release(guard!)).toEqual([true, undefined]);
    const [evalsha, evalCall] = client.calls;
    expect(evalsha!.args.slice(1)).toEqual([1, guard!.key, guard!.token]);
    expect(evalCall!.args.slice(1)).toEqual(evalsha!.args.slice(1));
    // The script spells no channel and no message: it publishes on KEYS[1] the token ARGV[1],
    // or a payload it was given to carry.
    const source = evalCall!.args[0] as string;
    expect(source).toContain('local wake = ARGV[1]');
    expect(source).toContain("'SPUBLISH', KEYS[1], wake");
    expect(source).not.toContain(':release');
  });
});

/**
 * Runs `release` with a raw SSUBSCRIBE on the lock's channel; on the wake-up, reads `writtenKey`
 * as a woken waiter would. Resolves the release's answer, the messages and what was read.
 */
async function readOnWake(lockKey: string, writtenKey: string, release: () => Promise<unknown>) {
  const sub = server.client();
  const reader = server.client();
  await reader.ping();
  const messages: string[] = [];
  const seen: (string | null)[] = [];
  const woken = new Promise<void>((resolve) => {
    sub.on('smessage', (_channel: string, message: string) => {
      messages.push(message);
      void reader.get(writtenKey).then((value) => (seen.push(value), resolve()));
    });
  });
  await sub.ssubscribe(releaseChannel(lockKey));
  const answer = await release();
  await woken;
  return { answer, messages, seen };
}

describe('release with a write: stored or deleted in the same step, before the wake-up', () => {
  it('stores the payload under the other key with its TTL, deletes the lock, publishes once', async () => {
    const lock = new RedisLockService({ redis: server.client(), namespace: 'rl:store:' });
    const admin = server.client();
    const [guard] = await lock.acquire('k');
    const key = resultKey(guard!.key);
    const write = { key, payload: '{"total":42}', ttlMs: 5000 };
    const { answer, messages, seen } = await readOnWake(guard!.key, key, () =>
      releaseLock(admin, guard!.key, guard!.token, write),
    );
    expect(answer).toBe(1);
    expect(messages).toEqual([guard!.token]);
    expect(seen).toEqual(['{"total":42}']);
    expect(await admin.exists(guard!.key)).toBe(0);
    const pttl = await admin.pttl(key);
    expect(pttl).toBeGreaterThan(4000);
    expect(pttl).toBeLessThanOrEqual(5000);
  });

  it('an empty payload is stored, not taken for "no payload"', async () => {
    const lock = new RedisLockService({ redis: server.client(), namespace: 'rl:empty:' });
    const admin = server.client();
    const [guard] = await lock.acquire('k');
    const key = derivedKey(guard!.key, 'fence');
    expect(
      await releaseLock(admin, guard!.key, guard!.token, { key, payload: '', ttlMs: 5000 }),
    ).toBe(1);
    expect(await admin.get(key)).toBe('');
  });

  it('an undefined payload deletes the other key', async () => {
    const lock = new RedisLockService({ redis: server.client(), namespace: 'rl:del:' });
    const admin = server.client();
    const [guard] = await lock.acquire('k');
    const key = resultKey(guard!.key);
    await admin.set(key, 'older');
    const { answer, messages, seen } = await readOnWake(guard!.key, key, () =>
      releaseLock(admin, guard!.key, guard!.token, { key, payload: undefined, ttlMs: 5000 }),
    );
    expect(answer).toBe(1);
    expect(messages).toEqual([guard!.token]);
    expect(seen).toEqual([null]);
    expect(await admin.exists(guard!.key, key)).toBe(0);
  });

  it('with another holder’s token nothing is written, deleted or published', async () => {
    const lock = new RedisLockService({ redis: server.client(), namespace: 'rl:notours:' });
    const admin = server.client();
    const [guard] = await lock.acquire('k');
    const stored = resultKey(guard!.key);
    const removed = derivedKey(guard!.key, 'fence');
    await admin.set(removed, 'kept');
    const sub = await record(guard!.key);
    const woken = sub.next();
    const write = { key: stored, payload: 'stale', ttlMs: 5000 };
    expect(await releaseLock(admin, guard!.key, 'not-the-token', write)).toBe(0);
    const removal = { key: removed, payload: undefined, ttlMs: 5000 };
    expect(await releaseLock(admin, guard!.key, 'not-the-token', removal)).toBe(0);
    expect(await admin.get(guard!.key)).toBe(guard!.token);
    expect(await admin.exists(stored)).toBe(0);
    expect(await admin.get(removed)).toBe('kept');
    await lock.release(guard!);
    await woken;
    expect(sub.messages).toEqual([guard!.token]);
  });

  it('costs one EVALSHA: GET of the lock, SET, DEL and SPUBLISH once each', async () => {
    const stats = await releaseCost(false);
    expect(stats('get')).toBe(1);
    for (const name of ['evalsha', 'set', 'del', 'spublish']) expect(stats(name), name).toBe(1);
  });

  it('a claimed write costs one GET and one DEL more, of the claim', async () => {
    const stats = await releaseCost(true);
    expect([stats('get'), stats('del')]).toEqual([2, 2]);
    for (const name of ['evalsha', 'set', 'spublish']) expect(stats(name), name).toBe(1);
  });
});

/** The commands one release that writes costs, by name (`claimed`: of a claimed lock). */
async function releaseCost(claimed: boolean): Promise<(name: string) => number> {
  const lock = new RedisLockService({ redis: server.client(), namespace: `rl:wcost${+claimed}:` });
  const admin = server.client();
  const take = async (name: string): Promise<LockGuard> => {
    const [guard] = await lock.acquire(name);
    if (claimed) await claimLock(admin, guard!.key, guard!.token);
    return guard!;
  };
  const write = (guard: LockGuard) => ({
    key: resultKey(guard.key),
    payload: '1',
    ttlMs: 5000,
    claimed,
  });
  const warm = await take('warm');
  await releaseLock(admin, warm.key, warm.token, write(warm));
  const guard = await take('k');
  const before = await commandStats(admin);
  await releaseLock(admin, guard.key, guard.token, write(guard));
  const after = await commandStats(admin);
  return (name) => (after.get(name) ?? 0) - (before.get(name) ?? 0);
}

describe('release on a Redis without SPUBLISH', () => {
  let old: RedisServer;
  beforeAll(async () => {
    old = await startRedis(['--rename-command', 'SPUBLISH', '']);
  });
  afterAll(() => old.stop());

  it('still deletes the lock and applies the write', async () => {
    const admin = old.client();
    await expect(admin.call('SPUBLISH', 'c', 'm')).rejects.toThrow(/unknown command/);
    const lock = new RedisLockService({ redis: old.client(), namespace: 'rl:nospub:' });
    const [guard] = await lock.acquire('k');
    expect(await lock.release(guard!)).toEqual([true, undefined]);
    expect(await admin.exists(guard!.key)).toBe(0);
    const [again] = await lock.acquire('k');
    const key = resultKey(again!.key);
    expect(
      await releaseLock(admin, again!.key, again!.token, { key, payload: 'v', ttlMs: 5000 }),
    ).toBe(1);
    expect(await admin.exists(again!.key)).toBe(0);
    expect(await admin.get(key)).toBe('v');
  });
});
