import { Inject, Injectable, Optional } from '@nestjs/common';
import { hash, randomFillSync } from 'node:crypto';
import { BUFFER_LOCK_OPTIONS } from './buffer-lock.constants.js';
import { LockError } from './errors/lock.error.js';
import { BufferLockMessages } from './messages/buffer-lock-messages.js';
import type { MessageId } from './messages/messages.catalog.js';
import {
  resolveLockOptions,
  type RedisClientFactory,
  type RedisLockOptions,
  type RedisScriptClient,
  type ResolvedLockOptions,
  safeCatalog,
} from './options/redis-lock.options.js';
import { parseSeconds, toMilliseconds } from './options/seconds.js';
import { acquireLock } from './redis/acquire-lock.js';
import { batchingClient } from './redis/batching-client.js';
import { extendLock } from './redis/extend-lock.js';
import { acquireFencedLock } from './redis/fencing.js';
import { releaseLock } from './redis/release-lock.js';

/**
 * Proof of holding a lock: the Redis key and the random token written into it. Give it back to
 * `release` or `extend`.
 *
 * @example
 * ```ts
 * const [guard] = await lock.acquire('report');
 * if (guard) console.log(guard.key, guard.token);
 * ```
 */
export interface LockGuard {
  readonly key: string;
  readonly token: string;
  /** With `fencing: true` only: this holder's fencing number, larger than every earlier one. */
  readonly fence?: number;
}

/**
 * What `acquire` resolves to: `[guard, undefined]` when the lock was taken, `[undefined,
 * undefined]` when another holder has it, `[undefined, error]` when Redis could not be asked.
 *
 * @example
 * ```ts
 * const [guard, error]: AcquireResult = await lock.acquire('report');
 * ```
 */
export type AcquireResult =
  | readonly [guard: LockGuard, error: undefined]
  | readonly [guard: undefined, error: undefined]
  | readonly [guard: undefined, error: LockError];

/**
 * What `release` resolves to: `[true, undefined]` (also when the lock had already expired), or
 * `[false, error]`.
 *
 * @example
 * ```ts
 * const [ok, error]: ReleaseResult = await lock.release(guard);
 * ```
 */
export type ReleaseResult =
  readonly [ok: true, error: undefined] | readonly [ok: false, error: LockError];

/**
 * What `extend` resolves to: `[true, undefined]` when the expiry moved, `[false, undefined]` when
 * the lock is no longer ours, `[false, error]` when Redis could not be asked.
 *
 * @example
 * ```ts
 * const [extended, error]: ExtendResult = await lock.extend(guard, 30);
 * ```
 */
export type ExtendResult =
  | readonly [extended: true, error: undefined]
  | readonly [extended: false, error: undefined]
  | readonly [extended: false, error: LockError];

const TOKEN_BYTES = 24; // a multiple of 3: base64url without padding, 4 characters per 3 bytes
const TOKEN_CHARS = (TOKEN_BYTES / 3) * 4;
const TOKENS_PER_FILL = 256;

// One CSPRNG call fills the bytes of 256 tokens (a call per token was about a third of the CPU of
// an acquire+release: test/bench, node --cpu-prof), and one encoding turns them all into text
// (an encoding per token cost about 600 instructions: callgrind). Every TOKEN_CHARS-long slice of
// the text is exactly the encoding of its own TOKEN_BYTES bytes. crypto.randomUUID() pools alike.
const tokenBytes = Buffer.allocUnsafe(TOKEN_BYTES * TOKENS_PER_FILL);
let tokenText = '';
let tokenOffset = 0;

/** A fresh 32-character token from the CSPRNG. */
const createToken = (): string => {
  if (tokenOffset === tokenText.length) {
    randomFillSync(tokenBytes);
    tokenText = tokenBytes.toString('base64url');
    tokenOffset = 0;
  }
  tokenOffset += TOKEN_CHARS;
  return tokenText.slice(tokenOffset - TOKEN_CHARS, tokenOffset);
};

const isClient = (value: unknown): value is RedisScriptClient =>
  typeof value === 'object' &&
  value !== null &&
  typeof (value as Partial<RedisScriptClient>).eval === 'function';

