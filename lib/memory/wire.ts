/** String.prototype.toWellFormed (Node 20, ES2024; the library compiles against ES2023). */
type WellFormed = string & { isWellFormed(): boolean; toWellFormed(): string };

/**
 * An argument as Redis receives it from ioredis: numbers as their decimal text, and text as UTF-8,
 * so a lone surrogate (which has no UTF-8 form) arrives, is stored and is compared as U+FFFD.
 *
 * @example
 * ```ts
 * asSent(1500); // '1500'
 * asSent('\uD800'); // '\uFFFD'
 * ```
 */
export function asSent(argument: string | number): string {
  const text = String(argument) as WellFormed;
  return text.isWellFormed() ? text : text.toWellFormed();
}
