/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  MeterProvider,
  MetricReader,
  type DataPoint,
  type Histogram,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { createHash } from 'node:crypto';
import diagnostics from 'node:diagnostics_channel';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferLockModule,
  RedisLockService,
  SingleFlight,
  SingleFlightEngine,
} from '../../lib/index.js';
import {
  BufferLockTelemetryModule,
  CHANNEL_NAMES,
  enableBufferLockTelemetry,
} from '../../lib/opentelemetry/index.js';
import { currentFlight } from '../../lib/single-flight/flight-context.js';
import { deferred, until } from '../support/nest-helpers.js';
import { freePort, startRedis, type RedisServer } from '../support/redis-server.js';
import { silent, sleep } from '../single-flight/support.js';

/** A reader the test collects from when it wants the metrics. */
class CollectingReader extends MetricReader {
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

/** Every metric by name: a counter's total, a histogram's count of recordings. */
async function metricsOf(reader: MetricReader): Promise<Record<string, number>> {
  const { resourceMetrics } = await reader.collect();
  const totals: Record<string, number> = {};
  for (const scope of resourceMetrics.scopeMetrics) {
    for (const metric of scope.metrics) {
      const points = metric.dataPoints as DataPoint<number | Histogram>[];
      totals[metric.descriptor.name] = points.reduce(
        (sum, point) => sum + (typeof point.value === 'number' ? point.value : point.value.count),
        0,
      );
    }
  }
  return totals;
}

/** The growth of each metric between two readings (those that did not move left out). */
function grown(before: Record<string, number>, after: Record<string, number>) {
  return Object.fromEntries(
    Object.entries(after)
      .map(([name, value]) => [name, value - (before[name] ?? 0)] as const)
      .filter(([, delta]) => delta !== 0),
  );
}

const md5 = (text: string): string => createHash('md5').update(text).digest('hex');

let n = 0;
const key = (): string => `customer:${++n}:alice@example.com`;

let server: RedisServer;
let admin: Redis;
const exporter = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({
  spanProcessors: [new SimpleSpanProcessor(exporter)],
});
const reader = new CollectingReader();
const meterProvider = new MeterProvider({ readers: [reader] });
let app: INestApplicationContext;

const gate = { current: deferred() };
let runs = 0;

@Injectable()
class ReportService {
  @SingleFlight((id: string) => `report:${id}`)
  async build(id: string): Promise<string> {
    runs++;
    await gate.current.promise;
    return `report ${id}`;
  }

  @SingleFlight('failing-report')
  async fail(): Promise<never> {
    throw new Error('the report failed');
  }
}

@Module({
  imports: [
    BufferLockModule.forRoot({
      redis: () => server.client(),
      namespace: 'test:otel:',
      logger: silent,
    }),
    BufferLockTelemetryModule.forRoot({ tracerProvider, meterProvider }),
  ],
  providers: [ReportService],
})
class AppModule {}

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  const ref = await Test.createTestingModule({ imports: [AppModule] }).compile();
  app = ref.createNestApplication({ logger: false });
  await app.init();
});
afterAll(async () => {
  await app?.close();
  context.disable();
  await server.stop();
});
beforeEach(() => exporter.reset());

const spans = (name: string): ReadableSpan[] =>
  exporter.getFinishedSpans().filter((span) => span.name === name);

/** Everything the spans and metrics hold, as text. */
async function allText(): Promise<string> {
  const { resourceMetrics } = await reader.collect();
  return JSON.stringify([
    exporter.getFinishedSpans().map((span) => ({ ...span.attributes, events: span.events })),
    resourceMetrics.scopeMetrics,
  ]);
}

