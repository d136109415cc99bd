import {
  context as otelContext,
  metrics,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type MeterProvider,
  type Span,
  type TracerProvider,
} from '@opentelemetry/api';
import {
  breakerChannel,
  cacheChannel,
  flightChannel,
  lockLostChannel,
  type BreakerMessage,
  type CacheTrace,
  type FlightTrace,
  type LockLostMessage,
} from '../telemetry/channels.js';

/** The instrumentation scope of the library's spans and metrics. */
const SCOPE = 'nestjs-buffer-lock';

/**
 * Where {@link enableBufferLockTelemetry} sends spans and metrics. Each one left out is the
 * global provider of `@opentelemetry/api` (what the OpenTelemetry SDK registers).
 *
 * @example
 * ```ts
 * const options: BufferLockTelemetryOptions = { tracerProvider, meterProvider };
 * ```
 */
export interface BufferLockTelemetryOptions {
  readonly tracerProvider?: TracerProvider;
  readonly meterProvider?: MeterProvider;
}

/** The span attributes of a trace: the key's hash, the key only when the trace has it. */
function spanAttributes(context: FlightTrace | CacheTrace): Attributes {
  const attributes: Attributes = { 'buffer_lock.key_hash': context.keyHash };
  if (context.key !== undefined) attributes['buffer_lock.key'] = context.key;
  if (context.role !== undefined) attributes['buffer_lock.role'] = context.role;
  if (context.waitMs !== undefined) attributes['buffer_lock.wait_ms'] = context.waitMs;
  if (context.holdMs !== undefined) attributes['buffer_lock.hold_ms'] = context.holdMs;
  if (context.outcome !== undefined) attributes['buffer_lock.outcome'] = context.outcome;
  if ('locked' in context && context.locked !== undefined) {
    attributes['buffer_lock.locked'] = context.locked;
  }
  if ('unlockedReason' in context && context.unlockedReason !== undefined) {
    attributes['buffer_lock.unlocked_reason'] = context.unlockedReason;
  }
  if ('built' in context && context.built !== undefined) {
    attributes['buffer_lock.built'] = context.built;
  }
  return attributes;
}

/**
 * `handle`, made harmless: a channel reports a subscriber's error as an uncaught exception, and a
 * broken provider must not take the app down with it.
 */
const safely =
  (handle: (message: unknown) => void) =>
  (message: unknown): void => {
    try {
      handle(message);
    } catch {
      // Telemetry lost for this operation; the operation itself is not affected.
    }
  };

/** Ends `span` with the trace's attributes, and its error as an exception. */
function finish(span: Span, context: FlightTrace | CacheTrace): void {
  span.setAttributes(spanAttributes(context));
  if (context.outcome === 'error') {
    const error = context.error;
    if (error instanceof Error) span.recordException(error);
    span.setStatus({
      code: SpanStatusCode.ERROR,
      message: error instanceof Error ? error.message : undefined,
    });
  }
  span.end();
}

/**
 * Turns the library's diagnostics channels into OpenTelemetry spans and metrics, and returns the
 * function that stops it (unsubscribes; calling it again does nothing). The channels are the one
 * source: nothing else in the library knows of OpenTelemetry.
 *
 * - Spans: `buffer_lock.flight` for each `@SingleFlight` call or `SingleFlightEngine.run`,
 *   `buffer_lock.cache.miss` and `buffer_lock.cache.refresh` for cache lookups that missed and for
 *   background refreshes; each a child of the span active where the call was made, with the
 *   attributes `buffer_lock.key_hash`, `buffer_lock.role`, `buffer_lock.wait_ms`,
 *   `buffer_lock.hold_ms`, `buffer_lock.outcome` (and `buffer_lock.key` with `traceKeys: true`).
 * - Counters: `buffer_lock.cache.hits`, `.misses`, `.stale`, `.refreshes`;
 *   `buffer_lock.flight.leaders`, `.waiters`, `.shared`; `buffer_lock.lock.lost` (by `reason`);
 *   `buffer_lock.breaker.transitions` (by `state` and `previous`).
 * - Histograms (ms): `buffer_lock.wait.duration` and `buffer_lock.hold.duration`, by `source`
 *   (`flight` or `cache`).
 *
 * @example
 * ```ts
 * import { enableBufferLockTelemetry } from 'nestjs-buffer-lock/opentelemetry';
 * const stop = enableBufferLockTelemetry(); // the global providers
 * // at shutdown:
 * stop();
 * ```
 */
