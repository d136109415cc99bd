import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { BUFFER_LOCK_OPTIONS } from '../options/buffer-lock.constants.js';
import { LockError } from '../errors/lock.error.js';
import { memoryClient } from '../memory/memory-client.js';
import { announceMemoryBackend } from '../memory/memory-notice.js';
import { isMemoryUrl } from '../memory/memory-url.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { MessageId } from '../messages/messages.catalog.js';
import {
  resolveLockOptions,
  type RedisLockOptions,
  type ResolvedLockOptions,
  safeCatalog,
} from '../options/redis-lock.options.js';
import { type LockClient, type RedisClientFactory } from '../redis/client.js';
import { type RedisScriptClient } from '../types/clients.js';
import { parseSeconds, toMilliseconds } from '../options/seconds.js';
import { isResolved } from '../options/validate-options.js';
import { acquireLock } from '../redis/acquire-lock.js';
import { batchingClient } from '../redis/batching-client.js';
import { extendLock } from '../redis/extend-lock.js';
import { isNodeRedisClient, nodeRedisClient } from '../redis/node-redis-client.js';
import { acquireFencedLock } from '../redis/fencing.js';
import { slotKey, type LockKeyRole } from '../redis/keys.js';
import { releaseLock } from '../redis/release-lock.js';
import { lockChannel } from '../telemetry/channels.js';
import { FactoryConnection } from './client-connection.js';
import { ownGuard, readGuard } from './guards.js';
import { hashedKey } from './lock-key.js';
import { lockFailure, NoClient } from './lock-failures.js';
import type { AcquireResult, ExtendResult, LockGuard, ReleaseResult } from './lock-results.js';
import { traceLock } from './lock-trace.js';
import { createToken } from './tokens.js';
import { UnsentReleases } from './unsent-releases.js';

/** A fencing number as the script's INCR gives it: a positive safe integer. */
const isFence = (answer: unknown): answer is number =>
  typeof answer === 'number' && Number.isSafeInteger(answer) && answer > 0;

/**
 * The method that acquires by a Redis key already derived: the library's own callers use it; it
 * is not part of the public API.
 *
 * @example
 * ```ts
 * const [guard, error] = await lock[ACQUIRE_KEY](lock.redisKey('nightly-report'), 30);
 * ```
 */
export const ACQUIRE_KEY: unique symbol = Symbol('acquireKey');
export const RELEASE_WRITING: unique symbol = Symbol('releaseWriting');

/** One key written beside a release: `prefix` + the lock's slot key, or its derived key `role`. */
export interface SlotWrite {
  readonly prefix: string;
  readonly role?: LockKeyRole;
  readonly payload: string | undefined;
  readonly ttlMs: number;
}

export type WriteResult = readonly [written: boolean, error: LockError | undefined];

/**
 * A lock through one Redis server, so that only one worker of many builds a given cache entry.
 * Each call resolves to a tuple and never rejects for Redis trouble: see {@link AcquireResult}.
 *
 * Works in a Nest app (provided by `BufferLockModule`) and on its own with `new`. No connection is
 * made until the first `acquire`, `release` or `extend`; a factory is then called once per process.
 * With `redis: 'memory://'` it needs no Redis at all and coordinates this process only (it logs
 * so when it is made).
 *
 * @example
 * ```ts
 * const lock = new RedisLockService({ redis: () => new Redis(), namespace: 'shop:buffer:' });
 * const [guard, error] = await lock.acquire('nightly-report');
 * if (guard) {
 *   try { await buildReport(); } finally { await lock.release(guard); }
 * } else if (error) {
 *   console.warn(error.message); // Redis trouble
 * } // else another worker is building it
 * ```
 */
@Injectable()
export class RedisLockService {
  private readonly options: ResolvedLockOptions;
  private readonly messages: BufferLockMessages;
  private client: RedisScriptClient | undefined;
  /** The lock's own commands go through this: `client`, batched under load (batchingClient). */
  private commands: RedisScriptClient | undefined;
  /** Releases behind failed acquires that wait for the connection to be back. */
  private unsent: UnsentReleases | undefined;
  /** Makes the client when the options give a factory. */
  private readonly connection: FactoryConnection | undefined;

  constructor(
    @Inject(BUFFER_LOCK_OPTIONS) options: RedisLockOptions,
    @Optional() @Inject(BufferLockMessages) messages?: BufferLockMessages,
  ) {
    // Invalid overrides are left out here, so that they are reported rather than rendered.
    this.messages = messages ?? new BufferLockMessages({ messages: safeCatalog(options) });
    // The module hands over options it resolved already: they are not validated twice.
    this.options = isResolved(options)
      ? (options as ResolvedLockOptions)
      : resolveLockOptions(options, this.messages);
    const { redis } = this.options;
    if (isMemoryUrl(redis)) {
      announceMemoryBackend(new Logger('BufferLock'), this.messages);
      this.use(memoryClient(redis));
    } else if (typeof redis !== 'function') this.use(redis);
    else {
      const use = (client: LockClient): void => this.use(client);
      this.connection = new FactoryConnection(redis, this.options.connectTimeout, use);
    }
  }

