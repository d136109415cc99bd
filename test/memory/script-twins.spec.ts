import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RedisScriptClient } from '../../lib/index.js';
import { MemoryClient, type MemorySubscriber } from '../../lib/memory/memory-client.js';
import { acquireLock, extendLock, releaseLock } from '../../lib/redis/lock-commands.js';
import { claimKey, fenceKey, resultKey } from '../../lib/redis/keys.js';
import { deleteKey, getValue, lockPttl, ping, setValue } from '../../lib/redis/plain-commands.js';
import { fuzzParameters } from '../fuzz/fuzz.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * Every script of the library against its JavaScript twin: the same random sequence of calls, with
 * good and bad arguments, runs on a real Redis and on the in-memory backend, and each reply, each
 * refusal, every key's value and remaining life, and every wake-up message must agree.
 */

let server: RedisServer;
let redis: Redis;
let listener: Redis;

beforeAll(async () => {
  server = await startRedis();
  redis = server.client();
  listener = server.client();
});
afterAll(() => server.stop());

// A lone surrogate has no UTF-8 form: Redis keeps U+FFFD for it, and so must the twin.
const LOCKS = ['buffer:lock:a', 'buffer:lock:\uD800'] as const;
const KEYS = LOCKS.flatMap((lock) => [lock, resultKey(lock), fenceKey(lock)]);
const TOKENS = ['t1', 't2', '\uDFFF', ''] as const;
/** Long enough not to run out within a run, and values Redis refuses. */
const MILLISECONDS = [60_000, 45_000, 0, -1, 1.5, Number.NaN, 9.3e18, 'abc', '012'] as const;
const PAYLOADS = ['{"total":42}', '', '\uD83D', undefined] as const;

type Call =
  | {
      op:
        | 'acquire'
        | 'acquire-script'
        | 'acquire-fenced'
        | 'acquire-unless'
        | 'acquire-fenced-unless';
      lock: number;
      token: number;
      ms: number;
    }
  | { op: 'release'; lock: number; token: number; write: boolean; payload: number; ms: number }
  | { op: 'extend'; lock: number; token: number; ms: number }
  | { op: 'pttl' | 'get' | 'del'; key: number }
  | { op: 'ping' }
  | { op: 'set'; key: number; value: number; ms: number };

const index = (n: number): fc.Arbitrary<number> => fc.nat({ max: n - 1 });
/** Mostly the first token, so that releases and extensions often hold the right one. */
const token = fc.oneof(
  { weight: 3, arbitrary: fc.constant(0) },
  { weight: 2, arbitrary: index(TOKENS.length) },
);
const lockToken = { lock: index(LOCKS.length), token };
/** Mostly times Redis takes, so that locks are taken and released. */
const ms = fc.oneof(
  { weight: 3, arbitrary: index(2) },
  { weight: 2, arbitrary: index(MILLISECONDS.length) },
);
const call: fc.Arbitrary<Call> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constantFrom(
        'acquire',
        'acquire-script',
        'acquire-fenced',
        'acquire-unless',
        'acquire-fenced-unless',
      ),
      ...lockToken,
      ms,
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant('release' as const),
      ...lockToken,
      write: fc.boolean(),
      payload: index(PAYLOADS.length),
      ms,
    }),
  },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('extend' as const), ...lockToken, ms }) },
  {
    weight: 2,
    arbitrary: fc.record({ op: fc.constantFrom('pttl', 'get', 'del'), key: index(KEYS.length) }),
  },
  { weight: 1, arbitrary: fc.constant({ op: 'ping' as const }) },
  // Writes a token, or a number, so that the fence counter meets both.
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('set' as const),
      key: index(KEYS.length),
      value: index(3),
      ms,
    }),
  },
);

/** The client with `eval` and `evalsha` only, so acquire runs its script instead of SET. */
const scriptOnly = (client: RedisScriptClient): RedisScriptClient => ({
  eval: (...args) => client.eval(...args),
  evalsha: (...args) => client.evalsha!(...args),
});

/** What a call gave: its reply, or the refusal's text without Redis's "script: …" suffix. */
type Outcome = { reply: unknown } | { refused: string };

async function outcome(run: () => Promise<unknown>): Promise<Outcome> {
  try {
    return { reply: await run() };
  } catch (error) {
    return { refused: (error as Error).message.split(' script: ')[0]! };
  }
}

/** The milliseconds at `i`, bad ones included, as a caller could pass them. */
const millisecondsAt = (i: number): number => MILLISECONDS[i] as unknown as number;

