import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import { CircuitBreaker } from '../../lib/single-flight/circuit-breaker.js';
import { type CircuitState } from '../../lib/types/events.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/** A clock the test moves by hand. */
function fakeClock(): { now: () => number; advance: (ms: number) => void } {
  let t = 1_000_000;
  return { now: () => t, advance: (ms) => void (t += ms) };
}

function breaker(
  options: { failureThreshold?: number; openSeconds?: number; probes?: number } = {},
) {
  const clock = fakeClock();
  const changes: string[] = [];
  const b = new CircuitBreaker({
    failureThreshold: 3,
    openSeconds: 10,
    probes: 1,
    ...options,
    now: clock.now,
    onStateChange: (next: CircuitState, prev: CircuitState) => changes.push(`${prev}→${next}`),
  });
  return { b, clock, changes };
}

describe('circuit breaker: closed → open after N consecutive failures', () => {
  it('opens on the Nth consecutive failure, not before', () => {
    const { b, changes } = breaker({ failureThreshold: 3 });
    b.failure();
    b.failure();
    expect(b.state).toBe('closed');
    expect(b.allow()).toBe(true);
    b.failure();
    expect(b.state).toBe('open');
    expect(b.allow()).toBe(false);
    expect(changes).toEqual(['closed→open']);
  });

  it('a success in between resets the count', () => {
    const { b } = breaker({ failureThreshold: 3 });
    b.failure();
    b.failure();
    b.success();
    b.failure();
    b.failure();
    expect(b.state).toBe('closed');
    expect(b.consecutiveFailures).toBe(2);
  });
});

describe('circuit breaker: open → half-open after M seconds', () => {
  it('skips Redis for exactly openSeconds, then lets one probe through', () => {
    const { b, clock } = breaker({ openSeconds: 10 });
    for (let i = 0; i < 3; i++) b.failure();
    clock.advance(9_999);
    expect(b.allow()).toBe(false);
    clock.advance(1);
    expect(b.state).toBe('half-open');
    expect(b.allow()).toBe(true);
    expect(b.allow()).toBe(false); // only one probe at a time
  });

  it('probes is configurable', () => {
    const { b, clock } = breaker({ probes: 2 });
    for (let i = 0; i < 3; i++) b.failure();
    clock.advance(10_000);
    expect([b.allow(), b.allow(), b.allow()]).toEqual([true, true, false]);
  });

  it('a probe that never reports back is given up after openSeconds', () => {
    const { b, clock } = breaker();
    for (let i = 0; i < 3; i++) b.failure();
    clock.advance(10_000);
    expect(b.allow()).toBe(true);
    clock.advance(9_000);
    expect(b.allow()).toBe(false);
    clock.advance(1_000);
    expect(b.allow()).toBe(true);
  });
});

describe('circuit breaker: recover() when Redis was seen back before openSeconds ended', () => {
  it('an open breaker is half-open at once: one probe, and its success closes it', () => {
    const { b, changes } = breaker({ openSeconds: 30 });
    for (let i = 0; i < 3; i++) b.failure();
    b.recover();
    expect([b.allow(), b.allow()]).toEqual([true, false]);
    b.success();
    expect(b.state).toBe('closed');
    expect(changes).toEqual(['closed→open', 'open→half-open', 'half-open→closed']);
  });

  it('does nothing to a closed or half-open breaker', () => {
    const { b, clock, changes } = breaker();
    b.recover();
    expect(b.state).toBe('closed');
    for (let i = 0; i < 3; i++) b.failure();
    clock.advance(10_000);
    expect(b.allow()).toBe(true);
    b.recover();
    expect(b.allow()).toBe(false); // the probe in flight is still the only one
    expect(changes).toEqual(['closed→open', 'open→half-open']);
  });
});

describe('circuit breaker: half-open → closed on success, → open on failure', () => {
  it('a successful probe closes it', () => {
    const { b, clock, changes } = breaker();
    for (let i = 0; i < 3; i++) b.failure();
    clock.advance(10_000);
    expect(b.allow()).toBe(true);
    b.success();
    expect(b.state).toBe('closed');
    expect(b.allow()).toBe(true);
    expect(changes).toEqual(['closed→open', 'open→half-open', 'half-open→closed']);
  });

  it('a failed probe opens it for another openSeconds', () => {
    const { b, clock, changes } = breaker();
    for (let i = 0; i < 3; i++) b.failure();
    clock.advance(10_000);
    expect(b.allow()).toBe(true);
    b.failure();
    expect(b.state).toBe('open');
    clock.advance(9_999);
    expect(b.allow()).toBe(false);
    clock.advance(1);
    expect(b.allow()).toBe(true);
    expect(changes).toEqual(['closed→open', 'open→half-open', 'half-open→open', 'open→half-open']);
  });
});

describe('circuit breaker: with a real Redis paused (SIGSTOP) and resumed (SIGCONT)', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(() => server.stop());

  it('opens after N timeouts, then skips Redis, and closes after SIGCONT with one probe', async () => {
    const lock = new RedisLockService({
      redis: server.client({ commandTimeout: 200, maxRetriesPerRequest: 0 }),
      namespace: 'cb:real:',
    });
    const { b, clock } = breaker({ failureThreshold: 3, openSeconds: 5 });
    let redisCalls = 0;
    /** What the engine does per call: ask the breaker, then Redis, then report. */
    const guarded = async (key: string): Promise<'locked' | 'busy' | 'failed' | 'skipped'> => {
      if (!b.allow()) return 'skipped';
      redisCalls++;
      const [guard, error] = await lock.acquire(key);
      if (error) {
        b.failure();
        return 'failed';
      }
      b.success();
      if (!guard) return 'busy';
      await lock.release(guard);
      return 'locked';
    };
    expect(await guarded('a')).toBe('locked');
    server.pause();
    try {
      const outcomes: string[] = [];
      for (let i = 0; i < 6; i++) outcomes.push(await guarded(`p${i}`));
      expect(outcomes).toEqual(['failed', 'failed', 'failed', 'skipped', 'skipped', 'skipped']);
      expect(redisCalls).toBe(4);
    } finally {
      server.resume();
    }
    clock.advance(5_000);
    const [probe, other] = await Promise.all([guarded('q1'), guarded('q2')]);
    expect([probe, other]).toEqual(['locked', 'skipped']);
    expect(b.state).toBe('closed');
    expect(await guarded('after')).toBe('locked');
  });
});
