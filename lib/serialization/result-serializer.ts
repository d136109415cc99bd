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

function objectProblem(value: object): string | undefined {
  if (value instanceof StreamableFile) return 'a StreamableFile';
  if (value instanceof Stream) return 'a stream';
  // An Observable has pipe() too, so it is told apart first.
  if (typeof (value as { subscribe?: unknown }).subscribe === 'function') return 'an Observable';
  if (typeof (value as { pipe?: unknown }).pipe === 'function') return 'a stream';
  if (typeof (value as { then?: unknown }).then === 'function') return 'a promise';
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) return 'a Buffer or typed array';
  const collection = [Map, Set, WeakMap, WeakSet].find((type) => value instanceof type);
  return collection && `a ${collection.name}`;
}

/**
 * The first part of `value` JSON would drop, change or choke on. Objects with a `toJSON()`
 * (such as Date) are trusted.
 */
export function findUnserializable(value: unknown): Unserializable | undefined {
  const ancestors: object[] = [];
  const visit = (node: unknown, path: string): Unserializable | undefined => {
    const type = typeof node;
    if (type === 'function' || type === 'symbol') return { what: `a ${type}`, path };
    if (type === 'bigint') return { what: 'a BigInt', path };
    if (type === 'number' && !Number.isFinite(node)) return { what: `the number ${node}`, path };
    if (typeof node !== 'object' || node === null) return undefined;
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
