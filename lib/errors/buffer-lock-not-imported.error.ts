/**
 * Thrown when a `@SingleFlight` method runs on an instance that Nest did not give the
 * single-flight engine: its module cannot see `BufferLockModule`, or the class was made with `new`
 * outside Nest. The message names the class and the method.
 *
 * @example
 * ```ts
 * try {
 *   await new ReportsService().build('daily');
 * } catch (e) {
 *   if (e instanceof BufferLockNotImportedError) console.error(e.message);
 * }
 * ```
 */
export class BufferLockNotImportedError extends Error {
  override readonly name = 'BufferLockNotImportedError';
  readonly code = 'single_flight_no_module';
}
