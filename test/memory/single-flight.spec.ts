import { Logger } from '@nestjs/common';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { RedisLockService } from '../../lib/index.js';
import { MemoryKeyspace } from '../../lib/memory/keyspace.js';
import { SingleFlightEngine } from '../../lib/single-flight/single-flight.engine.js';
import { deferred, MemoryLogger } from '../support/nest-helpers.js';

/**
 * Waiting and sharing on `memory://`: two engines on one named keyspace stand for two workers
 * (each its own lock service, as after a fork), so that the cross-worker path is what runs: the
 * lock, the release message that wakes the waiter, the PTTL backstop, and the shared result.
 */

let names = 0;
const engines: SingleFlightEngine[] = [];
const loggers: MemoryLogger[] = [];

beforeEach(() => void vi.spyOn(Logger.prototype, 'log').mockImplementation(() => {}));
afterEach(() => {
  for (const engine of engines.splice(0)) engine.close();
  loggers.length = 0;
  vi.restoreAllMocks();
});

/** Two workers on one in-memory keyspace; `ttl` and `lockTimeout` in seconds. */
function workers(
  options: { ttl?: number; lockTimeout?: number; share?: boolean } = {},
): SingleFlightEngine[] {
  const url = `memory://single-flight-spec-${++names}` as const;
  return [0, 1].map(() => {
    const logger = new MemoryLogger();
    loggers.push(logger);
    const lock = new RedisLockService({ redis: url, ttl: options.ttl ?? 30 });
    const engine = new SingleFlightEngine({
      lock,
      options: { lockTimeout: options.lockTimeout ?? 10, share: options.share, logger },
    });
    engines.push(engine);
    return engine;
  });
}

describe('a waiting worker on memory://', () => {
  it('is woken by the release message: it runs right after the holder, never both at once, and never waits out the ttl', async () => {
    const publish = vi.spyOn(MemoryKeyspace.prototype, 'spublish');
    const [a, b] = workers({ ttl: 60, lockTimeout: 30 });
    const order: string[] = [];
    const holding = deferred();
    const started = deferred();
    const first = a!.run('report', async () => {
      order.push('a:start');
      started.resolve();
      await holding.promise;
      order.push('a:end');
      return 'a';
    });
    await started.promise;
    const began = Date.now();
    const second = b!.run('report', async () => {
      order.push('b:start');
      return 'b';
    });
    await new Promise((r) => setTimeout(r, 50));
    expect(order).toEqual(['a:start']);
    holding.resolve();
    expect(await Promise.all([first, second])).toEqual(['a', 'b']);
    expect(order).toEqual(['a:start', 'a:end', 'b:start']);
    // The release reached the waiter's subscription; no backstop (60 s) or timeout (30 s) was needed.
    expect(publish.mock.results.map((r) => r.value)).toContain(1);
    expect(Date.now() - began).toBeLessThan(10_000);
    expect(loggers.flatMap((l) => l.lines)).toEqual([]);
  });

  it('takes over at the ttl when the holder never releases (the PTTL backstop)', async () => {
    const [a] = workers({ ttl: 30, lockTimeout: 10 });
    const holder = new RedisLockService({
      redis: `memory://single-flight-spec-${names}`,
      ttl: 0.3,
    });
    const [guard] = await holder.acquire('crashed');
    const acquiredAt = Date.now();
    const client = (await holder.getClient()) as unknown as { get(key: string): Promise<unknown> };
    let heldBy: unknown;
    let ranAfter = 0;
    const value = await a!.run('crashed', async () => {
      ranAfter = Date.now() - acquiredAt;
      heldBy = await client.get(guard!.key);
      return 'took over';
    });
    expect(value).toBe('took over');
    // It ran once the crashed holder's key had expired, under a lock of its own, without a timeout.
    expect(ranAfter).toBeGreaterThanOrEqual(299);
    expect(heldBy).toEqual(expect.any(String));
    expect(heldBy).not.toBe(guard!.token);
    expect(loggers[0]!.lines).toEqual([]);
  });
});

describe('share: true on memory://', () => {
  it('the waiting worker takes the holder’s result instead of running: one run in all', async () => {
    const [a, b] = workers({ share: true });
    let runs = 0;
    const holding = deferred();
    const started = deferred();
    const first = a!.run('totals', async () => {
      runs++;
      started.resolve();
      await holding.promise;
      return { total: 42, at: 'a' };
    });
    await started.promise;
    const second = b!.run('totals', async () => {
      runs++;
      return { total: 0, at: 'b' };
    });
    holding.resolve();
    expect(await Promise.all([first, second])).toEqual([
      { total: 42, at: 'a' },
      { total: 42, at: 'a' },
    ]);
    expect(runs).toBe(1);
  });

  it('20 callers in each of two workers: one run, 40 equal results', async () => {
    const [a, b] = workers({ share: true });
    let runs = 0;
    const work = async (): Promise<number> => {
      runs++;
      await new Promise((r) => setTimeout(r, 20));
      return 7;
    };
    const results = await Promise.all(
      [a!, b!].flatMap((engine) => Array.from({ length: 20 }, () => engine.run('cold', work))),
    );
    expect(runs).toBe(1);
    expect(results).toEqual(Array(40).fill(7));
  });
});