describe('BufferLockTelemetryModule with @SingleFlight', () => {
  it('10 concurrent calls on one key: 10 flight spans, 1 leader, 9 waiters, their wait and hold', async () => {
    const before = await metricsOf(reader);
    const id = key();
    gate.current = deferred();
    runs = 0;
    const service = app.get(ReportService);
    const calls = Array.from({ length: 10 }, () => service.build(id));
    await until(() => runs === 1);
    await sleep(30);
    gate.current.resolve();
    expect(await Promise.all(calls)).toEqual(Array(10).fill(`report ${id}`));
    expect(runs).toBe(1);

    const flights = spans('buffer_lock.flight');
    expect(flights).toHaveLength(10);
    const roles = flights.map((span) => span.attributes['buffer_lock.role']);
    expect(roles.filter((role) => role === 'leader')).toHaveLength(1);
    expect(roles.filter((role) => role === 'waiter')).toHaveLength(9);
    for (const span of flights) {
      expect(span.attributes['buffer_lock.key_hash']).toBe(md5(`report:${id}`));
      expect(span.attributes['buffer_lock.key']).toBeUndefined();
      expect(span.attributes['buffer_lock.outcome']).toBe('ok');
      expect(span.attributes['buffer_lock.wait_ms']).toBeGreaterThanOrEqual(0);
    }
    const leader = flights.find((span) => span.attributes['buffer_lock.role'] === 'leader')!;
    expect(leader.attributes['buffer_lock.locked']).toBe(true);
    expect(leader.attributes['buffer_lock.hold_ms']).toBeGreaterThanOrEqual(25);

    expect(grown(before, await metricsOf(reader))).toEqual({
      'buffer_lock.flight.leaders': 1,
      'buffer_lock.flight.waiters': 9,
      'buffer_lock.wait.duration': 10,
      'buffer_lock.hold.duration': 1,
    });
    expect(await allText()).not.toContain(id);
  });

  it('a flight span is the child of the span active where the call was made', async () => {
    const tracer = tracerProvider.getTracer('app');
    gate.current = deferred();
    gate.current.resolve();
    const request = await tracer.startActiveSpan('GET /report', async (span) => {
      await app.get(ReportService).build(key());
      span.end();
      return span;
    });
    const [flight] = spans('buffer_lock.flight');
    expect(flight!.parentSpanContext?.spanId).toBe(request.spanContext().spanId);
    expect(flight!.spanContext().traceId).toBe(request.spanContext().traceId);
  });

  it('a failing method: its span has the error status and the exception', async () => {
    await expect(app.get(ReportService).fail()).rejects.toThrow('the report failed');
    const [flight] = spans('buffer_lock.flight');
    expect(flight!.status).toEqual({ code: 2, message: 'the report failed' });
    expect(flight!.events.map((event) => event.name)).toEqual(['exception']);
    expect(flight!.attributes['buffer_lock.outcome']).toBe('error');
  });

  it('BufferCache: one miss span and one miss, then hits and no span', async () => {
    const before = await metricsOf(reader);
    const cache = app.get(BufferCache);
    const k = key();
    let builds = 0;
    for (let i = 0; i < 4; i++) expect(await cache.getOrSet(k, () => ++builds)).toBe(1);
    expect(builds).toBe(1);
    const misses = spans('buffer_lock.cache.miss');
    expect(misses).toHaveLength(1);
    expect(misses[0]!.attributes).toMatchObject({
      'buffer_lock.key_hash': md5(k),
      'buffer_lock.role': 'miss',
      'buffer_lock.built': true,
      'buffer_lock.outcome': 'ok',
    });
    expect(exporter.getFinishedSpans()).toHaveLength(1);
    expect(grown(before, await metricsOf(reader))).toEqual({
      'buffer_lock.cache.misses': 1,
      'buffer_lock.cache.hits': 3,
      'buffer_lock.wait.duration': 1,
      'buffer_lock.hold.duration': 1,
    });
    expect(await allText()).not.toContain(k);
  });

  it('a stale entry: a stale serve, a refresh span and a refresh', async () => {
    const before = await metricsOf(reader);
    let now = Date.now();
    const lock = app.get(RedisLockService);
    const cache = new BufferCache({ lock, options: { logger: silent }, now: () => now });
    const k = key();
    await cache.getOrSet(k, () => 'old', { ttl: 1, grace: 60 });
    now += 2_000;
    expect(await cache.getOrSet(k, () => 'new', { ttl: 1, grace: 60 })).toBe('old');
    await until(() => spans('buffer_lock.cache.refresh').length === 1);
    expect(spans('buffer_lock.cache.refresh')[0]!.attributes['buffer_lock.built']).toBe(true);
    expect(grown(before, await metricsOf(reader))).toMatchObject({
      'buffer_lock.cache.misses': 1,
      'buffer_lock.cache.stale': 1,
      'buffer_lock.cache.refreshes': 1,
    });
  });
});

