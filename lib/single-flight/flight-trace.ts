import { finalize, of, tap, throwError, type Observable } from 'rxjs';
import type { SingleFlightSettings } from '../options/single-flight.options.js';
import {
  flightChannel,
  keyHashOf,
  nowMs,
  traced,
  type FlightTrace,
} from '../telemetry/channels.js';
import type { LockAdmission } from './admission.js';
import type { LocalFlights } from './local-flights.js';
import type { LockedRun } from './locked-run.js';

/**
 * What a {@link FlightTracing} traces with: the engine's own flights, runs and admission.
 *
 * @example
 * ```ts
 * const parts: FlightTracingParts = { flights, runs, admission, traceKeys: false };
 * ```
 */
export interface FlightTracingParts {
  /** The engine's flights in progress in this process. */
  readonly flights: LocalFlights;
  /** The engine's runs across processes. */
  readonly runs: LockedRun;
  /** The engine's admission, for the error of a `'throw'` caller that found the key busy. */
  readonly admission: Pick<LockAdmission, 'busy'>;
  /** Whether traces carry the raw cache key (`traceKeys`). */
  readonly traceKeys: boolean;
}

/**
 * The engine's flights while the flight channel has subscribers: each call or subscription is one
 * operation of the channel, its role (leader or waiter), outcome and times in its trace. The
 * engine calls it only then, so that a call nobody traces makes no trace object and no closure.
 *
 * @example
 * ```ts
 * const tracing = new FlightTracing({ flights, runs, admission, traceKeys: false });
 * if (flightChannel.hasSubscribers) return tracing.run(cacheKey, redisKey, work, settings);
 * ```
 */
export class FlightTracing {
  constructor(private readonly parts: FlightTracingParts) {}

  /** `SingleFlightEngine.run` as one operation of the flight channel, its role and times in its trace. */
  run<T>(
    cacheKey: string,
    redisKey: string,
    work: () => T,
    settings: SingleFlightSettings,
  ): Promise<Awaited<T> | undefined> {
    const { flights, runs, admission, traceKeys } = this.parts;
    const keyHash = keyHashOf(redisKey);
    const trace: FlightTrace = traceKeys ? { keyHash, key: cacheKey } : { keyHash };
    return traced(flightChannel, trace, () => {
      const existing = flights.promise<Awaited<T> | undefined>(redisKey);
      if (existing) {
        trace.role = 'waiter';
        if (settings.onBusy === 'skip') {
          trace.outcome = 'skipped';
          return Promise.resolve(undefined);
        }
        if (settings.onBusy === 'throw') return Promise.reject(admission.busy(cacheKey));
        const started = nowMs();
        return existing.finally(() => {
          trace.waitMs = nowMs() - started;
        });
      }
      return flights.startPromise(redisKey, () =>
        runs.promise(cacheKey, redisKey, work, settings, undefined, trace),
      );
    });
  }

  /**
   * One subscription of `SingleFlightEngine.runObservable` as one operation of the flight channel:
   * start and end on subscription, asyncStart and asyncEnd once it completes, errors or is
   * unsubscribed.
   */
  stream<T>(
    cacheKey: string,
    redisKey: string,
    work: () => Observable<T>,
    settings: SingleFlightSettings,
  ): Observable<T | undefined> {
    const { flights, runs, admission, traceKeys } = this.parts;
    const keyHash = keyHashOf(redisKey);
    const trace: FlightTrace = traceKeys ? { keyHash, key: cacheKey } : { keyHash };
    const started = nowMs();
    flightChannel.start.publish(trace);
    let stream: Observable<T | undefined>;
    const existing = flights.stream<T | undefined>(redisKey);
    if (existing) {
      trace.role = 'waiter';
      if (settings.onBusy === 'skip') trace.outcome = 'skipped';
      stream =
        settings.onBusy === 'skip'
          ? of(undefined)
          : settings.onBusy === 'throw'
            ? throwError(() => admission.busy(cacheKey))
            : existing;
    } else {
      const source = runs.observable(cacheKey, redisKey, work, settings, trace);
      stream = flights.startStream(redisKey, source);
    }
    flightChannel.end.publish(trace);
    return stream.pipe(
      tap({
        error: (error: unknown) => {
          trace.outcome = 'error';
          trace.error = error;
          flightChannel.error.publish(trace);
        },
      }),
      finalize(() => {
        // The lock is let go as this subscription ends: the hold runs until now.
        if (trace.locked) trace.holdMs = nowMs() - started - trace.waitMs!;
        if (trace.role === 'waiter') trace.waitMs ??= nowMs() - started;
        trace.outcome ??= 'ok';
        flightChannel.asyncStart.publish(trace);
        flightChannel.asyncEnd.publish(trace);
      }),
    );
  }
}
