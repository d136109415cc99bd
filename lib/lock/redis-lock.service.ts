import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { BUFFER_LOCK_OPTIONS } from '../options/buffer-lock.constants.js';
import { LockError } from '../errors/lock.error.js';
import { memoryClient } from '../memory/memory-client.js';
import { announceMemoryBackend, isMemoryUrl } from '../memory/memory-url.js';
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
import { parseSeconds, TIMER_SECONDS, toMilliseconds } from '../options/seconds.js';
import { isResolved } from '../options/validate-options.js';
import { acquireLock, extendLock, releaseLock, type UnlessFound } from '../redis/lock-commands.js';
import { slotKey } from '../redis/keys.js';
import { ownGuard } from './guards.js';
import { lockFailure, NoClient } from './lock-failures.js';
import type { AcquireResult, ExtendResult, LockGuard, ReleaseResult } from './lock-results.js';
import { lockChannel } from '../telemetry/channels.js';
import { traceLock } from './lock-trace.js';
import { HeldLocks } from './held-locks.js';
import { LockConnection } from './lock-connection.js';
import { createToken, hashedKey, isFence } from './lock-keys.js';
import { acquireReply, extendReply, releaseReply } from './lock-replies.js';
import { ACQUIRE_KEY, ACQUIRE_UNLESS_FOUND, RELEASE_WRITING } from './lock-symbols.js';
import type { FoundInstead, SlotWrite, WriteResult } from './lock-symbols.js';

// Where the library's other layers have always found them.
export { ACQUIRE_KEY, ACQUIRE_UNLESS_FOUND, RELEASE_WRITING };
export type { FoundInstead, SlotWrite, WriteResult };

