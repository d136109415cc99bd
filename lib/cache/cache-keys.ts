import { LockError } from '../errors/lock.error.js';
import type { RedisLockService } from '../lock/redis-lock.service.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';

// A URL key (the interceptor's) starts with NUL and `u`, a message's with NUL and `r`, an
// idempotency record's with NUL and `i`; a key of the user's that starts with NUL gets another
// one: no key of the user's names them.
export type KeySpace = 'u' | 'r' | 'i';
export const spaced = (key: string, space?: KeySpace): string =>
  space ? `\0${space}${key}` : typeof key === 'string' && key.startsWith('\0') ? `\0${key}` : key;

/** `BufferCache`'s deletion of a URL key's entry: an unsafe request's invalidation. */
export const DELETE_URL: unique symbol = Symbol('deleteUrl');

/** The lookup with its status, for the interceptor. */
export const LOOKUP: unique symbol = Symbol('lookup');

/** An idempotency record's read, rejecting when the store fails, and its write: for `@Idempotent`. */
export const RECORD_GET: unique symbol = Symbol('recordGet');
export const RECORD_SET: unique symbol = Symbol('recordSet');

/** `set`, resolving to what a hit will return, for `@CachePut`. */
export const PUT: unique symbol = Symbol('put');

/** The module's `http` options, for the interceptor. */
export const HTTP: unique symbol = Symbol('http');

/** The lock key of a cache key, refusing a key that is no non-empty string. */
export class LockKeys {
  // The last key's lock key: a stampede asks for one key many times in a row, and hashing costs.
  private last: { key: string; lockKey: string } | undefined;

  constructor(
    private readonly lock: RedisLockService,
    private readonly messages: BufferLockMessages,
  ) {}

  of(key: string): string {
    if (this.last?.key === key) return this.last.lockKey;
    if (typeof key !== 'string' || key === '') {
      const id = key === undefined || key === null ? 'lock_key_undefined' : 'lock_key_invalid';
      throw new LockError(id, this.messages.render(id));
    }
    const lockKey = this.lock.redisKey(key);
    this.last = { key, lockKey };
    return lockKey;
  }
}
