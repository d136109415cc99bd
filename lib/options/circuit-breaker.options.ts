import { Rule, Seconds } from './validate-options.js';

const isPositiveInteger = (value: unknown): boolean =>
  typeof value === 'number' && Number.isSafeInteger(value) && value > 0;

/**
 * The declaration of the circuit breaker's options (module option `circuitBreaker`): for each one
 * its type, its default and its rule. Fields left out take these defaults.
 *
 * @example
 * ```ts
 * new CircuitBreakerOptionsDto(); // { failureThreshold: 5, openSeconds: 10, probes: 1 }
 * BufferLockModule.forRoot({ redis: 'memory://', circuitBreaker: { failureThreshold: 3 } });
 * ```
 */
export class CircuitBreakerOptionsDto {
  /** Consecutive Redis failures that open the breaker. Default `5`. */
  @Rule('breaker_failures_invalid', isPositiveInteger)
  failureThreshold: number = 5;

  /** Seconds calls skip Redis once open, before a probe is let through. Default `10`. */
  @Seconds('breaker_open_seconds_invalid')
  openSeconds: number = 10;

  /** Calls let through at once while half-open. Default `1`. */
  @Rule('breaker_probes_invalid', isPositiveInteger)
  probes: number = 1;
}

/**
 * The circuit breaker's resolved numbers, or `false` for no breaker.
 *
 * @example
 * ```ts
 * const breaker: CircuitBreakerSettings = { failureThreshold: 3, openSeconds: 5, probes: 1 };
 * ```
 */
export type CircuitBreakerSettings = Readonly<CircuitBreakerOptionsDto> | false;
