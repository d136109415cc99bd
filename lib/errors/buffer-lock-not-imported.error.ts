/**
 * Thrown when a `@SingleFlight` or `@Cached` method runs on an instance Nest did not wire: its
 * module cannot see `BufferLockModule`, or the class was made with `new`. The message names the
 * class and the method.
 *
 * @example
 * ```ts
 * if (e instanceof BufferLockNotImportedError) console.error(e.message);
 * ```
 */
export class BufferLockNotImportedError extends Error {
  override readonly name = 'BufferLockNotImportedError';
  readonly code = 'single_flight_no_module';
}
