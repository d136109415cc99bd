import { Observable, ReplaySubject, share, tap } from 'rxjs';

/**
 * The flights in progress in this process, by Redis key: concurrent calls for a key are one
 * flight, so only its leader touches Redis. A flight is forgotten before its outcome reaches
 * anyone: a call after that starts a new one.
 */
export class LocalFlights {
  private readonly promises = new Map<string, Promise<unknown>>();
  private readonly streams = new Map<string, Observable<unknown>>();

  get size(): number {
    return this.promises.size + this.streams.size;
  }

  promise<T>(redisKey: string): Promise<T> | undefined {
    return this.promises.get(redisKey) as Promise<T> | undefined;
  }

  startPromise<T>(redisKey: string, lead: () => Promise<T>): Promise<T> {
    const forget = (): void => {
      if (this.promises.get(redisKey) === promise) this.promises.delete(redisKey);
    };
    const promise: Promise<T> = lead().then(
      (value) => {
        forget();
        return value;
      },
      (error: unknown) => {
        forget();
        throw error;
      },
    );
    this.promises.set(redisKey, promise);
    return promise;
  }

  /** The flight under way goes on for its callers; a later call starts a new one. */
  detach(redisKey: string): void {
    this.promises.delete(redisKey);
  }

  stream<T>(redisKey: string): Observable<T> | undefined {
    return this.streams.get(redisKey) as Observable<T> | undefined;
  }

  /** Overlapping subscriptions share one subscription to `source`; a late one gets a replay. */
  startStream<T>(redisKey: string, source: Observable<T>): Observable<T> {
    const forget = (): void => {
      if (this.streams.get(redisKey) === flight) this.streams.delete(redisKey);
    };
    const flight: Observable<T> = source.pipe(
      tap({ complete: forget, error: forget, finalize: forget }),
      share({
        connector: () => new ReplaySubject<T>(),
        resetOnComplete: true,
        resetOnError: true,
        resetOnRefCountZero: true,
      }),
    );
    this.streams.set(redisKey, flight);
    return flight;
  }
}
