import type { Redis } from 'ioredis';
import { firstValueFrom, isObservable, Subject, toArray, type Observable } from 'rxjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LockBusyError, RedisLockService, SingleFlightEngine } from '../../lib/index.js';
import { releaseChannel } from '../../lib/redis/keys.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { MemoryLogger, until } from '../support/nest-helpers.js';
import { shardSubscribers } from './support.js';

let server: RedisServer;
let admin: Redis;
let lock: RedisLockService;
let engine: SingleFlightEngine;
const logger = new MemoryLogger();

const held = async (cacheKey: string): Promise<boolean> =>
  (await admin.exists(lock.redisKey(cacheKey))) === 1;

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
  lock = new RedisLockService({ redis: () => server.client(), namespace: 'test:engine:' });
  engine = new SingleFlightEngine({ lock, options: { logger, lockTimeout: 2 } });
});
afterAll(() => server.stop());

describe('SingleFlightEngine without Nest', () => {
  it('fills settings from its defaults and the lock', () => {
    const rest = { share: false, onRedisError: 'proceed' };
    expect(engine.settingsFor()).toEqual({ ttl: 60, lockTimeout: 2, onBusy: 'wait', ...rest });
    expect(engine.settingsFor({ onBusy: 'skip', ttl: undefined })).toEqual({
      ttl: 60,
      lockTimeout: 2,
      onBusy: 'skip',
      ...rest,
    });
  });

  it('waits on the release of the Redis key, up to a deadline lockTimeout away', async () => {
    const channel = releaseChannel(lock.redisKey('strategy'));
    const [guard] = await lock.acquire('strategy');
    const result = engine.run('strategy', () => 'after release', { lockTimeout: 5 });
    await until(async () => (await shardSubscribers(admin, channel)) === 1);
    await lock.release(guard!);
    expect(await result).toBe('after release');
    const [again] = await lock.acquire('strategy');
    const before = Date.now();
    expect(await engine.run('strategy', () => 'after timeout', { lockTimeout: 0.3 })).toBe(
      'after timeout',
    );
    expect(Date.now() - before).toBeGreaterThanOrEqual(300);
    await lock.release(again!);
  });

  it('hands the lock to an Observable that run() resolves to, until it completes', async () => {
    const source = new Subject<number>();
    const result = await engine.run('handover', (): Observable<number> => source);
    expect(isObservable(result)).toBe(true);
    expect(await held('handover')).toBe(true);
    const values = firstValueFrom((result as Observable<number>).pipe(toArray()));
    source.next(7);
    source.complete();
    expect(await values).toEqual([7]);
    await until(async () => !(await held('handover')));
  });

  it("runObservable: 'skip' emits undefined, 'throw' errors with LockBusyError", async () => {
    const [guard] = await lock.acquire('observable-busy');
    let ran = false;
    const work = (): Observable<string> => {
      ran = true;
      return new Subject<string>();
    };
    const skipped = await firstValueFrom(
      engine.runObservable('observable-busy', work, { onBusy: 'skip' }).pipe(toArray()),
    );
    expect(skipped).toEqual([undefined]);
    await expect(
      firstValueFrom(engine.runObservable('observable-busy', work, { onBusy: 'throw' })),
    ).rejects.toBeInstanceOf(LockBusyError);
    expect(ran).toBe(false);
    await lock.release(guard!);
  });

  it('returns the value even when the release fails, and logs the release error', async () => {
    const own = new MemoryLogger();
    const quick = new RedisLockService({
      redis: () => server.client({ commandTimeout: 300 }),
      namespace: 'test:engine:',
    });
    const failing = new SingleFlightEngine({ lock: quick, options: { logger: own } });
    let value: string | undefined;
    try {
      value = await failing.run('release-fails', async () => {
        server.pause(); // Redis stops answering while the work runs
        return 'value';
      });
    } finally {
      server.resume();
    }
    expect(value).toBe('value');
    expect(own.at('warn')).toHaveLength(1);
    expect(own.at('warn')[0]).toMatch(/^Redis unlock failed: /);
  });
});
