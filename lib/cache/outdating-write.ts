import { LockError } from '../errors/lock.error.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { errorText } from '../messages/error-text.js';
import { writeOutdating } from '../redis/lock-commands.js';
import type { BufferCacheStore } from './cache-store.js';
import type { CacheWriter } from './cache-writer.js';

/**
 * Writes `text` under `storeKey` for `ttlMs` (deletes it, without `text`) and outdates the build in
 * flight on `lockKey`, whose release then stores nothing. One script on the built-in store
 * (`ownStore` undefined). On a store of the user's the build is outdated first, then the entry
 * written: a build whose release came before the mark is overwritten by this write, and one whose
 * release comes after it deletes what it wrote.
 */
export async function outdatingWrite(
  writer: CacheWriter,
  ownStore: BufferCacheStore | undefined,
  lockKey: string,
  storeKey: string,
  text: string | undefined,
  ttlMs: number,
): Promise<void> {
  if (!ownStore) {
    return writer.run(lockKey, (client) => writeOutdating(client, lockKey, storeKey, text, ttlMs));
  }
  const marking = writer.run(lockKey, (client) => writeOutdating(client, lockKey));
  const unmarked = await marking.then(
    () => undefined,
    (error: unknown) => ({ error }),
  );
  if (text === undefined) await ownStore.delete(storeKey);
  else await ownStore.set(storeKey, text, ttlMs);
  // Without the mark a build in flight could store its older value after this write: the store
  // is written all the same, and the caller told.
  if (unmarked) throw unmarked.error;
}

/** A write or delete the store refused: its caller cannot take it as done. */
export function writeFailed(messages: BufferLockMessages, error: unknown): never {
  const text = messages.render('cache_write_failed', { ERROR: errorText(error) });
  throw new LockError('cache_write_failed', text, { cause: error });
}
