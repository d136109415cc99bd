import { StreamableFile } from '@nestjs/common';
import { Stream } from 'node:stream';

/**
 * Turns a method's result into text for Redis and back. JSON is the default
 * ({@link JSON_RESULT_SERIALIZER}); plug in another (superjson, msgpack as base64, ...) by passing
 * one. `serialize` throws for a value it cannot represent faithfully.
 *
 * @example
 * ```ts
 * const serializer: ResultSerializer = {
 *   serialize: (value) => superjson.stringify(value),
 *   deserialize: (text) => superjson.parse(text),
 * };
 * ```
 */
export interface ResultSerializer {
  serialize(value: unknown): string;
  deserialize(text: string): unknown;
}

/**
 * Why a value cannot be serialized: what was found, and where (`$` is the value itself).
 *
 * @example
 * ```ts
 * const problem: Unserializable = { what: 'a stream', path: '$.body' };
 * ```
 */
export interface Unserializable {
  readonly what: string;
  readonly path: string;
}

/**
 * Thrown by a serializer for a value it cannot represent; `SharedResultStore.serialize` turns
 * it into the catalog's `shared_result_unserializable` error.
 *
 * @example
 * ```ts
 * throw new UnserializableValueError({ what: 'a function', path: '$.callback' });
 * ```
 */
export class UnserializableValueError extends Error {
  override readonly name = 'UnserializableValueError';

  constructor(readonly problem: Unserializable) {
    super(`${problem.what} at ${problem.path}`);
  }
}

const COLLECTIONS: readonly [new (...args: never[]) => unknown, string][] = [
  [Map, 'a Map'],
  [Set, 'a Set'],
  [WeakMap, 'a WeakMap'],
  [WeakSet, 'a WeakSet'],
];

/** What in `value` would not survive JSON, or `undefined` when it all does. */
function objectProblem(value: object): string | undefined {
  if (value instanceof StreamableFile) return 'a StreamableFile';
  if (value instanceof Stream) return 'a stream';
  // An Observable has pipe() too, so it is told apart first.
  if (typeof (value as { subscribe?: unknown }).subscribe === 'function') return 'an Observable';
  if (typeof (value as { pipe?: unknown }).pipe === 'function') return 'a stream';
  if (typeof (value as { then?: unknown }).then === 'function') return 'a promise';
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) return 'a Buffer or typed array';
  return COLLECTIONS.find(([type]) => value instanceof type)?.[1];
}

/**
 * The first part of `value` that JSON would drop, change or choke on: functions, symbols, BigInt,
 * non-finite numbers, circular references, streams, `StreamableFile`, promises, Observables,
 * Map/Set, Buffers and typed arrays. Objects with a `toJSON()` (such as Date) are trusted.
 *
 * @example
 * ```ts
 * findUnserializable({ id: 1, body: fs.createReadStream('x') }); // { what: 'a stream', path: '$.body' }
 * findUnserializable({ id: 1n }); // { what: 'a BigInt', path: '$.id' }
 * ```
 */
export function findUnserializable(value: unknown): Unserializable | undefined {
  const ancestors: object[] = [];
  const visit = (node: unknown, path: string): Unserializable | undefined => {
    switch (typeof node) {
      case 'function':
        return { what: 'a function', path };
      case 'symbol':
        return { what: 'a symbol', path };
      case 'bigint':
        return { what: 'a BigInt', path };
      case 'number':
        return Number.isFinite(node) ? undefined : { what: `the number ${node}`, path };
      case 'object':
        break;
      default:
        return undefined;
    }
    if (node === null) return undefined;
    if (ancestors.includes(node)) return { what: 'a circular reference', path };
    const problem = objectProblem(node);
    if (problem) return { what: problem, path };
    if (typeof (node as { toJSON?: unknown }).toJSON === 'function') return undefined;
    ancestors.push(node);
    try {
      const entries: [string, unknown][] = Array.isArray(node)
        ? node.map((item, i) => [`[${i}]`, item])
        : Object.entries(node).map(([k, v]) => [`.${k}`, v]);
      for (const [step, child] of entries) {
        const found = visit(child, path + step);
        if (found) return found;
      }
      return undefined;
    } finally {
      ancestors.pop();
    }
  };
  return visit(value, '$');
}

/**
 * The default serializer: JSON, after {@link findUnserializable} has checked the value, so nothing
 * is silently lost. `undefined` (a method that returns nothing) is stored as the empty string.
 *
 * @example
 * ```ts
 * JSON_RESULT_SERIALIZER.deserialize(JSON_RESULT_SERIALIZER.serialize({ a: 1 })); // { a: 1 }
 * ```
 */
export const JSON_RESULT_SERIALIZER: ResultSerializer = Object.freeze({
  serialize(value: unknown): string {
    if (value === undefined) return '';
    const problem = findUnserializable(value);
    if (problem) throw new UnserializableValueError(problem);
    return JSON.stringify(value);
  },
  deserialize(text: string): unknown {
    return text === '' ? undefined : JSON.parse(text);
  },
});
