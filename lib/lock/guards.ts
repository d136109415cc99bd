import type { LockGuard } from './lock-results.js';

/**
 * The key and token of `value`, each read once, or `undefined` when it is no guard: not an
 * object, a field that is not a string, or a getter or Proxy trap that throws.
 *
 * @example
 * ```ts
 * readGuard({ key: 'buffer:0cc1…', token: 'Zq9…' }); // { key: 'buffer:0cc1…', token: 'Zq9…' }
 * readGuard({ key: 42, token: 'Zq9…' }); // undefined
 * ```
 */
export const readGuard = (value: unknown): { key: string; token: string } | undefined => {
  if (typeof value !== 'object' || value === null) return undefined;
  try {
    const { key, token } = value as Partial<LockGuard>;
    return typeof key === 'string' && typeof token === 'string' ? { key, token } : undefined;
  } catch {
    return undefined;
  }
};

/**
 * Whether `redisKey` is in `namespace`, so a guard for it may release or extend: the key starts
 * with the namespace, or a leading hash tag holds it or precedes it (`{ns…}…`, `{tag}ns…`, as a
 * `key()` override for Redis Cluster makes). A forged guard for any other key (a data key and its
 * value) is refused before Redis is asked.
 *
 * @example
 * ```ts
 * isOwnKey('buffer:0cc1…', 'buffer:'); // true
 * isOwnKey('{buffer:0cc1…}', 'buffer:'); // true
 * isOwnKey('{user1}buffer:0cc1…', 'buffer:'); // true
 * isOwnKey('user:42', 'buffer:'); // false
 * ```
 */
export function isOwnKey(redisKey: string, namespace: string): boolean {
  if (redisKey.startsWith(namespace)) return true;
  if (!redisKey.startsWith('{')) return false;
  if (redisKey.startsWith(namespace, 1)) return true;
  const close = redisKey.indexOf('}');
  return close > 0 && redisKey.startsWith(namespace, close + 1);
}

/**
 * The key and token of `value` ({@link readGuard}) when its key is in `namespace`
 * ({@link isOwnKey}); `undefined` for no guard or another namespace's.
 *
 * @example
 * ```ts
 * const guard = ownGuard(given, 'buffer:');
 * if (!guard) return [false, error('redis_invalid_guard')];
 * ```
 */
export const ownGuard = (
  value: unknown,
  namespace: string,
): { key: string; token: string } | undefined => {
  const guard = readGuard(value);
  return guard && isOwnKey(guard.key, namespace) ? guard : undefined;
};