/**
 * A lock through one Redis server, so that only one worker of many builds a given cache entry.
 * Each call resolves to a tuple and never rejects for Redis trouble. Provided by
 * `BufferLockModule`, or made with `new`; it connects on first use. `redis: 'memory://'` needs no
 * Redis and coordinates this process only.
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
  // The built-in key(): its keys can be checked exactly (see ownGuard).
  private readonly hashedKeys = this.key === RedisLockService.prototype.key;
  private readonly connection: LockConnection;
  private readonly held = new HeldLocks();
  private closing: Promise<void> | undefined;

  constructor(
    @Inject(BUFFER_LOCK_OPTIONS) options: RedisLockOptions,
    @Optional() @Inject(BufferLockMessages) messages?: BufferLockMessages,
  ) {
    // Invalid overrides are left out here, so that they are reported rather than rendered.
    this.messages = messages ?? new BufferLockMessages({ messages: safeCatalog(options) });
    // The module hands over options it resolved already.
    this.options = isResolved(options)
      ? (options as ResolvedLockOptions)
      : resolveLockOptions(options, this.messages);
    const { redis, connectTimeout } = this.options;
    const factory = (): RedisClientFactory => this.options.redis as RedisClientFactory;
    this.connection = new LockConnection(factory, connectTimeout);
    if (isMemoryUrl(redis)) {
      announceMemoryBackend(new Logger('BufferLock'), this.messages);
      this.connection.use(memoryClient(redis));
    } else if (typeof redis !== 'function') this.connection.use(redis);
  }

  /** The client, or the factory that makes it, as given; for a `memory://` URL, its client. */
  get redis(): LockClient | RedisClientFactory {
    const { redis } = this.options;
    return isMemoryUrl(redis) ? this.connection.client! : redis;
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
   * Tries, without waiting, to become the only holder of `cacheKey` for `ttl` seconds (default:
   * the service's). Not re-entrant: a second acquire of a key this process holds answers busy.
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

  /** @internal */
  [ACQUIRE_KEY](redisKey: string, ttl: number = this.options.ttl): Promise<AcquireResult> {
    // One boolean read when nobody listens: no trace context, no closure.
    if (!lockChannel.hasSubscribers) return this.take(redisKey, ttl);
    return traceLock('acquire', redisKey, undefined, () => this.take(redisKey, ttl));
  }

  /**
   * @internal
   * As the acquire, unless `found.key` (in the lock's slot) holds a text: then that, and no lock.
   * Not traced: most of these are cache hits, no acquire (the cache uses it while nobody traces).
   */
  [ACQUIRE_UNLESS_FOUND](
    redisKey: string,
    found: UnlessFound,
    ttl: number,
  ): Promise<AcquireResult | FoundInstead> {
    return this.take(redisKey, ttl, found);
  }

  private take(redisKey: string, ttl: number): Promise<AcquireResult>;
  private take(
    redisKey: string,
    ttl: number,
    found: UnlessFound,
  ): Promise<AcquireResult | FoundInstead>;
  private async take(
    redisKey: string,
    ttl: number,
    found?: UnlessFound,
  ): Promise<AcquireResult | FoundInstead> {
    // The service's own ttl was checked when it was made: no parsing per call.
    const seconds = ttl === this.options.ttl ? ttl : parseSeconds(ttl, TIMER_SECONDS);
    if (seconds === undefined) return [undefined, this.error('redis_ttl_invalid')];
    if (this.held.closing) return [undefined, this.error('lock_closed')];
    const guard: LockGuard = { key: redisKey, token: createToken() };
    let client: RedisScriptClient;
    let answer: unknown;
    const ttlMs = toMilliseconds(seconds);
    const { held } = this;
    held.start();
    try {
      try {
        if (!this.connection.commands) await this.connection.connect();
        client = this.connection.commands!;
      } catch (error) {
        return [undefined, this.failure('redis_lock_failed', error)];
      }
      const unsent = this.connection.unsent!;
      const releasing = unsent.sendIfConnected();
      if (releasing) await releasing;
      const wentOut = unsent.connected;
      try {
        const { fencing } = this.options;
        answer = await acquireLock(client, guard.key, guard.token, ttlMs, fencing, found);
      } catch (error) {
        // A timed-out script may still run later: a release of this call's own token, sent behind
        // it (or before the next acquire, once the connection is back), lets go of such a lock.
        releaseLock(client, guard.key, guard.token).catch(() => {
          if (wentOut && !unsent.connected) unsent.add(guard, ttlMs);
        });
        return [undefined, this.failure('redis_lock_failed', error)];
      }
      if (this.options.fencing ? isFence(answer) : answer === 1) {
        held.hold(guard, ttlMs);
        // Taken as the shutdown began: let go at once, before the connection closes.
        if (held.closing) {
          await this.unlock(guard, undefined);
          return [undefined, this.error('lock_closed')];
        }
      }
    } finally {
      held.done();
    }
    const looked = found !== undefined;
    return acquireReply(answer, guard, this.options.fencing, looked, (id) => this.error(id));
  }

  /**
   * Deletes the lock if it still holds this guard's token; a lock that expired or changed hands
   * is left alone, and the call still succeeds. A guard outside this service's namespace is
   * refused (`redis_invalid_guard`) before Redis is asked.
   */
  release(given: LockGuard): Promise<ReleaseResult> {
    return this[RELEASE_WRITING](given, undefined) as Promise<ReleaseResult>;
  }

  /** @internal */
  [RELEASE_WRITING](given: LockGuard, write: SlotWrite | undefined): Promise<WriteResult> {
    if (!lockChannel.hasSubscribers) return this.unlock(given, write);
    return traceLock('release', undefined, given, () => this.unlock(given, write));
  }

  private async unlock(given: LockGuard, write: SlotWrite | undefined): Promise<WriteResult> {
    const guard = ownGuard(given, this.options.namespace, this.hashedKeys);
    if (!guard) return [false, this.error('redis_invalid_guard')];
    // Released by the shutdown already; the connection may be closed by now.
    if (this.held.wasAbandoned(guard.token)) return [write === undefined, undefined];
    const written = write && {
      key: write.prefix === undefined ? undefined : slotKey(guard.key, write.prefix, write.role),
      payload: write.payload,
      ttlMs: write.ttlMs,
      carried: write.carried,
      claimed: write.claimed,
    };
    let answer: unknown;
    const { held } = this;
    held.released(guard.token); // no longer this process's to release at shutdown
    held.start();
    try {
      // Inline rather than through an async helper: one promise and microtask turn less per call.
      const { connection } = this;
      if (!connection.commands) await connection.connect();
      answer = await releaseLock(connection.commands!, guard.key, guard.token, written);
    } catch (error) {
      return [false, this.failure('redis_unlock_failed', error)];
    } finally {
      held.done();
    }
    return releaseReply(answer, written !== undefined, (id) => this.error(id));
  }

  /**
   * Moves the lock's expiry to `ttl` seconds from now (default: the service's) if it still holds
   * this guard's token. A guard outside this service's namespace is refused.
   */
  extend(given: LockGuard, ttl: number = this.options.ttl): Promise<ExtendResult> {
    if (!lockChannel.hasSubscribers) return this.prolong(given, ttl);
    return traceLock('extend', undefined, given, () => this.prolong(given, ttl));
  }

  private async prolong(given: LockGuard, ttl: number): Promise<ExtendResult> {
    const guard = ownGuard(given, this.options.namespace, this.hashedKeys);
    if (!guard) return [false, this.error('redis_invalid_guard')];
    const seconds = parseSeconds(ttl, TIMER_SECONDS);
    if (seconds === undefined) return [false, this.error('redis_ttl_invalid')];
    if (this.held.wasAbandoned(guard.token)) return [false, undefined];
    let answer: unknown;
    const ttlMs = toMilliseconds(seconds);
    try {
      const { connection } = this;
      if (!connection.commands) await connection.connect();
      answer = await extendLock(connection.commands!, guard.key, guard.token, ttlMs);
    } catch (error) {
      return [false, this.failure('redis_extend_failed', error)];
    }
    const result = extendReply(answer, (id) => this.error(id));
    if (result[0]) this.held.extended(guard.token, ttlMs);
    return result;
  }

  /**
   * Shuts the lock down: no new lock is taken (`lock_closed`), the locks this process holds are
   * waited for until their holders release them, for `shutdownTimeout` seconds at most, and then
   * released (for at most 1 s more). A holder's release after that sends nothing. Closes no client.
   *
   * @example
   * ```ts
   * process.once('SIGTERM', () => void lock.close().then(() => redis.quit()));
   * ```
   */
  close(): Promise<void> {
    if (!this.closing) {
      this.held.closing = true;
      const timeoutMs = this.options.shutdownTimeout * 1000;
      this.closing = this.held.drain(timeoutMs, () => this.connection.commands).then(() => {});
    }
    return this.closing;
  }

  /** The Redis key a lock on `cacheKey` lives under (what `key()` makes). */
  redisKey(cacheKey: string): string {
    return this.key(cacheKey);
  }

  /**
   * The client the lock uses, made by the factory on first use, as the library drives it (a
   * node-redis client in ioredis's shape). Rejects with a `LockError` when there is none.
   */
  async getClient(): Promise<RedisScriptClient> {
    try {
      const { connection } = this;
      if (!connection.client) await connection.connect();
      return connection.client!;
    } catch (error) {
      if (error instanceof NoClient) throw this.error('redis_no_client');
      throw error;
    }
  }

  /**
   * The namespace, then the hex MD5 of the key's UTF-8 bytes. Override it to add a Redis Cluster
   * hash tag.
   */
  protected key(cacheKey: string): string {
    return hashedKey(this.options.namespace, cacheKey);
  }

  private error(id: MessageId): LockError {
    return new LockError(id, this.messages.render(id));
  }

  private failure(id: MessageId, error: unknown): LockError {
    return lockFailure(this.messages, this.options.connectTimeout, id, error);
  }
}
