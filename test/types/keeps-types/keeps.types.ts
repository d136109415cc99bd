// An app whose serializer keeps types (superjson, say) declares so, and a cached value is typed as
// what it stored; compiled in a program of its own, since the declaration holds for a whole program.
import { BufferCache, Cached } from '../../../lib/index.js';

declare module '../../../lib/index.js' {
  interface BufferLockTypes {
    serializerKeepsTypes: true;
  }
}

export async function values(cache: BufferCache): Promise<number> {
  const built = await cache.getOrSet('built', () => new Date());
  const map = await cache.getOrSet('map', () => new Map([['a', 1]]));
  return built.getTime() + (map.get('a') ?? 0);
}

export class Reports {
  @Cached('built')
  async built(): Promise<Date> {
    return new Date();
  }
}
