// Event names, checked by the compiler (test/types/types.spec.ts compiles it). Each
// `@ts-expect-error` marks a use that must not compile.
import { BufferCache, SingleFlightEngine, type BufferCacheEvents } from '../../lib/index.js';

export function listen(cache: BufferCache, engine: SingleFlightEngine, given: string): void {
  // A name held in a variable of type keyof BufferCacheEvents is taken; a listener of a name the
  // compiler sees gets that event's arguments.
  let heard = 0;
  const names: readonly (keyof BufferCacheEvents)[] = ['hit', 'miss', 'stale'];
  for (const name of names) cache.on(name, () => heard++);
  cache.on('hit', (key) => key.length + heard);
  cache.on('refresh-failed', (key: string, error: unknown) => [key, error]);

  // @ts-expect-error -- a plain string may name no event: narrow it to keyof BufferCacheEvents
  cache.on(given, () => undefined);

  // @ts-expect-error -- an event the cache does not emit
  cache.on('hits', () => undefined);

  // @ts-expect-error -- refresh-failed's second argument is the error, not a number
  cache.on('refresh-failed', (_key: string, error: number) => error);

  engine.on('breaker', (state) => state);
}