describe('enableBufferLockTelemetry', () => {
  it('counts lost locks by reason and breaker transitions by state', async () => {
    const before = await metricsOf(reader);
    const lock = new RedisLockService({
      redis: () => server.client(),
      namespace: 'test:otel:',
      ttl: 0.6,
    });
    const engine = new SingleFlightEngine({ lock, options: { logger: silent, lockTimeout: 0.2 } });
    const k = key();
    await engine.run(k, async () => {
      const signal = currentFlight()!.signal;
      await admin.del(lock.redisKey(k));
      await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve()));
    });

    const client = new Redis({
      port: await freePort(),
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
    });
    const down = new RedisLockService({ redis: () => client, namespace: 'test:otel:' });
    const failing = new SingleFlightEngine({
      lock: down,
      options: { logger: silent, circuitBreaker: { failureThreshold: 1 } },
    });
    try {
      await failing.run(key(), () => 1);
    } finally {
      failing.close();
      client.disconnect();
    }
    const after = await metricsOf(reader);
    expect(after['buffer_lock.lock.lost']! - (before['buffer_lock.lock.lost'] ?? 0)).toBe(1);
    expect(
      after['buffer_lock.breaker.transitions']! - (before['buffer_lock.breaker.transitions'] ?? 0),
    ).toBe(1);
    const { resourceMetrics } = await reader.collect();
    const points = resourceMetrics.scopeMetrics
      .flatMap((scope) => scope.metrics)
      .filter(
        (metric) =>
          metric.descriptor.name.endsWith('lost') || metric.descriptor.name.endsWith('transitions'),
      )
      .flatMap((metric) => metric.dataPoints.map((point) => point.attributes));
    expect(points).toEqual(
      expect.arrayContaining([{ reason: 'lost' }, { state: 'open', previous: 'closed' }]),
    );
  });

  it('a provider that throws costs its telemetry only: the calls succeed, nothing is thrown', async () => {
    const uncaught: unknown[] = [];
    const onUncaught = (error: unknown) => uncaught.push(error);
    process.on('uncaughtException', onUncaught);
    const broken = {
      getTracer: () => ({
        startSpan: () => {
          throw new Error('tracer down');
        },
      }),
    } as unknown as BasicTracerProvider;
    const stop = enableBufferLockTelemetry({ tracerProvider: broken, meterProvider });
    try {
      const engine = new SingleFlightEngine({
        lock: app.get(RedisLockService),
        options: { logger: silent },
      });
      expect(await engine.run(key(), () => 'still built')).toBe('still built');
      expect(await app.get(BufferCache).getOrSet(key(), () => 'still cached')).toBe('still cached');
      await sleep(20);
    } finally {
      stop();
      process.off('uncaughtException', onUncaught);
    }
    expect(uncaught).toEqual([]);
  });

  it('traceKeys: true puts the raw key in the span', async () => {
    const lock = app.get(RedisLockService);
    const engine = new SingleFlightEngine({ lock, options: { logger: silent, traceKeys: true } });
    const k = key();
    await engine.run(k, () => 1);
    const [flight] = spans('buffer_lock.flight');
    expect(flight!.attributes['buffer_lock.key']).toBe(k);
    expect(flight!.attributes['buffer_lock.key_hash']).toBe(md5(k));
  });

  it('the disposer unsubscribes: no spans and no counts after it, and calling it twice is harmless', async () => {
    const ownExporter = new InMemorySpanExporter();
    const ownReader = new CollectingReader();
    const stop = enableBufferLockTelemetry({
      tracerProvider: new BasicTracerProvider({
        spanProcessors: [new SimpleSpanProcessor(ownExporter)],
      }),
      meterProvider: new MeterProvider({ readers: [ownReader] }),
    });
    const lock = app.get(RedisLockService);
    const engine = new SingleFlightEngine({ lock, options: { logger: silent } });
    await engine.run(key(), () => 1);
    expect(ownExporter.getFinishedSpans()).toHaveLength(1);
    expect(await metricsOf(ownReader)).toMatchObject({ 'buffer_lock.flight.leaders': 1 });
    stop();
    stop();
    await engine.run(key(), () => 2);
    await app.get(BufferCache).getOrSet(key(), () => 3);
    expect(ownExporter.getFinishedSpans()).toHaveLength(1);
    expect(await metricsOf(ownReader)).toMatchObject({ 'buffer_lock.flight.leaders': 1 });
    expect(await metricsOf(ownReader)).not.toHaveProperty(['buffer_lock.cache.misses']);
    // The module's own subscription is still there.
    expect(spans('buffer_lock.flight')).toHaveLength(2);
  });
});

/** Whether anything listens on the channel `name`. */
const subscribed = (name: string): boolean =>
  name.endsWith('lock-lost') || name.endsWith('breaker')
    ? diagnostics.hasSubscribers(name)
    : diagnostics.tracingChannel(name).hasSubscribers;

describe('BufferLockTelemetryModule at shutdown', () => {
  it('unsubscribes from every channel when the app closes', async () => {
    const names = Object.values(CHANNEL_NAMES);
    // The lock channel is not used for spans or metrics: nothing subscribes to it.
    expect(names.filter(subscribed)).toEqual(names.filter((name) => !name.endsWith(':lock')));
    await app.close();
    expect(names.filter(subscribed)).toEqual([]);
    app = undefined as unknown as INestApplicationContext;
  });
});
