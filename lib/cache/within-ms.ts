/**
 * `promise`'s value if it settles within `ms`, else `undefined`. Never rejects.
 *
 * @example
 * ```ts
 * const fresh = await withinMs(refreshed, 200); // undefined when the refresh takes longer
 * ```
 */
export function withinMs<T>(promise: Promise<T | undefined>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  return Promise.race([promise.catch(() => undefined), late]).finally(() => clearTimeout(timer));
}