function perform(client: RedisScriptClient, step: Call): Promise<unknown> {
  const millis = 'ms' in step ? millisecondsAt(step.ms) : 0;
  switch (step.op) {
    case 'acquire':
      return acquireLock(client, LOCKS[step.lock]!, TOKENS[step.token]!, millis);
    case 'acquire-script':
      return acquireLock(scriptOnly(client), LOCKS[step.lock]!, TOKENS[step.token]!, millis);
    case 'acquire-fenced':
      return acquireLock(client, LOCKS[step.lock]!, TOKENS[step.token]!, millis, true);
    // The entry looked for first: the lock's result key, which releases write.
    case 'acquire-unless':
    case 'acquire-fenced-unless': {
      const lock = LOCKS[step.lock]!;
      const fenced = step.op === 'acquire-fenced-unless';
      const found = { key: resultKey(lock), claim: claimKey(lock) };
      return acquireLock(client, lock, TOKENS[step.token]!, millis, fenced, found);
    }
    case 'release': {
      const lock = LOCKS[step.lock]!;
      const write = step.write
        ? { key: resultKey(lock), payload: PAYLOADS[step.payload], ttlMs: millis }
        : undefined;
      return releaseLock(client, lock, TOKENS[step.token]!, write);
    }
    case 'extend':
      return extendLock(client, LOCKS[step.lock]!, TOKENS[step.token]!, millis);
    case 'pttl':
      return lockPttl(client, KEYS[step.key]!);
    case 'get':
      return getValue(client, KEYS[step.key]!);
    case 'del':
      return deleteKey(client, KEYS[step.key]!);
    case 'ping':
      return ping(scriptOnly(client));
    case 'set':
      return setValue(client, KEYS[step.key]!, ['t1', '41', 'x'][step.value]!, millis);
  }
}

/** A remaining life read at two slightly different instants: equal, or both counting down. */
const sameLife = (a: number, b: number): boolean =>
  a === b || (a >= 0 && b >= 0 && Math.abs(a - b) <= 1000);

/** A fencing number is the server's TIME in µs (or one more than the last): equal within 1 s. */
const isFence = (value: unknown): boolean =>
  Number(value) > 1e15 && Number.isSafeInteger(Number(value));
const sameValue = (a: unknown, b: unknown): boolean =>
  a === b || (isFence(a) && isFence(b) && Math.abs(Number(a) - Number(b)) <= 1e6);

function expectSame(step: string, onRedis: Outcome, inMemory: Outcome): void {
  const fenced = step === 'acquire-fenced' || step === 'acquire-fenced-unless';
  if ((fenced || step === 'get') && 'reply' in onRedis && 'reply' in inMemory) {
    expect(
      sameValue(onRedis.reply, inMemory.reply),
      `${step}: ${JSON.stringify([onRedis.reply, inMemory.reply])}`,
    ).toBe(true);
    return;
  }
  if (step === 'pttl' && 'reply' in onRedis && 'reply' in inMemory) {
    expect(sameLife(onRedis.reply as number, inMemory.reply as number), step).toBe(true);
    return;
  }
  expect(inMemory, step).toEqual(onRedis);
}

/** Every key's value and remaining life. */
async function stateOf(client: Redis | MemoryClient): Promise<[string | null, number][]> {
  return Promise.all(
    KEYS.map(
      async (key) => [await client.get(key), await client.pttl(key)] as [string | null, number],
    ),
  );
}

/** The seed the coverage below was checked on: every reply kind listed there occurs in its runs. */
const TWIN_SEED = 20261204;

const tally = { calls: 0, refused: 0, replies: new Set<string>(), messages: 0 };

async function compare(calls: readonly Call[]): Promise<void> {
  await redis.flushall();
  const memory = new MemoryClient();
  const heard: { redis: string[][]; memory: string[][] } = { redis: [], memory: [] };
  const onRedis = (channel: string, message: string): void =>
    void heard.redis.push([channel, message]);
  const onMemory = (channel: string, message: string): void =>
    void heard.memory.push([channel, message]);
  listener.on('smessage', onRedis);
  const subscriber: MemorySubscriber = memory.duplicate();
  subscriber.on('smessage', onMemory);
  await Promise.all(LOCKS.map((lock) => listener.ssubscribe(lock)));
  await Promise.all(LOCKS.map((lock) => subscriber.ssubscribe(lock)));
  try {
    for (const step of calls) {
      const a = await outcome(() => perform(redis, step));
      const b = await outcome(() => perform(memory, step));
      expectSame(step.op, a, b);
      tally.calls++;
      if ('refused' in a) tally.refused++;
      else tally.replies.add(`${step.op}:${isFence(a.reply) ? 'fence' : JSON.stringify(a.reply)}`);
      const [before, after] = [await stateOf(redis), await stateOf(memory)];
      after.forEach(([value, life], i) => {
        expect(sameValue(value, before[i]![0]), `value of ${KEYS[i]}: ${value}`).toBe(true);
        expect(sameLife(before[i]![1], life), `life of ${KEYS[i]}`).toBe(true);
      });
    }
    // Messages go out on the wire: give the real one time to arrive.
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(heard.memory).toEqual(heard.redis);
    tally.messages += heard.redis.length;
  } finally {
    listener.off('smessage', onRedis);
    await Promise.all(LOCKS.map((lock) => listener.sunsubscribe(lock)));
    subscriber.disconnect();
  }
}

