// What a cached value is typed as: what comes back through the default JSON serializer
// (test/types/types.spec.ts compiles it). Each `@ts-expect-error` marks a use that must not compile.
import { Observable, of } from 'rxjs';
import {
  BufferCache,
  CachePut,
  Cached,
  SingleFlight,
  SingleFlightEngine,
  type Stored,
} from '../../lib/index.js';

class Money {
  constructor(
    readonly cents: number,
    readonly currency: string,
  ) {}

  format(): string {
    return `${this.cents / 100} ${this.currency}`;
  }
}

interface Visit {
  at: Date;
  count: number;
  note?: string;
  tags: (string | undefined)[];
  price: Money;
}

export async function values(cache: BufferCache, engine: SingleFlightEngine): Promise<void> {
  const visit = await cache.getOrSet('visit', (): Visit => ({
    at: new Date(),
    count: 1,
    tags: ['a', undefined],
    price: new Money(100, 'EUR'),
  }));
  // A Date comes back as the string its toJSON() gives.
  const at: string = visit.at;
  // @ts-expect-error -- not a Date any more: d.getTime() would throw
  visit.at.getTime();
  // A class instance comes back as its data, without its methods.
  const cents: number = visit.price.cents;
  // @ts-expect-error -- format() is not on the plain object that comes back
  visit.price.format();
  // An undefined array element comes back as null; an optional property stays optional.
  const tag: string | null = visit.tags[1]!;
  const note: string | undefined = visit.note;
  // @ts-expect-error -- undefined is not what comes back in an array
  const missing: string | undefined = visit.tags[1];

  // get() is typed the same way.
  const read = await cache.get<Visit>('visit');
  const readAt: string | undefined = read?.at;
  // @ts-expect-error -- a Date read back is a string
  const readDate: Date | undefined = read?.at;

  // What JSON cannot carry is never: the cache refuses it at run time.
  const map = await cache.getOrSet('map', () => new Map<string, number>());
  // @ts-expect-error -- a Map has no way through JSON
  map.get('a');

  // unknown stays unknown; plain data stays as it is.
  const anything: unknown = await cache.getOrSet('anything', (): unknown => 1);
  const plain: { id: string; n: number[] } = await cache.getOrSet('plain', () => ({
    id: 'p',
    n: [1],
  }));

  // A single flight's caller gets its own value, or (share: true, another worker) the stored one.
  const ran = await engine.run('job', () => new Date(), { share: true });
  // @ts-expect-error -- it may be the string another worker's Date came back as
  const ranDate: Date | undefined = ran;
  const ranEither: Date | string | undefined = ran;

  void [at, cents, tag, note, missing, readAt, readDate, anything, plain, ranDate, ranEither];
}

export const stored: Stored<{ at: Date; price: Money }> = {
  at: '2026-01-01T00:00:00.000Z',
  price: { cents: 1, currency: 'EUR' },
};

export class Reports {
  // Plain data goes through unchanged.
  @Cached('report')
  async report(): Promise<{ id: string; at: string }> {
    return { id: 'r', at: new Date().toISOString() };
  }

  // @ts-expect-error -- a Date would come back as a string, behind a Date type
  @Cached('built')
  async built(): Promise<Date> {
    return new Date();
  }

  // @ts-expect-error -- a class instance would come back without its methods
  @Cached('price')
  async price(): Promise<Money> {
    return new Money(1, 'EUR');
  }

  // Declared as what comes back, it compiles.
  @Cached('price:data')
  async priceData(): Promise<Stored<Money>> {
    return new Money(1, 'EUR');
  }

  // @ts-expect-error -- @CachePut hands on the value as a hit will return it
  @CachePut('saved')
  async save(): Promise<Date> {
    return new Date();
  }

  // @ts-expect-error -- the same for each value of an Observable
  @CachePut('stream')
  saves(): Observable<Date> {
    return of(new Date());
  }

  @CachePut('stream:data')
  savesData(): Observable<{ at: string }> {
    return of({ at: new Date().toISOString() });
  }

  // @ts-expect-error -- with share: true, another worker's caller gets the stored value
  @SingleFlight('shared', { share: true })
  async shared(): Promise<Date> {
    return new Date();
  }

  // Without share, every caller runs the method or waits: its own value, a Date.
  @SingleFlight('unshared')
  async unshared(): Promise<Date> {
    return new Date();
  }
}
