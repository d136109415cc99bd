import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { releaseChannel } from '../../lib/redis/keys.js';
import { WAKE_MESSAGE } from '../../lib/redis/release-lock.js';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

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
    // A key without braces: the script builds this channel from the key itself.
    expect(releaseChannel(guard!.key)).toBe(`{${guard!.key}}:release`);
    const sub = await record(guard!.key);
    const woken = sub.next();
    expect(await lock.release(guard!)).toEqual([true, undefined]);
    await woken;
    expect(sub.messages).toEqual([WAKE_MESSAGE]);
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
    expect(sub.messages).toEqual([WAKE_MESSAGE]);
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
    expect(sub.messages).toEqual([WAKE_MESSAGE]);
  });

  it('a key with braces (a hash-tag subclass) publishes on the same channel as releaseChannel', async () => {
    class Tagged extends RedisLockService {
      protected override key(cacheKey: string): string {
        return `{tagged}${cacheKey}`;
      }
    }
    const lock = new Tagged({ redis: () => server.client(), namespace: 'rl:tag:' });
    const [guard] = await lock.acquire('k');
    expect(guard!.key).toBe('{tagged}k');
    const sub = await record(guard!.key); // releaseChannel('{tagged}k') = '{tagged}{tagged}k:release'
    const woken = sub.next();
    expect(await lock.release(guard!)).toEqual([true, undefined]);
    await woken;
    expect(sub.messages).toEqual([WAKE_MESSAGE]);
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
