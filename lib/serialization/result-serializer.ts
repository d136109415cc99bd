import { StreamableFile } from '@nestjs/common';
import { Stream } from 'node:stream';

/**
 * Turns a result into text for Redis and back; JSON by default. `serialize` throws for a value
 * it cannot represent faithfully.
 *
 * @example
 * ```ts
 * const serializer: ResultSerializer = { serialize: superjson.stringify, deserialize: superjson.parse };
 * ```
 */
export interface ResultSerializer {
  serialize(value: unknown): string;
  deserialize(text: string): unknown;
}

/** What cannot be serialized, and where (`$` is the value itself). */
export interface Unserializable {
  readonly what: string;
  readonly path: string;
}

export class UnserializableValueError extends Error {
  override readonly name = 'UnserializableValueError';

  constructor(readonly problem: Unserializable) {
    super(`${problem.what} at ${problem.path}`);
  }
}

const COLLECTIONS = [Map, Set, WeakMap, WeakSet] as const;

function objectProblem(value: object): string | undefined {
  const proto: unknown = Object.getPrototypeOf(value);
  // A plain object or array is an instance of none of the classes here: only its own members can
  // make it look like an Observable, a stream or a promise.
  const plain = proto === Object.prototype || proto === Array.prototype || proto === null;
  if (!plain) {
    if (value instanceof StreamableFile) return 'a StreamableFile';
    if (value instanceof Stream) return 'a stream';
  }
  // An Observable has pipe() too, so it is told apart first.
  if (typeof (value as { subscribe?: unknown }).subscribe === 'function') return 'an Observable';
  if (typeof (value as { pipe?: unknown }).pipe === 'function') return 'a stream';
  if (typeof (value as { then?: unknown }).then === 'function') return 'a promise';
  if (plain) return undefined;
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) return 'a Buffer or typed array';
  const collection = COLLECTIONS.find((type) => value instanceof type);
  return collection && `a ${collection.name}`;
}

/**
 * The first part of `value` JSON would drop, change or choke on. Objects with a `toJSON()`
 * (such as Date) are trusted; a hole in an array is stored as `null`, as `undefined` is.
 */
export function findUnserializable(value: unknown): Unserializable | undefined {
  const ancestors: object[] = [];
  // The way down to the node being visited: spelled out as a path only for a problem.
  const steps: (string | number)[] = [];
  const at = (what: string): Unserializable => ({
    what,
    path: `$${steps.map((step) => (typeof step === 'number' ? `[${step}]` : `.${step}`)).join('')}`,
  });
  const visit = (node: unknown): Unserializable | undefined => {
    const type = typeof node;
    if (type === 'function' || type === 'symbol') return at(`a ${type}`);
    if (type === 'bigint') return at('a BigInt');
    if (type === 'number' && !Number.isFinite(node)) return at(`the number ${node as number}`);
    if (type !== 'object' || node === null) return undefined;
    const object = node as Record<string, unknown>;
    if (ancestors.includes(object)) return at('a circular reference');
    const problem = objectProblem(object);
    if (problem) return at(problem);
    if (typeof object.toJSON === 'function') return undefined;
    ancestors.push(object);
    if (Array.isArray(object)) {
      for (let i = 0; i < object.length; i++) {
        steps.push(i);
        const found = visit(object[i]);
        if (found) return found;
        steps.pop();
      }
    } else {
      for (const key of Object.keys(object)) {
        steps.push(key);
        const found = visit(object[key]);
        if (found) return found;
        steps.pop();
      }
    }
    ancestors.pop();
    return undefined;
  };
  return visit(value);
}

/** JSON, checked first so that nothing is silently lost; `undefined` is stored as `''`. */
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
