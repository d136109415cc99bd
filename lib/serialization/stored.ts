/**
 * Settings of the package's types, for an app to augment. With a serializer that keeps types
 * (superjson, devalue), declare `serializerKeepsTypes: true` and a cached value's type is what
 * was stored, `Stored<T>` being `T`.
 *
 * @example
 * ```ts
 * declare module 'nestjs-buffer-lock' {
 *   interface BufferLockTypes {
 *     serializerKeepsTypes: true;
 *   }
 * }
 * ```
 */
// Empty here: apps add to it (declaration merging).
export interface BufferLockTypes {}

/**
 * What a value of type `T` is once it has come back from the store through the default JSON
 * serializer: a `Date` (anything with `toJSON()`) as what `toJSON()` returns, a class instance
 * as its data (methods gone), an `undefined` property gone and an `undefined` array element as
 * `null`. What JSON cannot carry (a bigint, a function, a Map, a Set, a Buffer, a promise) is
 * `never`: the cache refuses it at run time. `T` itself when `BufferLockTypes` declares
 * `serializerKeepsTypes: true`.
 *
 * @example
 * ```ts
 * const visit: Stored<{ at: Date; count: number }> = { at: '2026-01-01T00:00:00.000Z', count: 1 };
 * ```
 */
export type Stored<T> = BufferLockTypes extends { serializerKeepsTypes: true }
  ? T
  : 0 extends 1 & T
    ? T
    : T extends { toJSON(...args: never): infer J }
      ? Stored<J>
      : T extends string | number | boolean | null | undefined | void
        ? T
        : T extends
              | bigint
              | symbol
              | ((...args: never) => unknown)
              | ReadonlyMap<unknown, unknown>
              | ReadonlySet<unknown>
              | WeakMap<object, unknown>
              | WeakSet<object>
              | PromiseLike<unknown>
              | ArrayBuffer
              | ArrayBufferView
          ? never
          : T extends readonly unknown[]
            ? {
                [I in keyof T]: T[I] extends infer E
                  ? E extends undefined
                    ? null
                    : Stored<E>
                  : never;
              }
            : {
                [
                  K in keyof T as K extends symbol
                    ? never
                    : T[K] extends (...args: never) => unknown
                      ? never
                      : K
                ]: Stored<T[K]>;
              };
