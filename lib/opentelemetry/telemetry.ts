import {
  context as otelContext,
  metrics,
  SpanStatusCode,
  trace,
  type Attributes,
  type AttributeValue,
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

const SCOPE = 'nestjs-buffer-lock';
const IDLE = { end() {}, asyncStart() {}, error() {} };

/** Where spans and metrics go; each one left out is `@opentelemetry/api`'s global provider. */
export interface BufferLockTelemetryOptions {
  readonly tracerProvider?: TracerProvider;
  readonly meterProvider?: MeterProvider;
}

const ATTRIBUTES = {
  key: 'buffer_lock.key',
  role: 'buffer_lock.role',
  waitMs: 'buffer_lock.wait_ms',
  holdMs: 'buffer_lock.hold_ms',
  outcome: 'buffer_lock.outcome',
  locked: 'buffer_lock.locked',
  unlockedReason: 'buffer_lock.unlocked_reason',
  built: 'buffer_lock.built',
} as const;

function spanAttributes(context: FlightTrace | CacheTrace): Attributes {
  const attributes: Attributes = { 'buffer_lock.key_hash': context.keyHash };
  for (const [field, name] of Object.entries(ATTRIBUTES)) {
    const value = (context as unknown as Record<string, AttributeValue | undefined>)[field];
    if (value !== undefined) attributes[name] = value;
  }
  return attributes;
}

// A channel reports a subscriber's error as an uncaught exception: a broken provider must not
// take the app down.
const safely =
  (handle: (message: unknown) => void) =>
  (message: unknown): void => {
    try {
      handle(message);
    } catch {
      // Telemetry lost for this operation; the operation itself is not affected.
    }
  };

function finish(span: Span, context: FlightTrace | CacheTrace): void {
  span.setAttributes(spanAttributes(context));
  if (context.outcome === 'error') {
    const error = context.error instanceof Error ? context.error : undefined;
    if (error) span.recordException(error);
    span.setStatus({ code: SpanStatusCode.ERROR, message: error?.message });
  }
  span.end();
}

/**
 * Turns the library's diagnostics channels into OpenTelemetry spans (`buffer_lock.flight`,
 * `buffer_lock.cache.miss`, `buffer_lock.cache.refresh`), counters and wait/hold histograms.
 * Returns the function that stops it.
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
  const histogram = (name: string, description: string) =>
    meter.createHistogram(`buffer_lock.${name}.duration`, { description, unit: 'ms' });
  const waitTime = histogram(
    'wait',
    'Time from a call to its lock, shared result or joined outcome',
  );
  const holdTime = histogram('hold', 'Time a lock was held, release included');
  const times = (context: FlightTrace | CacheTrace, source: 'flight' | 'cache'): void => {
    if (context.waitMs !== undefined) waitTime.record(context.waitMs, { source });
    if (context.holdMs !== undefined) holdTime.record(context.holdMs, { source });
  };

  const flightSpans = new WeakMap<object, Span>();
  const flightHandlers = {
    ...IDLE,
    start: safely((message) => {
      const span = tracer.startSpan('buffer_lock.flight', {}, otelContext.active());
      flightSpans.set(message as object, span);
    }),
    asyncEnd: safely((message) => {
      const context = message as FlightTrace;
      if (context.role !== undefined) flightCounters[context.role].add(1);
      times(context, 'flight');
      const span = flightSpans.get(context);
      flightSpans.delete(context);
      if (span) finish(span, context);
    }),
  };

  // A lookup's span is made when it ends, and only for a miss or a refresh.
  const cacheStarts = new WeakMap<object, { at: number; parent: Context }>();
  const cacheHandlers = {
    ...IDLE,
    start: safely((message) => {
      cacheStarts.set(message as object, { at: Date.now(), parent: otelContext.active() });
    }),
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
  };

  const onLost = safely((message) => {
    lost.add(1, { reason: (message as LockLostMessage).reason });
  });
  const onBreaker = safely((message) => {
    const { state, previous } = message as BreakerMessage;
    transitions.add(1, { state, previous });
  });

  const all = (act: 'subscribe' | 'unsubscribe'): void => {
    flightChannel[act](flightHandlers);
    cacheChannel[act](cacheHandlers);
    lockLostChannel[act](onLost);
    breakerChannel[act](onBreaker);
  };
  all('subscribe');
  let enabled = true;
  return () => {
    if (enabled) all('unsubscribe');
    enabled = false;
  };
}
