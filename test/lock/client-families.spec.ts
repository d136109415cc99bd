import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';
import { Redis as Valkey } from 'iovalkey';
import { createClient, createCluster } from 'redis';
import { createClient as createClient5, createCluster as createCluster5 } from 'redis5';
import { describe, expect, it } from 'vitest';
import {
  BufferLockConfigError,
  BufferLockMessages,
  ENGLISH_MESSAGES,
  RedisLockService,
  type RedisScriptClient,
} from '../../lib/index.js';
import { resolveBufferLockOptions } from '../../lib/options/buffer-lock.options.js';
import { rkey, withRedisServer } from './lock-helpers.js';
import type { RedisServer } from '../support/redis-server.js';
import { collectEscapes, settle } from '../support/escapes.js';

/**
 * Which clients the lock drives, and how: ioredis (and forks of it) with batching, a minimal
 * `eval()` client as it is, and anything else refused. Real Redis behind every working client.
 */

const NS = 'families:';
let server: RedisServer;
let admin: Redis;
withRedisServer((s, a) => ((server = s), (admin = a)));

const escaped = collectEscapes();

/** A client that sends every property it is asked for as a Redis command of that name. */
function dispatchingClient(real: Redis): RedisScriptClient {
  return new Proxy(
    {},
    {
      get:
        (_, name) =>
        (...args: (string | number)[]) =>
          real.call(String(name), ...args),
    },
  ) as RedisScriptClient;
}

describe('a client that sends every method name as a command', () => {
  it('5 concurrent acquires on it all take their locks, with nothing escaping', async () => {
    const lock = new RedisLockService({ redis: dispatchingClient(server.client()), namespace: NS });
    const results = await Promise.all(
      Array.from({ length: 5 }, (_, i) => lock.acquire(`dispatch-${i}`)),
    );
    for (const [guard, error] of results) {
      expect(error).toBeUndefined();
      expect(await admin.get(guard!.key)).toBe(guard!.token);
      expect(await lock.release(guard!)).toEqual([true, undefined]);
    }
    await settle();
    expect(escaped).toEqual([]);
  });

  it('returned by a factory, it is used as the client, not awaited as a promise', async () => {
    const lock = new RedisLockService({
      redis: () => dispatchingClient(server.client()),
      namespace: NS,
    });
    const results = await Promise.all(
      Array.from({ length: 5 }, (_, i) => lock.acquire(`factory-dispatch-${i}`)),
    );
    for (const [guard, error] of results) {
      expect(error).toBeUndefined();
      expect(await admin.get(guard!.key)).toBe(guard!.token);
      expect(await lock.release(guard!)).toEqual([true, undefined]);
    }
    await settle();
    expect(escaped).toEqual([]);
  });
});

/**
 * A client shaped like node-redis (`isOpen` / `isReady` flags, `sendCommand`, `eval(script,
 * { keys, arguments })` of arity 2, `set(key, value, options)`, `sSubscribe`, `duplicate`,
 * `connect`, `quit`) that lacks methods the lock calls on a node-redis client (`destroy`,
 * `sUnsubscribe`): its `eval()` takes other arguments than the minimal interface's, so it is not
 * driven either way. Every call is recorded, so the test proves the lock never drives it.
 */
class NodeRedisLikeClient extends EventEmitter {
  readonly calls: string[] = [];
  get isOpen(): boolean {
    return true;
  }
  get isReady(): boolean {
    return true;
  }
  private record(name: string): Promise<unknown> {
    this.calls.push(name);
    return Promise.resolve('OK');
  }
  sendCommand(_args: string[]): Promise<unknown> {
    return this.record('sendCommand');
  }
  eval(_script: string, _options: { keys?: string[]; arguments?: string[] }): Promise<unknown> {
    return this.record('eval');
  }
  evalSha(_sha: string, _options: { keys?: string[]; arguments?: string[] }): Promise<unknown> {
    return this.record('evalSha');
  }
  set(_key: string, _value: string, _options?: { NX?: boolean; PX?: number }): Promise<unknown> {
    return this.record('set');
  }
  sSubscribe(_channel: string, _listener: () => void): Promise<unknown> {
    return this.record('sSubscribe');
  }
  duplicate(): NodeRedisLikeClient {
    this.calls.push('duplicate');
    return new NodeRedisLikeClient();
  }
  connect(): Promise<unknown> {
    return this.record('connect');
  }
  quit(): Promise<unknown> {
    return this.record('quit');
  }
}

describe('a client shaped like node-redis without every method the lock calls: refused instead of misused', () => {
  it('new refuses it with redis_client_invalid, and it is sent nothing', () => {
    const client = new NodeRedisLikeClient();
    expect(client.eval.length).toBe(2);
    let error: unknown;
    let made: RedisLockService | undefined;
    try {
      made = new RedisLockService({ redis: client as unknown as RedisScriptClient, namespace: NS });
    } catch (thrown) {
      error = thrown;
    }
    expect(made).toBeUndefined();
    expect(error).toBeInstanceOf(BufferLockConfigError);
    expect((error as BufferLockConfigError).code).toBe('redis_client_invalid');
    expect(client.calls).toEqual([]);
  });

  it('returned by a factory, every call fails with redis_client_invalid, and it is sent nothing', async () => {
    const client = new NodeRedisLikeClient();
    const lock = new RedisLockService({
      redis: () => client as unknown as RedisScriptClient,
      namespace: NS,
    });
    const [guard, error] = await lock.acquire('node-redis');
    expect(guard).toBeUndefined();
    expect(error).toMatchObject({
      code: 'redis_client_invalid',
      message: `Redis lock failed: ${ENGLISH_MESSAGES.redis_client_invalid}`,
    });
    const [released, releaseError] = await lock.release({ key: rkey(NS, 'x'), token: 't' });
    expect(released).toBe(false);
    expect(releaseError?.code).toBe('redis_client_invalid');
    expect(client.calls).toEqual([]);
  });

  it('the module refuses it at bootstrap', async () => {
    const client = new NodeRedisLikeClient();
    const messages = new BufferLockMessages();
    expect(() =>
      resolveBufferLockOptions({ redis: client as unknown as RedisScriptClient }, messages),
    ).toThrow(expect.objectContaining({ code: 'module_redis_invalid' }));
    expect(client.calls).toEqual([]);
  });

  it('an ioredis client and a minimal eval() client are still taken', () => {
    expect(() => new RedisLockService({ redis: server.client() })).not.toThrow();
    expect(() => new RedisLockService({ redis: { eval: () => 1 } })).not.toThrow();
  });
});

describe('clients recognised by their shape', () => {
  it('a node-redis client and cluster (5 and 6) and an iovalkey client are taken by new and by the module, before they connect', () => {
    const clients = [
      createClient(),
      createCluster({ rootNodes: [{ url: server.url }] }),
      createClient5(),
      createCluster5({ rootNodes: [{ url: server.url }] }),
      new Valkey({ lazyConnect: true }),
    ];
    const messages = new BufferLockMessages();
    for (const client of clients) {
      expect(() => new RedisLockService({ redis: client, namespace: NS })).not.toThrow();
      expect(() => resolveBufferLockOptions({ redis: client }, messages)).not.toThrow();
    }
  });
});
