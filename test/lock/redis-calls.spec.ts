import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { RedisLockService, type LockGuard } from '../../lib/index.js';
import { commandStats } from '../support/command-stats.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { recordingClient } from './lock-helpers.js';

const NS = 'redis-calls-spec:';
let server: RedisServer;
let admin: Redis;

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(() => server.stop());

const worker = (): RedisLockService =>
  new RedisLockService({ redis: () => server.client(), namespace: NS });

/** What a client object looks like from outside: its own properties, prototype and scripts. */
function shapeOf(client: Redis): unknown {
  const own = Object.getOwnPropertyNames(client).toSorted();
  return {
    own,
    ownFunctions: own.filter(
      (name) => typeof (client as unknown as Record<string, unknown>)[name] === 'function',
    ),
    prototype: Object.getPrototypeOf(client),
    prototypeMethods: Object.getOwnPropertyNames(Redis.prototype).toSorted(),
    scripts: Object.keys((client as unknown as { scriptsSet: object }).scriptsSet).toSorted(),
  };
}

/** The commands the server ran while `action` did, by name (INFO commandstats delta). */
async function ran(action: () => Promise<unknown>): Promise<Record<string, number>> {
  const before = await commandStats(admin);
  await action();
  const delta: Record<string, number> = {};
  for (const [name, calls] of await commandStats(admin)) {
    const d = calls - (before.get(name) ?? 0);
    if (d > 0 && name !== 'info' && name !== 'ping') delta[name] = d;
  }
  return delta;
}

