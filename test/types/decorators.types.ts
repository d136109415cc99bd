// What the decorators accept, checked by the compiler (test/types/types.spec.ts compiles it):
// each `@ts-expect-error` marks a use that must not compile; an unused one fails the compile.
import { Observable, of } from 'rxjs';
import { CachePut, Cached, SingleFlight } from '../../lib/index.js';

interface Report {
  id: string;
}

export class Reports {
  // A cached method is async: its callers get a Promise.
  @Cached('report')
  async report(): Promise<Report> {
    return { id: 'r' };
  }

  // @ts-expect-error -- a method returning a plain value would become async behind its type
  @Cached('count')
  count(): number {
    return 1;
  }

  // @ts-expect-error -- @Cached refuses an Observable (it is not a single value)
  @Cached('stream')
  stream(): Observable<number> {
    return of(1);
  }

  // A key function takes the method's arguments, or fewer, or wider types.
  @Cached((id: string) => `report:${id}`)
  async byId(id: string): Promise<Report> {
    return { id };
  }

  @Cached(() => 'latest')
  async latest(id: string): Promise<Report> {
    return { id };
  }

  @Cached((id: string | number) => `report:${id}`)
  async byAnyId(id: string): Promise<Report> {
    return { id };
  }

  // @ts-expect-error -- the key function takes a number, the method a string
  @Cached((id: number) => `report:${id}`)
  async byNumber(id: string): Promise<Report> {
    return { id };
  }

  @CachePut((id: string) => `report:${id}`)
  async save(id: string): Promise<Report> {
    return { id };
  }

  @CachePut((id: string) => `report:${id}`)
  saved(id: string): Observable<Report> {
    return of({ id });
  }

  // @ts-expect-error -- @CachePut on a method returning a plain value
  @CachePut('plain')
  plain(): Report {
    return { id: 'p' };
  }

  // @ts-expect-error -- the key function takes a number, the method a string
  @CachePut((id: number) => `report:${id}`)
  async saveNumber(id: string): Promise<Report> {
    return { id };
  }
}

export class Jobs {
  // onBusy 'skip' resolves undefined when another worker holds the lock: the type must say so.
  @SingleFlight('nightly', { onBusy: 'skip' })
  async nightly(): Promise<number | undefined> {
    return 1;
  }

  @SingleFlight('void', { onBusy: 'skip' })
  async cleanup(): Promise<void> {}

  // @ts-expect-error -- with onBusy 'skip' a caller's number may be undefined
  @SingleFlight('count', { onBusy: 'skip' })
  async count(): Promise<number> {
    return 1;
  }

  @SingleFlight('wait', { onBusy: 'wait' })
  async waits(): Promise<number> {
    return 1;
  }

  @SingleFlight((id: string) => `job:${id}`)
  async run(id: string): Promise<string> {
    return id;
  }

  // @ts-expect-error -- the key function takes a number, the method a string
  @SingleFlight((id: number) => `job:${id}`)
  async runNumber(id: string): Promise<string> {
    return id;
  }
}
