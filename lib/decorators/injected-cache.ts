import { BufferCache } from '../cache/buffer-cache.service.js';
import { BufferLockNotImportedError } from '../errors/buffer-lock-not-imported.error.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { MessageId } from '../messages/messages.catalog.js';
import { injectOnce } from './method-metadata.js';

// One property per instance for every cache decorator of its class.
const CACHE: unique symbol = Symbol('BufferLock.cache');

/** Makes Nest inject the module's `BufferCache` into every instance of `target`'s class. */
export function injectCache(target: object): void {
  injectOnce(target, CACHE, BufferCache);
}

/** The instance's `BufferCache`, or the error to reject with when its module cannot see one. */
export function cacheOf(
  self: unknown,
  messages: BufferLockMessages,
  id: MessageId,
  names: Readonly<Record<string, string>>,
): BufferCache | BufferLockNotImportedError {
  const cache = (self as { [CACHE]?: BufferCache } | null | undefined)?.[CACHE];
  return cache ?? new BufferLockNotImportedError(messages.render(id, names));
}
