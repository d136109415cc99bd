import { Rule, Seconds } from './validate-options.js';

const isPositiveInteger = (value: unknown): boolean =>
  typeof value === 'number' && Number.isSafeInteger(value) && value > 0;

/** The circuit breaker's options (module option `circuitBreaker`). */
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

export type CircuitBreakerSettings = Readonly<CircuitBreakerOptionsDto> | false;
