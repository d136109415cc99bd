import { hash, randomFillSync } from 'node:crypto';
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
import { isNodeRedisClient, type LockClient, type RedisClientFactory } from '../redis/client.js';
import { type RedisScriptClient } from '../types/clients.js';
import { parseSeconds, TIMER_SECONDS, toMilliseconds } from '../options/seconds.js';
import { isResolved } from '../options/validate-options.js';
import { batchingClient } from '../redis/batching-client.js';
import { acquireLock, extendLock, releaseLock, type CarriedKind } from '../redis/lock-commands.js';
import { nodeRedisClient } from '../redis/node-redis-client.js';
import { slotKey, type LockKeyRole } from '../redis/keys.js';
import { connectBy } from './client-connection.js';
import { ownGuard } from './guards.js';
import { attempt } from '../messages/error-text.js';
import { lockFailure, NoClient } from './lock-failures.js';
import type { AcquireResult, ExtendResult, LockGuard, ReleaseResult } from './lock-results.js';
import { lockChannel } from '../telemetry/channels.js';
import { traceLock } from './lock-trace.js';
import { UnsentReleases } from './unsent-releases.js';

/** A fencing number as the script's INCR gives it: a positive safe integer. */
const isFence = (answer: unknown): answer is number =>
  typeof answer === 'number' && Number.isSafeInteger(answer) && answer > 0;

// No UTF-8 has this byte: keys with lone surrogates (U+FFFD in UTF-8) stay apart from all others.
const NOT_UTF8 = Buffer.from([0xff]);

function hashedKey(namespace: string, cacheKey: string): string {
  // String.prototype.isWellFormed is ES2024; the library compiles against ES2023.
  if ((cacheKey as string & { isWellFormed(): boolean }).isWellFormed()) {
    // One-shot crypto.hash: a third of createHash's cost per call.
    return namespace + hash('md5', cacheKey, 'hex');
  }
  const units = Buffer.from(cacheKey, 'utf16le');
  return namespace + hash('md5', Buffer.concat([NOT_UTF8, units]), 'hex');
}

// One CSPRNG call and one base64url encoding serve 256 tokens of 24 bytes (32 characters): both
// cost far more per call than per byte, and every 32-character slice encodes its own 24 bytes.
const TOKEN_CHARS = 32;
const tokenBytes = Buffer.allocUnsafe(24 * 256);
let tokenText = '';
let tokenOffset = 0;

function createToken(): string {
  if (tokenOffset === tokenText.length) {
    randomFillSync(tokenBytes);
    tokenText = tokenBytes.toString('base64url');
    tokenOffset = 0;
  }
  tokenOffset += TOKEN_CHARS;
  return tokenText.slice(tokenOffset - TOKEN_CHARS, tokenOffset);
}

// The library's own: acquire by a derived Redis key, release with a write in the lock's slot.
export const ACQUIRE_KEY: unique symbol = Symbol('acquireKey');
export const RELEASE_WRITING: unique symbol = Symbol('releaseWriting');
// The cache's: acquire unless an entry is found, in one script.
export const ACQUIRE_UNLESS_FOUND: unique symbol = Symbol('acquireUnlessFound');

/** The text of the entry found instead of taking the lock. */
export interface FoundInstead {
  readonly found: string;
}

/**
 * Written beside a release: `prefix` + the lock's slot key, or its derived key `role`. Without a
 * `prefix` nothing is written: the payload only rides the release's wake-up.
 */
export interface SlotWrite {
  readonly prefix: string | undefined;
  readonly role?: LockKeyRole;
  readonly payload: string | undefined;
  readonly ttlMs: number;
  readonly carried?: CarriedKind;
}

/** `written`: this guard still held the lock, so the write went through. */
export type WriteResult = readonly [written: boolean, error: LockError | undefined];

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
  private client: RedisScriptClient | undefined;
  /** `client`, batched under load: the lock's own commands. */
  private commands: RedisScriptClient | undefined;
  private unsent: UnsentReleases | undefined;
  private connecting: Promise<void> | undefined;

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
    const { redis } = this.options;
    if (isMemoryUrl(redis)) {
      announceMemoryBackend(new Logger('BufferLock'), this.messages);
      this.use(memoryClient(redis));
    } else if (typeof redis !== 'function') this.use(redis);
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
   * As the acquire, unless `foundKey` (in the lock's slot) holds a text: then that, and no lock.
   * Not traced: most of these are cache hits, no acquire (the cache uses it while nobody traces).
   */
  [ACQUIRE_UNLESS_FOUND](
    redisKey: string,
    foundKey: string,
    ttl: number,
  ): Promise<AcquireResult | FoundInstead> {
    return this.take(redisKey, ttl, foundKey);
  }

  private take(redisKey: string, ttl: number): Promise<AcquireResult>;
  private take(
    redisKey: string,
    ttl: number,
    foundKey: string,
  ): Promise<AcquireResult | FoundInstead>;
  private async take(
    redisKey: string,
    ttl: number,
    foundKey?: string,
  ): Promise<AcquireResult | FoundInstead> {
    // The service's own ttl was checked when it was made: no parsing per call.
    const seconds = ttl === this.options.ttl ? ttl : parseSeconds(ttl, TIMER_SECONDS);
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
      const { fencing } = this.options;
      answer = await acquireLock(client, guard.key, guard.token, ttlMs, fencing, foundKey);
    } catch (error) {
      // A timed-out script may still run later: a release of this call's own token, sent behind
      // it (or before the next acquire, once the connection is back), lets go of such a lock.
      releaseLock(client, guard.key, guard.token).catch(() => {
        if (wentOut && !unsent.connected) unsent.add(guard, ttlMs);
      });
      return [undefined, this.failure('redis_lock_failed', error)];
    }
    if (answer === undefined || answer === null) return [undefined, this.error('redis_no_result')];
    if (foundKey !== undefined && typeof answer === 'string') return { found: answer };
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
    const written = write && {
      key: write.prefix === undefined ? undefined : slotKey(guard.key, write.prefix, write.role),
      payload: write.payload,
      ttlMs: write.ttlMs,
      carried: write.carried,
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
    // A reply that is no number (a null-prototype object, say) is no write, not a throw.
    return [written === undefined || attempt(() => Number(answer) === 1, false), undefined];
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
      if (!this.client) await this.connect();
      return this.client!;
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

  private use(given: LockClient): void {
    const client = isNodeRedisClient(given) ? nodeRedisClient(given) : (given as RedisScriptClient);
    this.client = client;
    this.commands = batchingClient(client);
    this.unsent = new UnsentReleases(client, this.commands);
  }

  /** Concurrent first calls share one attempt; a failed one is forgotten, to be tried again. */
  private connect(): Promise<void> {
    if (this.client) return Promise.resolve();
    if (this.connecting) return this.connecting;
    const factory = this.options.redis as RedisClientFactory;
    const connecting = connectBy(factory, this.options.connectTimeout, (c) => this.use(c));
    connecting.catch(() => {
      if (this.connecting === connecting) this.connecting = undefined;
    });
    this.connecting = connecting;
    return connecting;
  }

  private error(id: MessageId): LockError {
    return new LockError(id, this.messages.render(id));
  }

  private failure(id: MessageId, error: unknown): LockError {
    return lockFailure(this.messages, this.options.connectTimeout, id, error);
  }
}