export function enableBufferLockTelemetry(options: BufferLockTelemetryOptions = {}): () => void {
  const tracer = (options.tracerProvider ?? trace.getTracerProvider()).getTracer(SCOPE);
  const meter = (options.meterProvider ?? metrics.getMeterProvider()).getMeter(SCOPE);
  const counter = (name: string, description: string) =>
    meter.createCounter(`buffer_lock.${name}`, { description });
  const cacheCounters = {
    hit: counter('cache.hits', 'Cache lookups served from a fresh entry'),
    miss: counter('cache.misses', 'Cache lookups that found no entry'),
    stale: counter('cache.stale', 'Cache lookups served a stale entry'),
    refresh: counter('cache.refreshes', 'Background refreshes of stale entries'),
  } as const;
  const flightCounters = {
    leader: counter('flight.leaders', 'Flights that ran the work'),
    waiter: counter('flight.waiters', 'Calls that joined a flight of this process, or skipped'),
    shared: counter('flight.shared', "Calls that took another process's shared result"),
  } as const;
  const lost = counter('lock.lost', 'Locks lost while their work ran');
  const transitions = counter('breaker.transitions', 'Circuit breaker state changes');
  const waitTime = meter.createHistogram('buffer_lock.wait.duration', {
    description: 'Time from a call to its lock, shared result or joined outcome',
    unit: 'ms',
  });
  const holdTime = meter.createHistogram('buffer_lock.hold.duration', {
    description: 'Time a lock was held, release included',
    unit: 'ms',
  });
  const times = (context: FlightTrace | CacheTrace, source: 'flight' | 'cache'): void => {
    if (context.waitMs !== undefined) waitTime.record(context.waitMs, { source });
    if (context.holdMs !== undefined) holdTime.record(context.holdMs, { source });
  };

  const flightSpans = new WeakMap<object, Span>();
  const flightHandlers = {
    start: safely((message) => {
      const span = tracer.startSpan('buffer_lock.flight', {}, otelContext.active());
      flightSpans.set(message as object, span);
    }),
    end() {},
    asyncStart() {},
    asyncEnd: safely((message) => {
      const context = message as FlightTrace;
      if (context.role !== undefined) flightCounters[context.role].add(1);
      times(context, 'flight');
      const span = flightSpans.get(context);
      flightSpans.delete(context);
      if (span) finish(span, context);
    }),
    error() {},
  };

  // A lookup's span is made when it ends, as a miss or a refresh: hits make none.
  const cacheStarts = new WeakMap<object, { at: number; parent: Context }>();
  const cacheHandlers = {
    start: safely((message) => {
      cacheStarts.set(message as object, { at: Date.now(), parent: otelContext.active() });
    }),
    end() {},
    asyncStart() {},
    asyncEnd: safely((message) => {
      const context = message as CacheTrace;
      const started = cacheStarts.get(context);
      cacheStarts.delete(context);
      if (context.role === undefined) return;
      cacheCounters[context.role].add(1);
      if (context.role !== 'miss' && context.role !== 'refresh') return;
      times(context, 'cache');
      if (!started) return;
      const name = context.role === 'miss' ? 'buffer_lock.cache.miss' : 'buffer_lock.cache.refresh';
      finish(tracer.startSpan(name, { startTime: started.at }, started.parent), context);
    }),
    error() {},
  };

  const onLost = safely((message) => {
    lost.add(1, { reason: (message as LockLostMessage).reason });
  });
  const onBreaker = safely((message) => {
    const { state, previous } = message as BreakerMessage;
    transitions.add(1, { state, previous });
  });

  flightChannel.subscribe(flightHandlers);
  cacheChannel.subscribe(cacheHandlers);
  lockLostChannel.subscribe(onLost);
  breakerChannel.subscribe(onBreaker);
  let enabled = true;
  return () => {
    if (!enabled) return;
    enabled = false;
    flightChannel.unsubscribe(flightHandlers);
    cacheChannel.unsubscribe(cacheHandlers);
    lockLostChannel.unsubscribe(onLost);
    breakerChannel.unsubscribe(onBreaker);
  };
}
