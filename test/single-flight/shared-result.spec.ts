import { StreamableFile } from '@nestjs/common';
import { Readable } from 'node:stream';
import { of } from 'rxjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LockError } from '../../lib/errors/lock.error.js';
import { resultKey } from '../../lib/redis/keys.js';
import { SharedResultStore } from '../../lib/single-flight/shared-result.js';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import {
  findUnserializable,
  JSON_RESULT_SERIALIZER,
  type ResultSerializer,
} from '../../lib/serialization/result-serializer.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

function setup(namespace: string, serializer?: ResultSerializer) {
  const client = server.client();
  const lock = new RedisLockService({ redis: client, namespace });
  const results = new SharedResultStore({ lock, serializer, ttl: 30 });
  return { client, lock, results };
}

describe('shared result: leader stores, then releases; waiter reads', () => {
  it('a waiter reads back exactly what the leader returned', async () => {
    const { lock, results } = setup('sr:round:');
    const value = {
      id: 42,
      rows: [{ name: 'Zoë 🐙', total: 1.5 }],
      none: null,
      when: '2026-01-01',
    };
    const [guard] = await lock.acquire('report');
    expect(await results.storeAndRelease(guard!, results.serialize(value, 'report'))).toEqual([
      true,
      undefined,
    ]);
    await lock.release(guard!);
    expect(await results.read(lock.redisKey('report'), 'report')).toEqual({
      status: 'hit',
      value,
    });
  });

  it('a method that returns nothing shares undefined, distinct from no result', async () => {
    const { lock, results } = setup('sr:void:');
    expect(await results.read(lock.redisKey('job'), 'job')).toEqual({ status: 'miss' });
    const [guard] = await lock.acquire('job');
    await results.storeAndRelease(guard!, results.serialize(undefined, 'job'));
    expect(await results.read(lock.redisKey('job'), 'job')).toEqual({
      status: 'hit',
      value: undefined,
    });
  });

  it('lives under the derived result key, with the short TTL given', async () => {
    const { client, lock, results } = setup('sr:ttl:');
    const [guard] = await lock.acquire('k');
    await results.storeAndRelease(guard!, '1');
    const pttl = await client.pttl(resultKey(guard!.key));
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(30_000);
  });

  it('a leader that lost its lock stores nothing', async () => {
    const { client, lock, results } = setup('sr:lost:');
    const [guard] = await lock.acquire('k');
    await client.del(guard!.key);
    const [thief] = await lock.acquire('k');
    expect(await results.storeAndRelease(guard!, '"stale"')).toEqual([false, undefined]);
    expect(await client.exists(resultKey(guard!.key))).toBe(0);
    await lock.release(thief!);
  });

  it('a pluggable serializer is used both ways', async () => {
    const calls: string[] = [];
    const serializer: ResultSerializer = {
      serialize: (v) => (calls.push('out'), `n:${String(v)}`),
      deserialize: (t) => (calls.push('in'), BigInt(t.slice(2))),
    };
    const { lock, results } = setup('sr:plug:', serializer);
    const [guard] = await lock.acquire('k');
    await results.storeAndRelease(guard!, results.serialize(12n, 'k'));
    expect(await results.read(guard!.key, 'k')).toEqual({ status: 'hit', value: 12n });
    expect(calls).toEqual(['out', 'in']);
  });

  it('a payload the serializer cannot read back is an error, not a value', async () => {
    const { client, lock, results } = setup('sr:bad:');
    await client.set(resultKey(lock.redisKey('k')), '{not json');
    const found = await results.read(lock.redisKey('k'), 'k');
    expect(found.status).toBe('error');
    expect(found.status === 'error' && found.error.code).toBe('shared_result_unreadable');
  });
});

describe('shared result: unserializable values get the catalog error, before Redis', () => {
  const circular: Record<string, unknown> = { a: 1 };
  circular.self = circular;
  const cases: [string, unknown, string, string][] = [
    ['a stream', { body: Readable.from(['x']) }, 'a stream', '$.body'],
    ['a StreamableFile', new StreamableFile(Buffer.from('x')), 'a StreamableFile', '$'],
    ['a function', { rows: [1, () => 2] }, 'a function', '$.rows[1]'],
    ['a BigInt', { id: 1n }, 'a BigInt', '$.id'],
    ['a circular reference', circular, 'a circular reference', '$.self'],
    ['a promise', { later: Promise.resolve(1) }, 'a promise', '$.later'],
    ['an Observable', of(1), 'an Observable', '$'],
    ['a Map', { m: new Map() }, 'a Map', '$.m'],
    ['a Buffer', { b: Buffer.from('x') }, 'a Buffer or typed array', '$.b'],
    ['NaN', [Number.NaN], 'the number NaN', '$[0]'],
    ['a Set deep in arrays', [[1, [new Set()]]], 'a Set', '$[0][1][0]'],
    // oxlint-disable-next-line unicorn/no-thenable -- a thenable is the case
    ['a thenable plain object', { job: { then() {} } }, 'a promise', '$.job'],
    [
      'a function in an object with no prototype',
      { row: Object.assign(Object.create(null) as object, { f: () => 1 }) },
      'a function',
      '$.row.f',
    ],
  ];

  it.each(cases)('%s', async (_name, value, what, path) => {
    expect(findUnserializable(value)).toEqual({ what, path });
    const { client, lock, results } = setup(`sr:un:${_name}:`);
    let thrown: unknown;
    try {
      results.serialize(value, 'report:7');
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(LockError);
    expect((thrown as LockError).code).toBe('shared_result_unserializable');
    expect((thrown as LockError).message).toBe(
      `The result for report:7 cannot be shared between workers: ${what} at ${path} cannot be serialized. Return plain data, pass a serializer, or set share: false`,
    );
    expect(await client.exists(resultKey(lock.redisKey('report:7')))).toBe(0);
  });

  it('plain data, Dates and shared (non-circular) references pass', () => {
    const shared = { x: 1 };
    expect(findUnserializable({ a: shared, b: shared, d: new Date(0), s: 'é', n: null })).toBe(
      undefined,
    );
    expect(JSON_RESULT_SERIALIZER.serialize({ d: new Date(0) })).toBe(
      '{"d":"1970-01-01T00:00:00.000Z"}',
    );
  });

  it('a hole in an array is stored as null, as an undefined element is', () => {
    // oxlint-disable-next-line no-sparse-arrays -- the hole is the case
    const sparse = [, 1];
    expect(findUnserializable(sparse)).toBe(undefined);
    expect(JSON_RESULT_SERIALIZER.serialize(sparse)).toBe('[null,1]');
    expect(JSON_RESULT_SERIALIZER.serialize([undefined, 1])).toBe('[null,1]');
  });
});

describe('shared result: Redis trouble is a tuple error, never a rejection', () => {
  it('store and read answer shared_result_failed when Redis is gone', async () => {
    const own = await startRedis();
    const client = own.client({ maxRetriesPerRequest: 0, retryStrategy: () => null });
    await client.ping();
    await own.stop();
    const lock = new RedisLockService({ redis: client });
    const results = new SharedResultStore({ lock });
    const [stored, error] = await results.storeAndRelease(
      { key: lock.redisKey('k'), token: 't' },
      '1',
    );
    expect(stored).toBe(false);
    expect(error?.code).toBe('shared_result_failed');
    const found = await results.read('k', 'k');
    expect(found.status === 'error' && found.error.code).toBe('shared_result_failed');
  });
});
