import type { BenchContext } from './harness.js';

/**
 * Features that other issues are still building are looked up at run time, by export name, so
 * the suite compiles and runs before they land and prints 'not available yet' for their rows.
 */
export async function libExports(): Promise<Readonly<Record<string, unknown>>> {
  return (await import('../../lib/index.js')) as Readonly<Record<string, unknown>>;
}

/** What the memory section reports about the wake-on-release subscriber. */
export interface SubscriberProbe {
  readonly waits: number;
  readonly table: string;
  readonly summary: string;
  readonly backToBaseline: boolean;
}

/** Runs `waits` waits through the wake-on-release engine, if the library has one. */
export async function waitSubscriberProbe(
  _context: BenchContext,
  _waits: number,
): Promise<SubscriberProbe | undefined> {
  const lib = await libExports();
  if (typeof lib['SingleFlight'] !== 'function') return undefined;
  return undefined;
}
