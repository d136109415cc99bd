/**
 * A `memory://` URL: the in-memory backend instead of Redis. `memory://` alone gives a keyspace
 * of its own to each client made from it; `memory://NAME` (letters, digits, `.`, `_`, `-`) the
 * process's one keyspace of that name, shared by every client made from the same URL.
 *
 * @example
 * ```ts
 * const url: MemoryUrl = 'memory://';
 * ```
 */
export type MemoryUrl = `memory://${string}`;

const MEMORY_URL = /^memory:\/\/([A-Za-z0-9._-]*)$/;

/**
 * Whether `value` is a `memory://` URL ({@link MemoryUrl}).
 *
 * @example
 * ```ts
 * isMemoryUrl('memory://'); // true
 * isMemoryUrl('memory://user:secret@host'); // false: nothing but a name may follow
 * ```
 */
export const isMemoryUrl = (value: unknown): value is MemoryUrl =>
  typeof value === 'string' && MEMORY_URL.test(value);

/**
 * The keyspace name of a `memory://` URL: `''` for `memory://` alone (a keyspace of its own).
 *
 * @example
 * ```ts
 * memoryUrlName('memory://tests'); // 'tests'
 * ```
 */
export function memoryUrlName(url: MemoryUrl): string {
  return MEMORY_URL.exec(url)?.[1] ?? '';
}