describe('Redis calls', () => {
  describe('scripts run by EVALSHA, with EVAL when Redis answers NOSCRIPT', () => {
    it('uses EVALSHA; after SCRIPT FLUSH it falls back to EVAL once and still locks', async () => {
      const client = recordingClient(server.client());
      const lock = new RedisLockService({ redis: client, namespace: NS });
      await admin.script('FLUSH');
      const [first] = await lock.acquire('flush');
      // Empty script cache: EVALSHA answered NOSCRIPT, then EVAL ran (and loaded) the script.
      expect(client.calls.map((c) => c.method)).toEqual(['evalsha', 'eval']);
      expect(await admin.get(first!.key)).toBe(first!.token);
      expect(await lock.release(first!)).toEqual([true, undefined]);
      expect(client.calls.map((c) => c.method)).toEqual(['evalsha', 'eval', 'evalsha', 'eval']);

      client.calls.length = 0;
      const [second] = await lock.acquire('flush');
      await lock.release(second!);
      expect(client.calls.map((c) => c.method)).toEqual(['evalsha', 'evalsha']);

      await admin.script('FLUSH');
      client.calls.length = 0;
      const [third, error] = await lock.acquire('flush');
      expect(error).toBeUndefined();
      expect(await admin.get(third!.key)).toBe(third!.token);
      expect(client.calls.map((c) => c.method)).toEqual(['evalsha', 'eval']);
    });

    it('the EVALSHA digest is the SHA1 of the script EVAL sends', async () => {
      const client = recordingClient(server.client());
      const lock = new RedisLockService({ redis: client, namespace: NS });
      await admin.script('FLUSH');
      await lock.acquire('sha');
      const [evalsha, evalCall] = client.calls;
      const source = evalCall!.args[0] as string;
      expect(evalsha!.args[0]).toBe(createHash('sha1').update(source).digest('hex'));
      expect(await admin.script('EXISTS', evalsha!.args[0] as string)).toEqual([1]);
    });

    it('a client with eval() only (no evalsha) is enough', async () => {
      const real = server.client();
      const lock = new RedisLockService({
        redis: { eval: (...args: [string, number, ...(string | number)[]]) => real.eval(...args) },
        namespace: NS,
      });
      const [guard] = await lock.acquire('eval-only');
      expect(await admin.get(guard!.key)).toBe(guard!.token);
      expect(await lock.release(guard!)).toEqual([true, undefined]);
      expect(await admin.exists(guard!.key)).toBe(0);
    });

    it('scripts are constant text: keys and tokens travel only as KEYS and ARGV', async () => {
      const client = recordingClient(server.client());
      const lock = new RedisLockService({ redis: client, namespace: NS });
      await admin.script('FLUSH');
      const [guard] = await lock.acquire("'); redis.call('FLUSHALL') --");
      await lock.extend(guard!, 10);
      await admin.script('FLUSH');
      await lock.release(guard!);
      const sources = client.calls.filter((c) => c.method === 'eval').map((c) => c.args[0]);
      expect(sources).toHaveLength(3); // acquire, extend, release: each loaded once
      for (const source of sources) {
        expect(source).not.toContain(guard!.key);
        expect(source).not.toContain(guard!.token);
      }
      for (const { args } of client.calls) {
        const numkeys = args[1] as number;
        expect(args[2]).toBe(guard!.key); // KEYS[1]
        // ARGV[1]: the token; an acquire's is its ttl in ms, a space, then the token.
        expect(String(args[2 + numkeys]).replace(/^\d+ /, '')).toBe(guard!.token);
      }
    });
  });

  describe("the user's client object is not mutated", () => {
    it('no defineCommand, no new properties or methods, same prototype, through NOSCRIPT too', async () => {
      const client = server.client();
      await client.ping();
      const defineCommand = vi.spyOn(client, 'defineCommand');
      const before = shapeOf(client);
      const lock = new RedisLockService({ redis: client, namespace: NS });
      for (let i = 0; i < 3; i++) {
        await admin.script('FLUSH');
        const [guard] = await lock.acquire(`untouched-${i}`);
        expect(guard).toBeDefined();
        await lock.extend(guard!, 5);
        expect(await lock.release(guard!)).toEqual([true, undefined]);
      }
      expect(defineCommand).not.toHaveBeenCalled();
      expect(shapeOf(client)).toEqual(before);
    });

    it('a frozen client object works: nothing is written to it', async () => {
      const real = server.client();
      const frozen = Object.freeze({
        eval: (...a: [string, number, ...(string | number)[]]) => real.eval(...a),
        evalsha: (...a: [string, number, ...(string | number)[]]) => real.evalsha(...a),
      });
      const lock = new RedisLockService({ redis: frozen, namespace: NS });
      await admin.script('FLUSH');
      const [guard] = await lock.acquire('frozen');
      expect(await lock.release(guard!)).toEqual([true, undefined]);
    });
  });

  describe('acquire: SET … NX PX, sent as it is when the client has set()', () => {
    it('an ioredis client: one SET per acquire, no script; the key holds the token with its TTL', async () => {
      const client = server.client();
      await client.ping(); // connected before counting
      const lock = new RedisLockService({ redis: client, namespace: NS, ttl: 5 });
      let guard: LockGuard | undefined;
      expect(await ran(async () => ([guard] = await lock.acquire('plain-set')))).toEqual({
        set: 1,
      });
      expect(await admin.get(guard!.key)).toBe(guard!.token);
      const pttl = await admin.pttl(guard!.key);
      expect(pttl).toBeGreaterThan(4000);
      expect(pttl).toBeLessThanOrEqual(5000);
      // Held: SET NX answers nil, and acquire answers busy, still without a script.
      let busy: unknown;
      expect(await ran(async () => (busy = await lock.acquire('plain-set')))).toEqual({ set: 1 });
      expect(busy).toEqual([undefined, undefined]);
      expect(await admin.get(guard!.key)).toBe(guard!.token);
      expect(await lock.release(guard!)).toEqual([true, undefined]);
    });

    it('an eval-only client runs the same SET NX PX inside the script', async () => {
      const client = recordingClient(server.client());
      const lock = new RedisLockService({ redis: client, namespace: NS, ttl: 5 });
      const delta = await ran(() => lock.acquire('script-set'));
      expect(client.calls.map((c) => c.method)).toContain('evalsha');
      expect(delta['set']).toBe(1); // the SET inside the script
      expect(delta['evalsha']).toBe(1);
    });

    it('with fencing the acquire stays one script (SET, TIME, INCR and the counter’s SET in one step)', async () => {
      const lock = new RedisLockService({ redis: server.client(), namespace: NS, fencing: true });
      await lock.acquire('fenced-warm'); // loads the script
      const delta = await ran(() => lock.acquire('fenced-set'));
      expect(delta).toEqual({ evalsha: 1, set: 2, time: 1, incr: 1 });
    });

    it('a set() that answers nothing is "no result"; one that rejects is "lock failed"', async () => {
      const real = server.client();
      const evalOf = (...a: [string, number, ...(string | number)[]]) => real.eval(...a);
      const silentSet = new RedisLockService({
        redis: { eval: evalOf, set: () => Promise.resolve(undefined) },
        namespace: NS,
      });
      const [, noResult] = await silentSet.acquire('silent-set');
      expect(noResult?.code).toBe('redis_no_result');
      expect(noResult?.message).toBe('Redis lock command returned no result');
      const failingSet = new RedisLockService({
        redis: { eval: evalOf, set: () => Promise.reject(new Error('READONLY replica')) },
        namespace: NS,
      });
      const [, failed] = await failingSet.acquire('failing-set');
      expect(failed?.code).toBe('redis_lock_failed');
      expect(failed?.message).toBe('Redis lock failed: READONLY replica');
    });

    it('a script call that throws at once is "unlock failed", never a throw; a plain answer counts', async () => {
      const real = server.client();
      const set = (key: string, value: string, px: 'PX', ms: number, nx: 'NX') =>
        real.set(key, value, px, ms, nx);
      const throwing = new RedisLockService({
        redis: {
          set,
          evalsha: () => {
            throw new Error('connection is closed');
          },
          eval: () => {
            throw new Error('NOSCRIPT never reached');
          },
        },
        namespace: NS,
      });
      const [guard] = await throwing.acquire('throwing-script');
      expect(guard).toBeDefined();
      const [ok, error] = await throwing.release(guard!);
      expect(ok).toBe(false);
      expect(error?.code).toBe('redis_unlock_failed');
      expect(error?.message).toBe('Redis unlock failed: connection is closed');
      // An eval() that answers a bare value (no promise) is read as that answer.
      const plain = new RedisLockService({ redis: { set, eval: () => 1 }, namespace: NS });
      const [held] = await plain.acquire('plain-answer');
      expect(await plain.release(held!)).toEqual([true, undefined]);
      await real.del(guard!.key, held!.key);
      real.disconnect();
    });
  });

  describe('release never deletes another holder’s lock', () => {
    it('50 concurrent releases with stale guards leave the current holder’s key', async () => {
      const holder = worker();
      const [current] = await holder.acquire('contested');
      const stale: LockGuard[] = Array.from({ length: 50 }, (_, i) => ({
        key: current!.key,
        token: `stale-token-${i}`.padEnd(32, '_'),
      }));
      const results = await Promise.all(stale.map((g) => worker().release(g)));
      expect(results.every(([ok, error]) => ok && error === undefined)).toBe(true);
      expect(await admin.get(current!.key)).toBe(current!.token);
      expect(await holder.release(current!)).toEqual([true, undefined]);
      expect(await admin.exists(current!.key)).toBe(0);
    });
  });
});

