// What the interceptor makes of a handler's run, shared by its HTTP, message and field paths and
// by every interceptor class: the handler's own errors, and what passes through the cache as it was.
import type { Observable } from 'rxjs';
import { Streamed, valueOrStream } from './http-stream.js';

// Passed on as they are, unlike the cache's own errors.
const handlerErrors = new WeakSet<object>();

// Handlers whose Observable emitted more than once: streams, sent live from then on.
export const streaming = new WeakSet<object>();

// Through the cache and out again as it was: a `StreamableFile` (read once: sent, never cached),
// a response a shared cache may not store, a stream, or a non-object the handler threw.
export class Carried {
  constructor(readonly value: unknown) {}
}

const isObject = (value: unknown): value is object =>
  (typeof value === 'object' && value !== null) || typeof value === 'function';

/**
 * The handler's value, or its stream; its error rejects marked as the handler's (a non-object
 * `Carried`). `onSubscribed` gets the subscription's end.
 */
export async function handlerOutcome(
  handled: Observable<unknown>,
  onSubscribed: (end: () => void) => void,
): Promise<{ value: unknown } | Streamed> {
  try {
    return await valueOrStream(handled, onSubscribed);
  } catch (error) {
    if (!isObject(error)) throw new Carried(error);
    handlerErrors.add(error);
    throw error;
  }
}

/** Whether `error` is the handler's own, or something carried through the cache as it was. */
export const isHandlerOutcome = (error: unknown): boolean =>
  error instanceof Carried || (isObject(error) && handlerErrors.has(error));