describe('each script and its JavaScript twin answer alike', () => {
  it('random calls give the same replies, refusals, keys, lives and wake-ups as on Redis', async () => {
    // One fixed sequence of runs (FUZZ_SEED replays another), so that the coverage checked below
    // is the same on every run rather than a matter of chance.
    await fc.assert(
      fc.asyncProperty(fc.array(call, { minLength: 1, maxLength: 20 }), compare),
      fuzzParameters('test/memory/script-twins.spec.ts', 100, TWIN_SEED),
    );
    // Not vacuous: both answers and refusals came, and releases published wake-ups.
    expect(tally.calls).toBeGreaterThan(300);
    expect(tally.refused).toBeGreaterThan(20);
    expect(tally.messages).toBeGreaterThan(0);
    for (const reply of [
      'acquire:1',
      'acquire:0',
      'release:1',
      'release:0',
      'extend:1',
      'ping:"PONG"',
    ]) {
      expect(tally.replies).toContain(reply);
    }
    expect(tally.replies).toContain('acquire-fenced:fence');
    expect(tally.replies).toContain('acquire-fenced-unless:fence');
    expect(tally.replies).toContain('acquire-unless:1');
    expect(tally.replies).toContain('acquire-unless:0');
  }, 120_000);

  it.each<[string, Call[], number]>([
    [
      'fencing numbers count up across holders',
      [
        { op: 'acquire-fenced', lock: 0, token: 0, ms: 0 },
        { op: 'release', lock: 0, token: 0, write: true, payload: 0, ms: 0 },
        { op: 'acquire-fenced', lock: 0, token: 1, ms: 0 },
      ],
      1,
    ],
    [
      // Redis does not undo the SET of a script that fails afterwards: the lock is held all the same.
      'a fence counter that holds no number: the script fails after taking the lock',
      [
        { op: 'set', key: 2, value: 2, ms: 0 },
        { op: 'acquire-fenced', lock: 0, token: 0, ms: 0 },
        { op: 'get', key: 0 },
      ],
      0,
    ],
    [
      'a release that writes with a bad time fails before it deletes the lock; one that deletes the result goes through',
      [
        { op: 'acquire', lock: 1, token: 2, ms: 1 },
        { op: 'release', lock: 1, token: 2, write: true, payload: 2, ms: 2 },
        { op: 'pttl', key: 3 },
        { op: 'release', lock: 1, token: 2, write: true, payload: 3, ms: 2 },
        { op: 'pttl', key: 3 },
      ],
      1,
    ],
    [
      'an entry found answers instead of the acquire, fenced or not, and takes no lock',
      [
        { op: 'set', key: 1, value: 2, ms: 0 },
        { op: 'acquire-unless', lock: 0, token: 0, ms: 0 },
        { op: 'acquire-fenced-unless', lock: 0, token: 1, ms: 5 },
        { op: 'pttl', key: 0 },
        { op: 'del', key: 1 },
        { op: 'acquire-fenced-unless', lock: 0, token: 1, ms: 0 },
        { op: 'get', key: 0 },
      ],
      0,
    ],
  ])('%s: the twin answers as Redis does', async (_, calls, wakeUps) => {
    const before = { calls: tally.calls, messages: tally.messages };
    await compare(calls);
    expect(tally.calls - before.calls).toBe(calls.length);
    // A release of a lock held by its token wakes once, heard alike on both.
    expect(tally.messages - before.messages).toBe(wakeUps);
  });

  it('EVAL of a script the library does not have is refused; EVALSHA of one answers NOSCRIPT', async () => {
    const memory = new MemoryClient();
    expect(await outcome(() => memory.eval('return 1', 0))).toEqual({
      refused: 'ERR the in-memory backend runs only the scripts of nestjs-buffer-lock',
    });
    const sha = '0'.repeat(40);
    expect(await outcome(() => memory.evalsha(sha, 0))).toEqual(
      await outcome(() => redis.evalsha(sha, 0)),
    );
  });

  it.each([
    ['more keys than arguments', 2, ['k']],
    ['a negative number of keys', -1, ['k']],
    ['a number of keys that is no integer', 1.5, ['k']],
  ] as const)('%s: refused as by Redis', async (_, numkeys, args) => {
    const lua = `return redis.call('GET', KEYS[1])`;
    const memory = new MemoryClient();
    expect(await outcome(() => memory.eval(lua, numkeys, ...args))).toEqual(
      await outcome(() => redis.eval(lua, numkeys, ...args)),
    );
  });
});
