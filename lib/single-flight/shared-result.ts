import { LockError } from '../errors/lock.error.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { RedisScriptClient } from '../types/clients.js';
import { toMilliseconds } from '../options/seconds.js';
import {
  JSON_RESULT_SERIALIZER,
  UnserializableValueError,
  type ResultSerializer,
} from '../serialization/result-serializer.js';
import { resultKey } from '../redis/keys.js';
import { getValue } from '../redis/plain-commands.js';
import { carriedPayload } from '../redis/lock-commands.js';
import { RELEASE_WRITING, type RedisLockService } from '../lock/redis-lock.service.js';
import { errorText } from '../messages/error-text.js';

/** The payload stored for `lockKey`, or `null` (never stored, or expired). */
export async function readSharedResult(
  client: RedisScriptClient,
  lockKey: string,
): Promise<string | null> {
  return getValue(client, resultKey(lockKey));
}

export interface SharedResultOptions {
  lock: Pick<RedisLockService, 'getClient' | typeof RELEASE_WRITING>;
  serializer?: ResultSerializer;
  /** Seconds a shared result lives (default 10). */
  ttl?: number;
  messages?: BufferLockMessages;
}

/** What `read` found; an unreadable payload means: run the method as leader. */
export type SharedRead =
  | { readonly status: 'hit'; readonly value: unknown }
  | { readonly status: 'miss' }
  | { readonly status: 'error'; readonly error: LockError };

/** `[false, undefined]`: nothing done, the lock is no longer ours. */
export type StoreResult =
  | readonly [stored: true, error: undefined]
  | readonly [stored: false, error: undefined]
  | readonly [stored: false, error: LockError];

/**
 * Shares a leader's result with the waiters of other processes (`share: true`): serialized first
 * (failing before anything touches Redis), stored under the lock's result key while the lock is
 * still held, then released in the same script.
 */
export class SharedResultStore {
  private readonly serializer: ResultSerializer;
  private readonly ttlMs: number;
  private readonly messages: BufferLockMessages;

  constructor(private readonly options: SharedResultOptions) {
    this.serializer = options.serializer ?? JSON_RESULT_SERIALIZER;
    this.ttlMs = toMilliseconds(options.ttl ?? 10);
    this.messages = options.messages ?? new BufferLockMessages();
  }

  /** Throws a `shared_result_unserializable` LockError when the serializer cannot represent it. */
  serialize(value: unknown, cacheKey: string): string {
    try {
      return this.serializer.serialize(value);
    } catch (error) {
      const problem =
        error instanceof UnserializableValueError
          ? error.problem
          : { what: errorText(error), path: '$' };
      const text = this.messages.render('shared_result_unserializable', {
        KEY: cacheKey,
        WHAT: problem.what,
        PATH: problem.path,
      });
      throw new LockError('shared_result_unserializable', text, { cause: error });
    }
  }

  /**
   * The result the leader of `lockKey` shared, if any: the one its release's wake-up `carried`
   * (that wake-up's text), else read. Never rejects.
   */
  async read(lockKey: string, cacheKey: string, carried?: string): Promise<SharedRead> {
    const given = carriedPayload(carried, 'result');
    if (given !== undefined) {
      try {
        return { status: 'hit', value: this.serializer.deserialize(given) };
      } catch {
        // Unreadable here as in Redis: read it, and say so there.
      }
    }
    let payload: string | null;
    try {
      payload = await readSharedResult(await this.options.lock.getClient(), lockKey);
    } catch (error) {
      return { status: 'error', error: this.failure(error) };
    }
    if (payload === null) return { status: 'miss' };
    try {
      return { status: 'hit', value: this.serializer.deserialize(payload) };
    } catch (error) {
      const text = this.messages.render('shared_result_unreadable', {
        KEY: cacheKey,
        ERROR: errorText(error),
      });
      return {
        status: 'error',
        error: new LockError('shared_result_unreadable', text, { cause: error }),
      };
    }
  }

  /**
   * Stores `payload` for `ttl` seconds and releases the lock in one script; `undefined` removes an
   * older result instead (the leader failed). Never rejects.
   */
  async storeAndRelease(
    guard: { key: string; token: string },
    payload: string | undefined,
    ttl?: number,
  ): Promise<StoreResult> {
    const ttlMs = ttl === undefined ? this.ttlMs : toMilliseconds(ttl);
    const write = {
      prefix: '',
      role: 'result' as const,
      payload,
      ttlMs,
      carried: 'result' as const,
    };
    const [written, error] = await this.options.lock[RELEASE_WRITING](guard, write);
    return error ? [false, this.failure(error.cause ?? error)] : [written, undefined];
  }

  private failure(error: unknown): LockError {
    const text = this.messages.render('shared_result_failed', {
      ERROR: errorText(error),
    });
    return new LockError('shared_result_failed', text, { cause: error });
  }
}
