import { Observable, throwError } from 'rxjs';

/** What `@CacheEvict` and `@CachePut` do once the method succeeded; resolves to what is handed on. */
type Act = (last: { value: unknown } | undefined) => Promise<unknown>;

/** Duck-typed, as `returnsObservable`: any copy of rxjs counts. */
function isObservable(value: unknown): value is Observable<unknown> {
  const candidate = value as { subscribe?: unknown; pipe?: unknown } | null;
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof candidate!.subscribe === 'function' &&
    typeof candidate!.pipe === 'function'
  );
}

/** A failure, the way the method answers: an Observable's error, else a rejection. */
export function failed(error: unknown, observable: boolean): unknown {
  return observable ? throwError(() => error) : Promise.reject(error);
}

/**
 * Each subscription to `source` runs `act` once `source` completes, before passing on the last
 * value (as `act` gives it back): values go on one behind, so that none of them is seen before
 * `act` is done. An error, or an unsubscription before completion, runs nothing.
 */
function onCompletion(source: Observable<unknown>, act: Act): Observable<unknown> {
  return new Observable<unknown>((subscriber) => {
    let held: { value: unknown } | undefined;
    return source.subscribe({
      next: (value) => {
        if (held) subscriber.next(held.value);
        held = { value };
      },
      error: (error: unknown) => subscriber.error(error),
      complete: () => {
        const last = held;
        new Promise<unknown>((resolve) => resolve(act(last))).then(
          (value) => {
            if (last) subscriber.next(value);
            subscriber.complete();
          },
          (error: unknown) => subscriber.error(error),
        );
      },
    });
  });
}

/**
 * The method's answer, with `act` run once it succeeded: a value or a promise once resolved, an
 * Observable (returned, or a promise's value) on each subscription's completion.
 */
export function onSuccess(run: () => unknown, act: Act, observable: boolean): unknown {
  let result: unknown;
  try {
    result = run();
  } catch (error) {
    return failed(error, observable);
  }
  if (isObservable(result)) return onCompletion(result, act);
  return Promise.resolve(result).then((value) =>
    isObservable(value) ? onCompletion(value, act) : act({ value }),
  );
}