  /** The client, or the factory that makes it, as given; for a `memory://` URL, its client. */
  get redis(): LockClient | RedisClientFactory {
    const { redis } = this.options;
    return isMemoryUrl(redis) ? this.client! : redis;
  }

  /** The prefix of every Redis key this service makes. */
  get namespace(): string {
    return this.options.namespace;
  }

  /** Seconds a lock lives in Redis. */
  get ttl(): number {
    return this.options.ttl;
  }

  /** The message overrides given, if any. */
  get messageOverrides(): RedisLockOptions['messages'] {
    return this.options.messages;
  }

  /**
   * Tries, without waiting, to become the only holder of `cacheKey`. Not re-entrant: a second
   * acquire of a key this process holds answers busy. `ttl` (seconds) overrides the service's
   * `ttl` for this lock, so that `@SingleFlight` can set it per method. When the
   * script fails (e.g. `commandTimeout` on a paused server), a release of this call's token is
   * sent right behind it, so that a server that runs the acquire late does not keep the key
   * locked until the TTL.
   */
  acquire(cacheKey: string, ttl: number = this.options.ttl): Promise<AcquireResult> {
    if (cacheKey === undefined || cacheKey === null) {
      return Promise.resolve([undefined, this.error('lock_key_undefined')]);
    }
    if (typeof cacheKey !== 'string') {
      return Promise.resolve([undefined, this.error('lock_key_invalid')]);
    }
    let redisKey: string;
    try {
      redisKey = this.key(cacheKey);
    } catch (error) {
      return Promise.reject(error);
    }
    return this[ACQUIRE_KEY](redisKey, ttl);
  }

  /**
   * `acquire` by the Redis key that `redisKey()` made, so that a caller which derived it already
   * does not derive it again. Internal to the library.
   */
  [ACQUIRE_KEY](redisKey: string, ttl: number = this.options.ttl): Promise<AcquireResult> {
    // One boolean read when nobody listens: no trace object, no closure.
    if (lockChannel.hasSubscribers) {
      return traceLock('acquire', redisKey, undefined, () => this.take(redisKey, ttl));
    }
    return this.take(redisKey, ttl);
  }

  private async take(redisKey: string, ttl: number): Promise<AcquireResult> {
    // The service's own ttl was checked when it was made: no string and regex work per call.
    const seconds = ttl === this.options.ttl ? ttl : parseSeconds(ttl);
    if (seconds === undefined) return [undefined, this.error('redis_ttl_invalid')];
    const guard: LockGuard = { key: redisKey, token: createToken() };
    let client: RedisScriptClient;
    let answer: unknown;
    try {
      if (!this.commands) await this.connect();
      client = this.commands!;
    } catch (error) {
      return [undefined, this.failure('redis_lock_failed', error)];
    }
    const unsent = this.unsent!;
    const releasing = unsent.sendIfConnected();
    if (releasing) await releasing;
    const wentOut = unsent.connected;
    const ttlMs = toMilliseconds(seconds);
    try {
      const take = this.options.fencing ? acquireFencedLock : acquireLock;
      answer = await take(client, guard.key, guard.token, ttlMs);
    } catch (error) {
      // A timed-out script may still run: a paused or slow server reads it from its socket later.
      // A release of this call's own token, sent right behind it, lets go of a lock taken that
      // late instead of leaving the key blocked until the TTL. Best effort; never another holder's.
      // One that cannot go out after an acquire that did (the connection broke since) goes ahead
      // of the next acquire once the connection is back.
      releaseLock(client, guard.key, guard.token).catch(() => {
        if (wentOut && !unsent.connected) unsent.add(guard, ttlMs);
      });
      return [undefined, this.failure('redis_lock_failed', error)];
    }
    if (answer === undefined || answer === null) return [undefined, this.error('redis_no_result')];
    // Only the replies Redis gives count: a Symbol, `true`, `'1'` or `[1]` is no lock.
    if (answer === 0) return [undefined, undefined];
    if (this.options.fencing) {
      return isFence(answer)
        ? [{ ...guard, fence: answer }, undefined]
        : [undefined, this.error('redis_bad_reply')];
    }
    return answer === 1 ? [guard, undefined] : [undefined, this.error('redis_bad_reply')];
  }

  /**
   * Deletes the lock if it still holds this guard's token. A lock that already expired, or was
   * taken by another holder since, is left alone and the call still succeeds. A guard whose key
   * is outside this service's namespace is refused (`redis_invalid_guard`), and nothing is sent.
   */
  release(given: LockGuard): Promise<ReleaseResult> {
    return this[RELEASE_WRITING](given, undefined) as Promise<ReleaseResult>;
  }

