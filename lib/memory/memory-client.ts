import { createHash } from 'node:crypto';
import type { RedisScriptClient } from '../types/clients.js';
import { definedScript, type LuaScript } from '../redis/lua-script.js';
import { MemoryKeyspace } from './keyspace.js';
import { CONNECTION_CLOSED, MemorySubscriber } from './memory-subscriber.js';
import { memoryUrlName, type MemoryUrl } from './memory-url.js';
import { asSent } from './wire.js';

/** Redis's strict integer syntax, for the number of keys of EVAL and EVALSHA. */
const INTEGER = /^(?:0|-?[1-9]\d*)$/;

/**
 * A client of the in-memory backend: the ioredis-shaped surface the library drives (`eval`,
 * `evalsha`, `set`, `ping`, `duplicate`, `quit`, `disconnect`) over a {@link MemoryKeyspace}, in
 * this process only. EVALSHA and EVAL run the JavaScript twin of one of the library's own Lua
 * scripts (any other script is refused, EVALSHA with NOSCRIPT as Redis does); `duplicate()` gives
 * the pub/sub connection that hears the releases' SPUBLISH. Every command runs at once and
 * atomically; its reply comes as a promise, like a network client's, with Redis's values and
 * Redis's error texts. Arguments are sent as ioredis sends them (numbers as their decimal text).
 *
 * It has no `pipeline()`, so the lock never batches it: there is no round trip to save.
 *
 * `get`, `pttl`, `exists`, `del`, `dbsize` and `flushall` are there for tests that look at the
 * keyspace, as they would with an ioredis client on a real Redis.
 *
 * @example
 * ```ts
 * const client = memoryClient('memory://');
 * const lock = new RedisLockService({ redis: client });
 * const [guard] = await lock.acquire('report');
 * await client.pttl(guard!.key); // about 60000
 * ```
 */
export class MemoryClient implements RedisScriptClient {
  /** Never a Cluster: one keyspace, so one "shard". */
  readonly isCluster = false;
  private closed = false;

  constructor(readonly keyspace: MemoryKeyspace = new MemoryKeyspace()) {}

  /** Whether `quit()` or `disconnect()` was called: every command is refused since. */
  get isClosed(): boolean {
    return this.closed;
  }

  eval(script: string, numkeys: number, ...args: (string | number)[]): Promise<unknown> {
    const sha = createHash('sha1').update(String(script)).digest('hex');
    const known = definedScript(sha);
    if (known === undefined) {
      return this.refuse('ERR the in-memory backend runs only the scripts of nestjs-buffer-lock');
    }
    return this.run(known, numkeys, args);
  }

  evalsha(sha: string, numkeys: number, ...args: (string | number)[]): Promise<unknown> {
    const known = definedScript(String(sha).toLowerCase());
    if (known === undefined) return this.refuse('NOSCRIPT No matching script. Please use EVAL.');
    return this.run(known, numkeys, args);
  }

  set(key: string, value: string, ...options: (string | number)[]): Promise<unknown> {
    return this.command((k) => k.set(asSent(key), asSent(value), ...options.map(asSent)));
  }

  get(key: string): Promise<string | null> {
    return this.command((k) => k.get(asSent(key)));
  }

  pttl(key: string): Promise<number> {
    return this.command((k) => k.pttl(asSent(key)));
  }

  exists(key: string): Promise<number> {
    return this.command((k) => k.exists(asSent(key)));
  }

  del(key: string): Promise<number> {
    return this.command((k) => k.del(asSent(key)));
  }

  dbsize(): Promise<number> {
    return this.command((k) => k.dbsize());
  }

  flushall(): Promise<'OK'> {
    return this.command((k) => k.flushall());
  }

  ping(): Promise<string> {
    return this.command(() => 'PONG');
  }

  /** A pub/sub connection on the same keyspace (the release subscriber's). */
  duplicate(): MemorySubscriber {
    return new MemorySubscriber(this.keyspace);
  }

  quit(): Promise<'OK'> {
    if (this.closed) return this.refuse(CONNECTION_CLOSED);
    this.closed = true;
    return Promise.resolve('OK');
  }

  disconnect(): void {
    this.closed = true;
  }

  private run(
    script: LuaScript,
    numkeys: number,
    args: readonly (string | number)[],
  ): Promise<unknown> {
    const count = String(numkeys);
    if (!INTEGER.test(count)) return this.refuse('ERR value is not an integer or out of range');
    const keys = Number(count);
    if (keys > args.length) {
      return this.refuse("ERR Number of keys can't be greater than number of args");
    }
    if (keys < 0) return this.refuse("ERR Number of keys can't be negative");
    const texts = args.map(asSent);
    return this.command((k) => script.twin(k, texts.slice(0, keys), texts.slice(keys)));
  }

  /** `work` run now as one atomic step; its answer, or its error, as the reply. */
  private command<T>(work: (keyspace: MemoryKeyspace) => T): Promise<T> {
    if (this.closed) return this.refuse(CONNECTION_CLOSED);
    try {
      return Promise.resolve(this.keyspace.atomically(() => work(this.keyspace)));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  private refuse(text: string): Promise<never> {
    return Promise.reject(new Error(text));
  }
}

/** The keyspaces of `memory://NAME`, one per name for the life of the process. */
const named = new Map<string, MemoryKeyspace>();

/**
 * A client for `url`: on a new keyspace of its own for `memory://`, on the process's keyspace of
 * that name for `memory://NAME` (every client of the same name sees the same keys and channels).
 *
 * @example
 * ```ts
 * const a = memoryClient('memory://tests');
 * const b = memoryClient('memory://tests'); // the same keys as a
 * const c = memoryClient('memory://'); // keys of its own
 * ```
 */
export function memoryClient(url: MemoryUrl): MemoryClient {
  const name = memoryUrlName(url);
  if (name === '') return new MemoryClient();
  let keyspace = named.get(name);
  if (keyspace === undefined) named.set(name, (keyspace = new MemoryKeyspace()));
  return new MemoryClient(keyspace);
}
