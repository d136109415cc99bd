import { Rule, Seconds } from './validate-options.js';

const isPositiveInteger = (value: unknown): boolean =>
  typeof value === 'number' && Number.isSafeInteger(value) && value > 0;

// The rules and defaults of the module option `circuitBreaker`.
export class CircuitBreakerOptionsDto {
  @Rule('breaker_failures_invalid', isPositiveInteger)
  failureThreshold: number = 5;

  @Seconds('breaker_open_seconds_invalid')
  openSeconds: number = 10;

  @Rule('breaker_probes_invalid', isPositiveInteger)
  probes: number = 1;
}

export type CircuitBreakerSettings = Readonly<CircuitBreakerOptionsDto> | false;