/** A subclass that puts a Redis Cluster hash tag in every key, so every lock lands in one slot. */
class HashTagLock extends RedisLockService {
  protected override key(cacheKey: string): string {
    const digest = createHash('md5').update(Buffer.from(cacheKey, 'utf8')).digest('hex');
    return `{${this.namespace}}${digest}`;
  }
}

describe('a hash-tag subclass overriding the protected key method', () => {
  let node: RedisServer;
  let dir: string;
  let nodeAdmin: Redis;
  const keys = ['report', 'café', '日本語', '🔒', '', 'x'.repeat(1000)];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'redis-calls-spec-'));
    node = await startRedis([
      '--cluster-enabled',
      'yes',
      // A lone node otherwise reports an empty host in CLUSTER SLOTS.
      '--cluster-announce-ip',
      '127.0.0.1',
      '--cluster-config-file',
      join(dir, 'nodes.conf'),
      '--dir',
      dir,
    ]);
    nodeAdmin = node.client();
    await nodeAdmin.call('CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
    const deadline = Date.now() + 10_000;
    while (!/cluster_state:ok/.test(String(await nodeAdmin.call('CLUSTER', 'INFO')))) {
      if (Date.now() > deadline) throw new Error('the one-node cluster did not become ok');
      await new Promise((r) => setTimeout(r, 50));
    }
  });
  afterAll(async () => {
    await node.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const slotOf = async (key: string): Promise<number> =>
    Number(await nodeAdmin.call('CLUSTER', 'KEYSLOT', key));

  it('every lock of the subclass is in the slot of {namespace}; the base class spreads', async () => {
    const tagged = new HashTagLock({ redis: () => node.client(), namespace: 'shop:' });
    const plain = new RedisLockService({ redis: () => node.client(), namespace: 'shop:' });
    const taggedSlots = new Set(await Promise.all(keys.map((k) => slotOf(tagged.redisKey(k)))));
    expect(taggedSlots).toEqual(new Set([await slotOf('{shop:}')]));
    const plainSlots = new Set(await Promise.all(keys.map((k) => slotOf(plain.redisKey(k)))));
    expect(plainSlots.size).toBeGreaterThan(1);
  });

  it('acquires and releases on a real cluster node through an ioredis Cluster client', async () => {
    const clients: Cluster[] = [];
    const lock = new HashTagLock({
      redis: () => {
        const client = new Cluster([{ host: '127.0.0.1', port: node.port }]);
        client.on('error', () => {});
        clients.push(client);
        return client;
      },
      namespace: 'shop:',
    });
    try {
      for (const key of keys) {
        const [guard, error] = await lock.acquire(key);
        expect(error).toBeUndefined();
        const digest = createHash('md5').update(Buffer.from(key, 'utf8')).digest('hex');
        expect(guard!.key).toBe(`{shop:}${digest}`);
        expect(await nodeAdmin.get(guard!.key)).toBe(guard!.token);
        expect(await lock.acquire(key)).toEqual([undefined, undefined]);
        expect(await lock.release(guard!)).toEqual([true, undefined]);
        expect(await nodeAdmin.exists(guard!.key)).toBe(0);
      }
    } finally {
      for (const client of clients) client.disconnect();
    }
  });
});
