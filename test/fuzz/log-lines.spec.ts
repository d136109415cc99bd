import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  ENGLISH_MESSAGES,
  LockError,
  RedisLockService,
  RedisUnavailableError,
  SingleFlightEngine,
  type BufferCacheStore,
  type MessageId,
} from '../../lib/index.js';
import { collectEscapes, settle } from '../support/escapes.js';
import { MemoryLogger } from '../support/nest-helpers.js';
import { freePort, startRedis, type RedisServer } from '../support/redis-server.js';
import { fuzzParameters, logForgingKey } from './fuzz.js';

/**
 * Keys with line breaks, ESC, U+2028/2029, NUL and other control characters, and huge keys (up
 * to 1 MB), through every path that logs a key or puts one in a message: fail-open runs and cache
 * lookups on a stopped or refused Redis, `onRedisError: 'throw'`, keys that are no string, a cache
 * store that throws or answers garbage naming the key, a value that cannot be serialized under a
 * property named like the key. No line or message has a raw control character, and each value in
 * it is cut to 200 characters (then `… (N characters)`).
 */

const FILE = 'test/fuzz/log-lines.spec.ts';
const CUT = 200;
const escaped = collectEscapes();
let live: RedisServer;
let stopped: RedisServer;
let refusedPort: number;

beforeAll(async () => {
  live = await startRedis();
  stopped = await startRedis();
  await stopped.stop();
  refusedPort = await freePort();
});
afterAll(async () => {
  await live.stop();
  await stopped.stop();
});

const PLACEHOLDER = /\b[A-Z][A-Z_]*[A-Z]\b/g;
const templates = Object.values(ENGLISH_MESSAGES);
const LONGEST_TEMPLATE = Math.max(...templates.map((t) => t.length));
const MOST_VALUES = Math.max(...templates.map((t) => t.match(PLACEHOLDER)?.length ?? 0));
// `… (1048576 characters)` and a little more for a longer count.
const NOTE = `… (${'9'.repeat(9)} characters)`.length;
/** Each value: 200 characters, each escaped to at most 6 (`\u001b`), then the note. */
const MAX_LINE = LONGEST_TEMPLATE + MOST_VALUES * (CUT * 6 + NOTE);
/** The same with each escape read back as the one character it stands for. */
const MAX_UNESCAPED = LONGEST_TEMPLATE + MOST_VALUES * (CUT + NOTE);

