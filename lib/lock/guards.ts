import { isSlotKey } from '../redis/keys.js';
import type { LockGuard } from './lock-results.js';

/** The key and token of `value`, each read once; `undefined` for no guard or a throwing getter. */
export const readGuard = (value: unknown): { key: string; token: string } | undefined => {
  if (typeof value !== 'object' || value === null) return undefined;
  try {
    const { key, token } = value as Partial<LockGuard>;
    return typeof key === 'string' && typeof token === 'string' ? { key, token } : undefined;
  } catch {
    return undefined;
  }
};

const MD5_HEX = /^[0-9a-f]{32}$/;

/**
 * A guard for a lock key the service makes. With the built-in `key()`, exactly the namespace and
 * an MD5 (so not `shop2…` for `shop`, nor a derived or cache key); with an overridden one, a key
 * in `namespace` (at its start, or in or after a leading hash tag: `{ns…}…`, `{tag}ns…`) that is
 * no lock's fence, result or cache entry. A forged guard is refused before Redis is asked.
 */
export const ownGuard = (
  value: unknown,
  namespace: string,
  hashed: boolean,
): { key: string; token: string } | undefined => {
  const guard = readGuard(value);
  if (!guard) return undefined;
  const { key } = guard;
  const made = key.startsWith(namespace) && MD5_HEX.test(key.slice(namespace.length));
  if (hashed || isSlotKey(key)) return made ? guard : undefined;
  if (key.startsWith(namespace)) return guard;
  if (!key.startsWith('{')) return undefined;
  if (key.startsWith(namespace, 1)) return guard;
  const close = key.indexOf('}');
  return close > 0 && key.startsWith(namespace, close + 1) ? guard : undefined;
};