  // The release that also writes (or deletes) one key in the lock's hash slot, in the same
  // script: a shared result or a cache entry. `written` is true only when this guard still held
  // the lock, so that the write went through.
  [RELEASE_WRITING](given: LockGuard, write: SlotWrite | undefined): Promise<WriteResult> {
    if (lockChannel.hasSubscribers) {
      const key = readGuard(given)?.key ?? '';
      return traceLock('release', key, given ?? undefined, () => this.unlock(given, write));
    }
    return this.unlock(given, write);
  }

  private async unlock(given: LockGuard, write: SlotWrite | undefined): Promise<WriteResult> {
    const guard = ownGuard(given, this.options.namespace);
    if (!guard) return [false, this.error('redis_invalid_guard')];
    const written = write && {
      key: slotKey(guard.key, write.prefix, write.role),
      payload: write.payload,
      ttlMs: write.ttlMs,
    };
    let answer: unknown;
    try {
      // Inline rather than through an async helper: one promise and microtask turn less per call.
      if (!this.commands) await this.connect();
      answer = await releaseLock(this.commands!, guard.key, guard.token, written);
    } catch (error) {
      return [false, this.failure('redis_unlock_failed', error)];
    }
    if (answer === undefined || answer === null) return [false, this.error('redis_no_result')];
    return [written === undefined || Number(answer) === 1, undefined];
  }

  /**
   * Moves the lock's expiry to `ttl` seconds from now (default: the service's `ttl`), if the lock
   * still holds this guard's token. The watchdog of long builds uses it. A guard whose key is
   * outside this service's namespace is refused (`redis_invalid_guard`), and nothing is sent.
   */
  extend(given: LockGuard, ttl: number = this.options.ttl): Promise<ExtendResult> {
    if (lockChannel.hasSubscribers) {
      const key = readGuard(given)?.key ?? '';
      return traceLock('extend', key, undefined, () => this.prolong(given, ttl));
    }
    return this.prolong(given, ttl);
  }

  private async prolong(given: LockGuard, ttl: number): Promise<ExtendResult> {
    const guard = ownGuard(given, this.options.namespace);
    if (!guard) return [false, this.error('redis_invalid_guard')];
    const seconds = parseSeconds(ttl);
    if (seconds === undefined) return [false, this.error('redis_ttl_invalid')];
    let answer: unknown;
    try {
      if (!this.commands) await this.connect();
      answer = await extendLock(this.commands!, guard.key, guard.token, toMilliseconds(seconds));
    } catch (error) {
      return [false, this.failure('redis_extend_failed', error)];
    }
    if (answer === undefined || answer === null) return [false, this.error('redis_no_result')];
    if (answer === 0) return [false, undefined];
    return answer === 1 ? [true, undefined] : [false, this.error('redis_bad_reply')];
  }

  /**
   * The Redis key a lock on `cacheKey` lives under (what `key()` makes). Keys of anything else one
   * lock needs (wake-up channel, shared result, fencing counter) are derived from it.
   */
  redisKey(cacheKey: string): string {
    return this.key(cacheKey);
  }

  /**
   * The client the lock uses, made by the factory on first use (the same single instance), as the
   * library drives it: a node-redis client is presented in ioredis's shape. The wake-on-release
   * subscriber duplicates it and reads lock PTTLs through it. Rejects
   * with a `LockError` (`redis_no_client`, or the factory's own error) when there is none.
   */
  async getClient(): Promise<RedisScriptClient> {
    try {
      if (!this.client) await this.connect();
      return this.client!;
    } catch (error) {
      if (error instanceof NoClient) throw this.error('redis_no_client');
      throw error;
    }
  }

  /**
   * The Redis key for a cache key: the namespace, then the hex MD5 of the key's UTF-8 bytes. A
   * key with a lone surrogate (no UTF-8 form) is hashed so that it shares no lock with another
   * key (see hashedKey). Override it to add a Redis Cluster hash tag.
   */
  protected key(cacheKey: string): string {
    return hashedKey(this.options.namespace, cacheKey);
  }

  /** Takes `given` as the client: a node-redis one through its adapter, and only then. */
  private use(given: LockClient): void {
    const client = isNodeRedisClient(given) ? nodeRedisClient(given) : (given as RedisScriptClient);
    this.client = client;
    // node-redis writes the commands of one event-loop turn together: no batching on top.
    const commands = batchingClient(client);
    this.commands = commands;
    this.unsent = new UnsentReleases(client, commands);
  }

  /** Makes the client by the factory on first use (FactoryConnection). */
  private connect(): Promise<void> {
    if (this.client) return Promise.resolve();
    return this.connection!.connect();
  }

  private error(id: MessageId): LockError {
    return new LockError(id, this.messages.render(id));
  }

  /** A Redis failure in `id`'s words; the client's own error goes in ERROR and in `cause`. */
  private failure(id: MessageId, error: unknown): LockError {
    return lockFailure(this.messages, this.options.connectTimeout, id, error);
  }
}