const isGuard = (value: unknown): value is LockGuard =>
  typeof value === 'object' &&
  value !== null &&
  typeof (value as Partial<LockGuard>).key === 'string' &&
  typeof (value as Partial<LockGuard>).token === 'string';

const describe = (error: unknown): string =>
  error instanceof Error ? error.message : String(error);

/** Thrown inside the service when the factory gives no client; never leaves it. */
class NoClient extends Error {}

/**
 * A lock through one Redis server, so that only one worker of many builds a given cache entry.
 * Each call resolves to a tuple and never rejects for Redis trouble: see {@link AcquireResult}.
 *
 * Works in a Nest app (provided by `BufferLockModule`) and on its own with `new`. No connection is
 * made until the first `acquire`, `release` or `extend`; a factory is then called once per process.
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
  /** The last key() asked for: `@SingleFlight` asks redisKey(k) and then acquire(k). */
  private lastCacheKey: string | undefined;
  private lastRedisKey = '';
  private connecting: Promise<RedisScriptClient> | undefined;

  constructor(
    @Inject(BUFFER_LOCK_OPTIONS) options: RedisLockOptions,
    @Optional() @Inject(BufferLockMessages) messages?: BufferLockMessages,
  ) {
    // Invalid overrides are left out here, so that they are reported rather than rendered.
    this.messages = messages ?? new BufferLockMessages({ messages: safeCatalog(options) });
    this.options = resolveLockOptions(options, this.messages);
    if (typeof this.options.redis !== 'function') this.use(this.options.redis);
  }

  /** The client, or the factory that makes it, as given. */
  get redis(): RedisScriptClient | RedisClientFactory {
    return this.options.redis;
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
   * `ttl` for this lock; beyond the spec, so that `@SingleFlight` can set it per method. When the
   * script fails (e.g. `commandTimeout` on a paused server), a release of this call's token is
   * sent right behind it, so that a server that runs the acquire late does not keep the key
   * locked until the TTL.
   */
  async acquire(cacheKey: string, ttl: number = this.options.ttl): Promise<AcquireResult> {
    if (cacheKey === undefined || cacheKey === null) {
      return [undefined, this.error('lock_key_undefined')];
    }
    if (typeof cacheKey !== 'string') return [undefined, this.error('lock_key_invalid')];
    // The service's own ttl was checked when it was made: no string and regex work per call.
    const seconds = ttl === this.options.ttl ? ttl : parseSeconds(ttl);
    if (seconds === undefined) return [undefined, this.error('redis_ttl_invalid')];
    const guard: LockGuard = { key: this.keyOf(cacheKey), token: createToken() };
    let client: RedisScriptClient;
    let answer: unknown;
    try {
      client = this.commands ?? (await this.connectCommands());
    } catch (error) {
      return [undefined, this.failure('redis_lock_failed', error)];
    }
    try {
      const take = this.options.fencing ? acquireFencedLock : acquireLock;
      answer = await take(client, guard.key, guard.token, toMilliseconds(seconds));
    } catch (error) {
      // A timed-out script may still run: a paused or slow server reads it from its socket later.
      // A release of this call's own token, sent right behind it, lets go of a lock taken that
      // late instead of leaving the key blocked until the TTL. Best effort; never another holder's.
      releaseLock(client, guard.key, guard.token).catch(() => {});
      return [undefined, this.failure('redis_lock_failed', error)];
    }
    if (answer === undefined || answer === null) return [undefined, this.error('redis_no_result')];
    if (this.options.fencing) {
      return Number(answer) > 0
        ? [{ ...guard, fence: Number(answer) }, undefined]
        : [undefined, undefined];
    }
    return Number(answer) === 1 ? [guard, undefined] : [undefined, undefined];
  }

  /**
   * Deletes the lock if it still holds this guard's token. A lock that already expired, or was
   * taken by another holder since, is left alone and the call still succeeds.
   */
  async release(guard: LockGuard): Promise<ReleaseResult> {
    if (!isGuard(guard)) return [false, this.error('redis_invalid_guard')];
    let answer: unknown;
    try {
      const client = this.commands ?? (await this.connectCommands());
      answer = await releaseLock(client, guard.key, guard.token);
    } catch (error) {
      return [false, this.failure('redis_unlock_failed', error)];
    }
    if (answer === undefined || answer === null) return [false, this.error('redis_no_result')];
    return [true, undefined];
  }

  /**
   * Moves the lock's expiry to `ttl` seconds from now (default: the service's `ttl`), if the lock
   * still holds this guard's token. Beyond the spec; the watchdog of long builds uses it.
   */
  async extend(guard: LockGuard, ttl: number = this.options.ttl): Promise<ExtendResult> {
    if (!isGuard(guard)) return [false, this.error('redis_invalid_guard')];
    const seconds = parseSeconds(ttl);
    if (seconds === undefined) return [false, this.error('redis_ttl_invalid')];
    let answer: unknown;
    try {
      const client = this.commands ?? (await this.connectCommands());
      answer = await extendLock(client, guard.key, guard.token, toMilliseconds(seconds));
    } catch (error) {
      return [false, this.failure('redis_extend_failed', error)];
    }
    if (answer === undefined || answer === null) return [false, this.error('redis_no_result')];
    return Number(answer) === 1 ? [true, undefined] : [false, undefined];
  }

  /**
   * The Redis key a lock on `cacheKey` lives under (what `key()` makes). Keys of anything else one
   * lock needs (wake-up channel, shared result, fencing counter) are derived from it.
   */
  redisKey(cacheKey: string): string {
    return this.keyOf(cacheKey);
  }

  /**
   * The client the lock uses, made by the factory on first use (the same single instance). Beyond
   * the spec: the wake-on-release subscriber duplicates it and reads lock PTTLs through it. Rejects
   * with a `LockError` (`redis_no_client`, or the factory's own error) when there is none.
   */
  async getClient(): Promise<RedisScriptClient> {
    try {
      return this.client ?? (await this.connect());
    } catch (error) {
      if (error instanceof NoClient) throw this.error('redis_no_client');
      throw error;
    }
  }

  /**
   * The Redis key for a cache key: the namespace, then the hex MD5 of the key's UTF-8 bytes.
   * Override it to add a Redis Cluster hash tag.
   */
  protected key(cacheKey: string): string {
    // One-shot crypto.hash (UTF-8 for strings): a third of createHash's cost per call.
    return this.options.namespace + hash('md5', cacheKey, 'hex');
  }

  /** key(), remembered for the last cache key asked: one MD5 per call instead of two. */
  private keyOf(cacheKey: string): string {
    if (cacheKey !== this.lastCacheKey) {
      this.lastRedisKey = this.key(cacheKey);
      this.lastCacheKey = cacheKey;
    }
    return this.lastRedisKey;
  }

  private use(client: RedisScriptClient): void {
    this.client = client;
    this.commands = batchingClient(client);
  }

  /** The client for the lock's own commands, connecting on first use. */
  private async connectCommands(): Promise<RedisScriptClient> {
    await this.connect();
    return this.commands!;
  }

  /** The client, made by the factory on first use. Concurrent first calls share one call. */
  private connect(): Promise<RedisScriptClient> {
    if (this.connecting) return this.connecting;
    const factory = this.options.redis as RedisClientFactory;
    const attempt = (async () => {
      const client = await factory();
      if (!isClient(client)) throw new NoClient();
      this.use(client);
      return client;
    })();
    // A failed attempt is forgotten, so the next call asks the factory again.
    attempt.catch(() => {
      if (this.connecting === attempt) this.connecting = undefined;
    });
    this.connecting = attempt;
    return attempt;
  }

  private error(id: MessageId): LockError {
    return new LockError(id, this.messages.render(id));
  }

  /** A Redis failure in `id`'s words; the client's own error goes in ERROR and in `cause`. */
  private failure(id: MessageId, error: unknown): LockError {
    if (error instanceof NoClient) {
      const text = this.messages.render('redis_no_client');
      return new LockError('redis_no_client', this.messages.render(id, { ERROR: text }));
    }
    return new LockError(id, this.messages.render(id, { ERROR: describe(error) }), {
      cause: error,
    });
  }
}
