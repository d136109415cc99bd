import { Test } from '@nestjs/testing';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BufferLockModule, RedisLockService, SingleFlightEngine } from '../../lib/index.js';
import { connectFailFast } from '../../lib/redis/client-defaults.js';
import type { CircuitState } from '../../lib/types/events.js';
import { BreakerRecovery } from '../../lib/single-flight/breaker-recovery.js';
import { currentFlight } from '../../lib/single-flight/flight-context.js';
import { MemoryLogger, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { countingClient, countingLock, sleep } from './support.js';

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

const OPEN_SECONDS = 30;

/** PINGs the server answered so far (INFO commandstats). */
async function pings(): Promise<number> {
  const info = String(await server.client().info('commandstats'));
  return Number(/^cmdstat_ping:calls=(\d+)/m.exec(info)?.[1] ?? 0);
}

/** An engine on a fail-fast client (300 ms command timeout), its acquires and lock commands counted. */
async function setup(namespace: string) {
  const raw = await connectFailFast(server.url, { commandTimeout: 300 });
  const counted = countingClient(raw);
  const { lock, acquires } = countingLock(
    new RedisLockService({ redis: counted.client, namespace }),
  );
  const logger = new MemoryLogger();
  const engine = new SingleFlightEngine({
    lock,
    options: {
      logger,
      circuitBreaker: { failureThreshold: 3, openSeconds: OPEN_SECONDS, probes: 1 },
    },
  });
  const changes: string[] = [];
  /** Acquires and lock commands counted when the breaker closed. */
  const atClose: { acquires: number; commands: number }[] = [];
  engine.on('breaker', (state: CircuitState, previous: CircuitState) => {
    changes.push(`${previous}→${state}`);
    if (state === 'closed') atClose.push({ acquires: acquires(), commands: counted.calls() });
  });
  /** One call: whether its work ran under the lock. */
  const call = (key: string) =>
    engine.run(key, () => currentFlight()?.locked === true) as Promise<boolean>;
  return { raw, engine, logger, acquires, commands: counted.calls, changes, atClose, call };
}

type Setup = Awaited<ReturnType<typeof setup>>;

/** Calls one at a time until the breaker opens; each of them ran without the lock. */
async function openBreaker({ engine, call }: Setup): Promise<number> {
  let calls = 0;
  while (engine.breaker?.state !== 'open') {
    expect(await call(`down${calls}`)).toBe(false);
    calls++;
    expect(calls).toBeLessThanOrEqual(3);
  }
  return calls;
}

/**
 * Bursts of 5 concurrent calls on distinct keys, 50 ms apart, until one runs under the lock.
 * Resolves to the locked flags of that burst and the ms it took.
 */
async function recover({ call }: Setup, since: number): Promise<{ burst: boolean[]; ms: number }> {
  for (let n = 0; ; n++) {
    const burst = await Promise.all(Array.from({ length: 5 }, (_, j) => call(`up${n}-${j}`)));
    if (burst.includes(true)) return { burst, ms: Date.now() - since };
    expect(Date.now() - since).toBeLessThan(10_000); // a third of openSeconds
    await sleep(50);
  }
}

/** What must hold once the breaker closed again: one probe, then the lock for everyone. */
async function expectOneProbe(s: Setup, before: { acquires: number; commands: number }) {
  expect(s.changes).toEqual(['closed→open', 'open→half-open', 'half-open→closed']);
  // Exactly one call reached Redis between the recovery and the close: the probe.
  expect(s.atClose).toEqual([{ acquires: before.acquires + 1, commands: before.commands + 1 }]);
  const after = await Promise.all(Array.from({ length: 5 }, (_, j) => s.call(`after${j}`)));
  expect(after).toEqual([true, true, true, true, true]);
  expect(s.logger.at('log')).toEqual(['Redis answers again; circuit breaker closed']);
}

describe('circuit breaker: back to the lock as soon as Redis is, not when openSeconds ends', () => {
  it('Redis paused (SIGSTOP) then resumed: one probe, then the lock, well before openSeconds', async () => {
    const s = await setup('br:pause:');
    expect(await s.call('warm')).toBe(true);
    server.pause();
    try {
      expect(await openBreaker(s)).toBe(3);
    } finally {
      server.resume();
    }
    const resumed = Date.now();
    const before = { acquires: s.acquires(), commands: s.commands() };
    const { burst, ms } = await recover(s, resumed);
    console.log(`after SIGCONT the lock was used again in ${ms} ms (openSeconds ${OPEN_SECONDS})`);
    // In the burst that found Redis back, one call was the probe; the others skipped Redis.
    expect(burst.filter(Boolean)).toHaveLength(1);
    await expectOneProbe(s, before);
    s.engine.close();
    s.raw.disconnect();
  });

  it('Redis killed (SIGKILL) and restarted on the same port: one probe, then the lock, well before openSeconds', async () => {
    const s = await setup('br:restart:');
    expect(await s.call('warm')).toBe(true);
    await server.kill();
    expect(await openBreaker(s)).toBe(3);
    await server.restart();
    const restarted = Date.now();
    const before = { acquires: s.acquires(), commands: s.commands() };
    const { burst, ms } = await recover(s, restarted);
    console.log(
      `after the restart the lock was used again in ${ms} ms (openSeconds ${OPEN_SECONDS})`,
    );
    expect(burst.filter(Boolean)).toHaveLength(1);
    await expectOneProbe(s, before);
    s.engine.close();
    s.raw.disconnect();
  });

  it('no herd: while Redis stays down, calls skip it and at most one check is sent at a time', async () => {
    const s = await setup('br:herd:');
    expect(await s.call('warm')).toBe(true);
    const pingsBefore = await pings();
    server.pause();
    const paused = Date.now();
    let pausedMs = 0;
    try {
      await openBreaker(s);
      const acquires = s.acquires();
      const commands = s.commands();
      const calls = await Promise.all(Array.from({ length: 50 }, (_, j) => s.call(`herd${j}`)));
      await sleep(1200);
      expect(calls.every((locked) => !locked)).toBe(true);
      expect([s.acquires(), s.commands()]).toEqual([acquires, commands]);
      expect(s.engine.breaker?.state).toBe('open');
    } finally {
      pausedMs = Date.now() - paused;
      server.resume();
    }
    // The checks that waited in the socket are answered now: one per interval at most, never a pile.
    await sleep(300);
    const checks = (await pings()) - pingsBefore;
    console.log(`${checks} checks sent during ${pausedMs} ms of a paused Redis`);
    expect(checks).toBeGreaterThanOrEqual(1);
    expect(checks).toBeLessThanOrEqual(Math.ceil(pausedMs / 500) + 1);
    s.engine.close();
    s.raw.disconnect();
  });
});

describe('circuit breaker recovery: nothing is left behind at shutdown', () => {
  it('an app shut down while the breaker is open removes its ready listener and stops checking Redis', async () => {
    const client: Redis = await connectFailFast(server.url, { commandTimeout: 300 });
    const listeners = client.listenerCount('ready');
    const ref = await Test.createTestingModule({
      imports: [
        BufferLockModule.forRoot({
          redis: client, // passed in: the module leaves it open, so its listeners show
          namespace: 'br:shutdown:',
          logger: new MemoryLogger(),
          circuitBreaker: { failureThreshold: 3, openSeconds: OPEN_SECONDS, probes: 1 },
        }),
      ],
    }).compile();
    const app = await ref.createNestApplication({ logger: false }).init();
    const engine = app.get(SingleFlightEngine);
    server.pause();
    try {
      for (let i = 0; engine.breaker?.state !== 'open'; i++) await engine.run(`k${i}`, () => 1);
      await until(() => client.listenerCount('ready') > listeners);
    } finally {
      server.resume();
    }
    await app.close();
    expect(client.listenerCount('ready')).toBe(listeners);
    const sent = await pings();
    await sleep(1200);
    expect(await pings()).toBe(sent);
    client.disconnect();
  });
});

describe('circuit breaker recovery: a client that is ready already when the breaker opens', () => {
  it('is checked at once, not a whole check interval later: its ready event came before the watch', async () => {
    const client = server.client();
    await until(() => client.status === 'ready', 2000);
    const before = await pings();
    let back = 0;
    const recovery = new BreakerRecovery({
      client: () => Promise.resolve(client),
      onBack: () => back++,
    });
    const started = Date.now();
    recovery.start();
    await until(() => back > 0, 2000);
    recovery.close();
    expect(Date.now() - started).toBeLessThan(450); // the check interval is 500 ms
    expect(back).toBe(1);
    expect((await pings()) - before).toBe(1);
  });
});