const RAW_CONTROL = /[\p{Cc}\u2028\u2029]/u;
const ESCAPES: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };
/** How a message shows `text`, escaped as documented (`\n`, `\u001b`). */
const escapedText = (text: string): string =>
  text.replaceAll(
    /[\p{Cc}\u2028\u2029]/gu,
    (c) => ESCAPES[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
const unescaped = (line: string): string => line.replaceAll(/\\u[0-9a-f]{4}|\\[nrt]/g, '_');

/** A store that fails every call, or answers garbage, with the key in its text. */
const brokenStore = (mode: 'throw' | 'garbage'): BufferCacheStore => ({
  get: (key) => {
    if (mode === 'throw') throw new Error(`get failed for ${key}`);
    return `{"not an entry": ${JSON.stringify(key)}, ${key}`;
  },
  set: (key) => {
    throw new Error(`set failed for ${key}`);
  },
  delete: (key) => Promise.reject(new Error(`delete failed for ${key}`)),
});

/** A lock on the stopped Redis, or on a port where nothing listens. */
const down = (port?: number): RedisLockService =>
  new RedisLockService({
    redis: () =>
      port === undefined
        ? stopped.client({ maxRetriesPerRequest: 0, retryStrategy: () => null })
        : live.client({ port, maxRetriesPerRequest: 0, retryStrategy: () => null }),
    namespace: 'log:lines:',
  });

/** Whether a text is `id`'s template with its values filled in. */
const shaped = (id: MessageId): RegExp =>
  new RegExp(
    `^${ENGLISH_MESSAGES[id].replaceAll(/[.*+?^${}()|[\]\\]/g, '\\$&').replaceAll(PLACEHOLDER, '[^]*')}$`,
  );
const allMessages: string[] = [];

const figures = { cases: 0, lines: 0, messages: 0, longestLine: 0, longestKey: 0 };

describe('a key in log lines and messages', () => {
  it('never carries a raw control character, and each value is cut to 200 characters', async () => {
    let clock = 1_700_000_000_000;
    const now = (): number => clock;
    const logger = new MemoryLogger();
    const options = { logger, lockTimeout: 1 };
    const stoppedLock = down();
    const stoppedEngine = new SingleFlightEngine({ lock: stoppedLock, options, now });
    const stoppedCache = new BufferCache({ lock: stoppedLock, options, now });
    const refusedLock = down(refusedPort);
    const refusedEngine = new SingleFlightEngine({ lock: refusedLock, options, now });
    const refusedCache = new BufferCache({ lock: refusedLock, options, now });
    const liveLock = new RedisLockService({ redis: () => live.client(), namespace: 'log:live:' });
    const throwingCache = new BufferCache({
      lock: liveLock,
      store: brokenStore('throw'),
      options,
      now,
    });
    const garbageCache = new BufferCache({
      lock: liveLock,
      store: brokenStore('garbage'),
      options,
      now,
    });
    const liveCache = new BufferCache({ lock: liveLock, options, now });

    await fc.assert(
      fc.asyncProperty(logForgingKey, async (key) => {
        // 6 s a case: some lines are throttled, then counted into a log_suppressed line.
        clock += 6000;
        const from = logger.lines.length;
        const messages: string[] = [];
        const seen = (error: unknown): void => {
          // The library's own errors: each message, and a RedisUnavailableError's cause.
          expect(error instanceof LockError || error instanceof RedisUnavailableError).toBe(true);
          messages.push((error as Error).message);
          const cause = (error as Error).cause;
          if (error instanceof RedisUnavailableError && cause instanceof Error) {
            messages.push(cause.message);
          }
        };
        for (const engine of [stoppedEngine, refusedEngine]) {
          expect(await engine.run(key, () => 'built')).toBe('built');
          await engine.run(key, () => 'built', { onRedisError: 'throw' }).catch(seen);
        }
        for (const cache of [stoppedCache, refusedCache, throwingCache, garbageCache]) {
          expect(await cache.getOrSet(key, () => 'built')).toBe('built');
          await cache.set(key, 'value').catch(seen);
        }
        // A value that cannot be stored, under a property named like the key.
        await liveCache.getOrSet(`${key}:value`, () => ({ [key]: 1n })).catch(seen);
        for (const lock of [stoppedLock, liveLock]) {
          const [, error] = await lock.acquire({ toString: () => key } as unknown as string);
          seen(error);
          const [, released] = await lock.release({ key: `${key}`, token: key });
          seen(released);
        }
        await stoppedCache.getOrSet('', () => key).catch(seen);

        const lines = logger.lines.slice(from).map((line) => line.text);
        for (const text of [...lines, ...messages]) {
          expect(text, text.slice(0, 300)).not.toMatch(RAW_CONTROL);
          expect(text.length).toBeLessThanOrEqual(MAX_LINE);
          expect(unescaped(text).length).toBeLessThanOrEqual(MAX_UNESCAPED);
          // The key itself is cut: never more than 200 of its characters in a row.
          if (key.length > CUT) expect(text).not.toContain(escapedText(key.slice(0, CUT + 1)));
          figures.longestLine = Math.max(figures.longestLine, text.length);
        }
        figures.lines += lines.length;
        figures.messages += messages.length;
        allMessages.push(...messages);
        figures.longestKey = Math.max(figures.longestKey, key.length);
        figures.cases++;
        expect(escaped).toEqual([]);
      }),
      fuzzParameters(FILE, 150),
    );
    console.log('log lines fuzz', { ...figures, maxLine: MAX_LINE });
    // Each path logged or failed: the property looked at lines and messages with keys in them.
    expect(figures.lines).toBeGreaterThan(figures.cases);
    for (const id of [
      'lock_fail_open',
      'cache_store_failed',
      'cache_entry_unreadable',
      'log_suppressed',
    ] as const) {
      expect(
        logger.lines.some((line) => shaped(id).test(line.text)),
        id,
      ).toBe(true);
    }
    expect(allMessages.some((m) => shaped('cache_value_unserializable').test(m))).toBe(true);
    expect(allMessages.some((m) => shaped('redis_unavailable').test(m))).toBe(true);
    expect(logger.lines.some((line) => line.text.includes('… ('))).toBe(true);
    expect(logger.lines.some((line) => /\\n|\\u001b|\\u2028|\\u0000/.test(line.text))).toBe(true);
    stoppedEngine.close();
    refusedEngine.close();
    await settle();
    expect(escaped).toEqual([]);
  }, 60_000);
});
