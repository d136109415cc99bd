import {
  EmptyError,
  Observable,
  type ObservableNotification,
  type Observer,
  type Subscription,
} from 'rxjs';

const observe = (notification: ObservableNotification<unknown>, to: Observer<unknown>): void =>
  notification.kind === 'N'
    ? to.next(notification.value)
    : notification.kind === 'E'
      ? to.error(notification.error)
      : to.complete();

/** A handler's Observable that emitted twice: a stream, sent live and never cached. */
export class Streamed {
  constructor(
    readonly stream: Observable<unknown>,
    /** Ends the handler's subscription when no one will take the stream. */
    readonly drop: () => void,
  ) {}
}

/**
 * The one value of `source` once it completes (`EmptyError` without one, as `lastValueFrom`), or,
 * at its second value, a `Streamed`: its values so far and the rest, live, on one subscription to
 * `source` that ends with its subscriber's. `hold` gets the function that ends the subscription
 * before either (a build past `hardTimeout`).
 */
export function valueOrStream(
  source: Observable<unknown>,
  hold: (end: () => void) => void,
): Promise<{ value: unknown } | Streamed> {
  return new Promise((resolve, reject) => {
    const queue: ObservableNotification<unknown>[] = [];
    let target: Observer<unknown> | undefined;
    let subscription: Subscription | undefined;
    let ended = false;
    let first: { value: unknown } | undefined;
    let handed = false;
    const end = (): void => {
      ended = true;
      target = undefined;
      queue.length = 0;
      subscription?.unsubscribe();
    };
    hold(() => {
      if (!handed) end();
    });
    const deliver = (notification: ObservableNotification<unknown>): void => {
      if (target) observe(notification, target);
      else if (!ended) queue.push(notification);
    };
    const stream = new Observable<unknown>((subscriber) => {
      if (ended || target) {
        subscriber.complete();
        return undefined;
      }
      target = subscriber;
      for (const notification of queue.splice(0)) observe(notification, subscriber);
      return end;
    });
    subscription = source.subscribe({
      next: (value) => {
        if (handed) return deliver({ kind: 'N', value });
        if (!first) {
          first = { value };
          return;
        }
        handed = true;
        queue.push({ kind: 'N', value: first.value }, { kind: 'N', value });
        resolve(new Streamed(stream, end));
      },
      error: (error: unknown) => (handed ? deliver({ kind: 'E', error }) : reject(error)),
      complete: () => {
        if (handed) deliver({ kind: 'C' });
        else if (first) resolve(first);
        else reject(new EmptyError());
      },
    });
    // Ended while `subscribe()` was still running (a synchronous source).
    if (ended) subscription.unsubscribe();
  });
}
