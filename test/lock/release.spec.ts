import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LockError, RedisLockService, type LockGuard } from '../../lib/index.js';
import { BACKENDS, inspectorFor, type KeyInspector } from '../support/client-families.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { collectEscapes, settle } from '../support/escapes.js';
import {
  failFastClient,
  rkey,
  untilExpired,
  withRedisServer,
  lockWorkers,
} from './lock-helpers.js';

const NS = 'release-spec:';
let server: RedisServer;
let admin: Redis;

withRedisServer((s, a) => ((server = s), (admin = a)));

/** One worker: its own service and its own connection, as after a fork. */
const ioredisWorker = lockWorkers(() => server, NS);

/** A getter or trap that throws. */
const boom = (): never => {
  throw new Error('read me not');
};

describe.each(BACKENDS)('release through $name', (family) => {
  // Each family its own keys: what one family's test holds is not another's.
  const ns = `${NS}${family.name}:`;
  /** One worker: its own service and its own client of the family, as after a fork. */
  const worker = lockWorkers(() => server, ns, family);
  afterAll(() => family.closeAll());
  /** The keys the family's clients see: through an admin connection, or in the in-memory keyspace. */
  let keys: KeyInspector;
  beforeAll(() => void (keys = inspectorFor(family, server)));

  describe('the holder’s guard: release deletes the key and returns (true, undefined)', () => {
    it('deletes the key and returns (true, undefined)', async () => {
      const lock = worker();
      const [guard] = await lock.acquire('mine');
      expect(await keys.get(guard!.key)).toBe(guard!.token);
      expect(await lock.release(guard!)).toEqual([true, undefined]);
      expect(await keys.exists(guard!.key)).toBe(0);
    });

    it('the key is free again: another worker can take it at once', async () => {
      const [a, b] = [worker(), worker()];
      const [guard] = await a.acquire('handover');
      expect(await b.acquire('handover')).toEqual([undefined, undefined]);
      await a.release(guard!);
      const [next] = await b.acquire('handover');
      expect(await keys.get(guard!.key)).toBe(next!.token);
    });

    it('deletes only its own key', async () => {
      const lock = worker();
      const [mine] = await lock.acquire('one-of-two');
      const [theirs] = await lock.acquire('two-of-two');
      await lock.release(mine!);
      expect(await keys.get(theirs!.key)).toBe(theirs!.token);
    });

    it('a guard works with any instance on the same namespace (it is plain data)', async () => {
      const [guard] = await worker().acquire('portable');
      const copy: LockGuard = JSON.parse(JSON.stringify(guard)) as LockGuard;
      expect(await worker().release(copy)).toEqual([true, undefined]);
      expect(await keys.exists(guard!.key)).toBe(0);
    });
  });

  describe('a guard whose token is not the stored one: release deletes nothing and returns (true, undefined)', () => {
    it('after expiry and a retake by another worker, the old guard deletes nothing', async () => {
      const [a, b] = [worker({ ttl: 0.2 }), worker({ ttl: 30 })];
      const [old] = await a.acquire('retaken');
      await untilExpired(keys, old!.key, 5000);
      const [current] = await b.acquire('retaken');
      expect(current).toBeDefined();
      expect(await a.release(old!)).toEqual([true, undefined]);
      expect(await keys.get(old!.key)).toBe(current!.token);
      expect(await keys.pttl(old!.key)).toBeGreaterThan(20_000);
    });

    it('a forged guard with the right key and a wrong token deletes nothing', async () => {
      const [guard] = await worker().acquire('forged');
      const forged: LockGuard = { key: guard!.key, token: 'x'.repeat(32) };
      expect(await worker().release(forged)).toEqual([true, undefined]);
      expect(await keys.get(guard!.key)).toBe(guard!.token);
    });

    it('a key set by anything else in Redis is never deleted', async () => {
      await keys.set(rkey(ns, 'foreign'), 'their-value');
      const guard: LockGuard = { key: rkey(ns, 'foreign'), token: 'their-value-not' };
      expect(await worker().release(guard)).toEqual([true, undefined]);
      expect(await keys.get(rkey(ns, 'foreign'))).toBe('their-value');
    });
  });

  describe('a lock already gone: release still returns (true, undefined)', () => {
    it('release after expiry with nobody holding the key', async () => {
      const lock = worker({ ttl: 0.2 });
      const [guard] = await lock.acquire('expired');
      await untilExpired(keys, guard!.key, 5000);
      expect(await lock.release(guard!)).toEqual([true, undefined]);
      expect(await keys.exists(guard!.key)).toBe(0);
    });

    it('a second release of the same guard', async () => {
      const lock = worker();
      const [guard] = await lock.acquire('twice');
      expect(await lock.release(guard!)).toEqual([true, undefined]);
      expect(await lock.release(guard!)).toEqual([true, undefined]);
    });
  });

  describe('anything but a guard: release returns (false, redis_invalid_guard)', () => {
    it.each([
      ['undefined', undefined],
      ['null', null],
      ['{}', {}],
      ['a guard without token', { key: 'k' }],
      ['a guard without key', { token: 't' }],
      ['a guard with non-string fields', { key: 1, token: 2 }],
      ['a string', 'guard'],
    ])('release(%s) returns (false, invalid lock guard)', async (_, guard) => {
      const [ok, error] = await worker().release(guard as unknown as LockGuard);
      expect(ok).toBe(false);
      expect(error).toBeInstanceOf(LockError);
      expect(error!.code).toBe('redis_invalid_guard');
      expect(error!.message).toBe('invalid lock guard');
    });
  });

  describe('a guard that throws when it is read: (false, redis_invalid_guard), nothing rejects', () => {
    const escaped = collectEscapes();
    const throwing: [string, () => object][] = [
      [
        'a getter on key that throws',
        () => ({
          get key(): string {
            return boom();
          },
          token: 't',
        }),
      ],
      [
        'a getter on token that throws',
        () => ({
          key: `${ns}k`,
          get token(): string {
            return boom();
          },
        }),
      ],
      ['a Proxy whose get trap throws', () => new Proxy({}, { get: boom })],
      [
        'a Proxy whose every trap throws',
        () =>
          new Proxy(
            {},
            {
              get: boom,
              has: boom,
              getPrototypeOf: boom,
              ownKeys: boom,
              getOwnPropertyDescriptor: boom,
            },
          ),
      ],
    ];
    it.each(throwing)('release and extend of %s', async (_name, make) => {
      const lock = worker();
      const [held] = await lock.acquire('throwing-guard');
      for (const answer of [
        await lock.release(make() as LockGuard),
        await lock.extend(make() as LockGuard),
      ]) {
        expect(answer[0]).toBe(false);
        expect(answer[1]).toMatchObject({
          code: 'redis_invalid_guard',
          message: 'invalid lock guard',
        });
      }
      expect(await keys.get(held!.key)).toBe(held!.token);
      await lock.release(held!);
      await settle();
      expect(escaped).toEqual([]);
    });

    it('a guard whose key reads differently each time is read once', async () => {
      const lock = worker();
      const [held] = await lock.acquire('shifting-guard');
      let reads = 0;
      const shifting = {
        get key(): unknown {
          return reads++ === 0 ? held!.key : 42;
        },
        token: held!.token,
      };
      expect(await lock.release(shifting as LockGuard)).toEqual([true, undefined]);
      expect(await keys.exists(held!.key)).toBe(0);
    });
  });

  describe('a guard for a key outside the namespace: (false, redis_invalid_guard), nothing touched', () => {
    it('a forged guard carrying a data key and its value neither deletes it nor sets its TTL', async () => {
      await keys.set('some:data:key', 'precious');
      const forged: LockGuard = { key: 'some:data:key', token: 'precious' };
      const lock = worker();
      for (const [ok, error] of [await lock.release(forged), await lock.extend(forged, 1)]) {
        expect(ok).toBe(false);
        expect(error).toMatchObject({ code: 'redis_invalid_guard', message: 'invalid lock guard' });
      }
      expect(await keys.get('some:data:key')).toBe('precious');
      expect(await keys.pttl('some:data:key')).toBe(-1);
    });

    it('a guard of another namespace is refused; its own service releases it', async () => {
      const other = new RedisLockService({
        redis: () => family.connect(server),
        namespace: 'other-ns:',
      });
      const [guard] = await other.acquire('theirs');
      expect((await worker().release(guard!))[1]?.code).toBe('redis_invalid_guard');
      expect((await worker().extend(guard!))[1]?.code).toBe('redis_invalid_guard');
      expect(await keys.get(guard!.key)).toBe(guard!.token);
      expect(await other.release(guard!)).toEqual([true, undefined]);
    });

    it('a key() override with a hash tag before the namespace, or around it, is its own', async () => {
      class Before extends RedisLockService {
        protected override key(cacheKey: string): string {
          return `{shard-1}${super.key(cacheKey)}`;
        }
      }
      class Around extends RedisLockService {
        protected override key(cacheKey: string): string {
          return `{${this.namespace}}${cacheKey}`;
        }
      }
      for (const Lock of [Before, Around]) {
        const lock = new Lock({ redis: () => family.connect(server), namespace: ns });
        const [guard] = await lock.acquire('tagged');
        expect(await lock.extend(guard!)).toEqual([true, undefined]);
        expect(await lock.release(guard!)).toEqual([true, undefined]);
        expect(await keys.exists(guard!.key)).toBe(0);
      }
    });
  });
});

describe('release when Redis is unreachable: (false, redis_unlock_failed), and the lock stays until its TTL', () => {
  it('a factory that throws', async () => {
    const [guard] = await ioredisWorker().acquire('stays');
    const lock = new RedisLockService({
      redis: () => {
        throw new Error('connection refused');
      },
      namespace: NS,
    });
    const [ok, error] = await lock.release(guard!);
    expect(ok).toBe(false);
    expect(error?.code).toBe('redis_unlock_failed');
    expect(error?.message).toBe('Redis unlock failed: connection refused');
    expect(await admin.get(guard!.key)).toBe(guard!.token);
  });

  it('a stopped server', async () => {
    const down = await startRedis();
    const client = failFastClient(down);
    const lock = new RedisLockService({ redis: client, namespace: NS });
    const [guard] = await lock.acquire('server-goes-away');
    expect(guard).toBeDefined();
    await down.stop();
    const [ok, error] = await lock.release(guard!);
    expect(ok).toBe(false);
    expect(error?.code).toBe('redis_unlock_failed');
    expect(error!.message).toBe(`Redis unlock failed: ${(error!.cause as Error).message}`);
  });
});
