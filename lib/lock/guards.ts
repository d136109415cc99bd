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

/**
 * A guard whose key is in `namespace` (at its start, or in or after a leading hash tag: `{ns…}…`,
 * `{tag}ns…`). A forged guard for any other key, a data key say, is refused before Redis is asked.
 */
export const ownGuard = (
  value: unknown,
  namespace: string,
): { key: string; token: string } | undefined => {
  const guard = readGuard(value);
  if (!guard) return undefined;
  const { key } = guard;
  if (key.startsWith(namespace)) return guard;
  if (!key.startsWith('{')) return undefined;
  if (key.startsWith(namespace, 1)) return guard;
  const close = key.indexOf('}');
  return close > 0 && key.startsWith(namespace, close + 1) ? guard : undefined;
};
