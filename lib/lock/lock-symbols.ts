import type { LockError } from '../errors/lock.error.js';
import type { LockKeyRole } from '../redis/keys.js';
import type { CarriedKind } from '../redis/lock-commands.js';

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
  /** Written only while the holder's claim names it (see `claimKey`). */
  readonly claimed?: boolean;
}

/** `written`: this guard still held the lock, so the write went through. */
export type WriteResult = readonly [written: boolean, error: LockError | undefined];
