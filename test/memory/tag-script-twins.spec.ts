import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RedisScriptClient } from '../../lib/index.js';
import { MemoryClient, type MemorySubscriber } from '../../lib/memory/memory-client.js';
import { bumpTags, deleteKey, stampTags } from '../../lib/redis/plain-commands.js';
import { fuzzParameters } from '../fuzz/fuzz.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * The tag scripts against their JavaScript twins: the same sequence of stamps, bumps and lost keys
 * runs on a real Redis and on the in-memory backend, and each reply, refusal, tag key's value and
 * remaining life, and every announcement must agree.
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

const CHANNEL = 'buffer:cache:{nestjs-buffer-lock}:l1';
// Names JSON writes with escapes, and a lone surrogate (U+FFFD in Redis), beside plain ones.
const NAMES = ['shop:1', 'a/b "q"', '\uD800', 'ü\n'] as const;
const KEYS = NAMES.map((name) => `buffer:cache:{nestjs-buffer-lock}:tag:${name}`);
const VERSIONS = ['v1', 'v2', 'AAAAAAAAAAAAAAAAAAAAAA'] as const;
/** Lives Redis takes, and ones it refuses. */
const MILLISECONDS = [604_800_000, 60_000, 0, -1, 1.5, 'abc'] as const;

type Step =
  | { op: 'stamp' | 'bump'; tags: number[]; version: number; ms: number }
  | { op: 'lose'; tag: number };

const index = (n: number): fc.Arbitrary<number> => fc.nat({ max: n - 1 });
const tags = fc.uniqueArray(index(NAMES.length), { minLength: 1, maxLength: NAMES.length });
const ms = fc.oneof(
  { weight: 4, arbitrary: index(2) },
  { weight: 1, arbitrary: index(MILLISECONDS.length) },
);
const step: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({
      op: fc.constant('stamp' as const),
      tags,
      version: index(VERSIONS.length),
      ms,
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('bump' as const),
      tags,
      version: index(VERSIONS.length),
      ms,
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({ op: fc.constant('lose' as const), tag: index(NAMES.length) }),
  },
);

type Outcome = { reply: unknown } | { refused: string };

async function outcome(run: () => Promise<unknown>): Promise<Outcome> {
  try {
    return { reply: await run() };
  } catch (error) {
    return { refused: (error as Error).message.split(' script: ')[0]! };
  }
}

function perform(client: RedisScriptClient, s: Step): Promise<unknown> {
  if (s.op === 'lose') return deleteKey(client, KEYS[s.tag]!);
  const keys = s.tags.map((i) => KEYS[i]!);
  const names = s.tags.map((i) => NAMES[i]!);
  const millis = MILLISECONDS[s.ms] as unknown as number;
  const version = VERSIONS[s.version]!;
  if (s.op === 'bump') {
    const message = `origin\nt${JSON.stringify(names)}\n`;
    return bumpTags(client, keys, version, millis, CHANNEL, message);
  }
  return stampTags(client, keys, names, version, millis, CHANNEL, 'origin\nt');
}

/** Equal, or both counting down within a second of each other. */
const sameLife = (a: number, b: number): boolean =>
  a === b || (a >= 0 && b >= 0 && Math.abs(a - b) <= 1000);

async function stateOf(client: Redis | MemoryClient): Promise<[string | null, number][]> {
  return Promise.all(
    KEYS.map(
      async (key) => [await client.get(key), await client.pttl(key)] as [string | null, number],
    ),
  );
}

const tally = { steps: 0, refused: 0, messages: 0, lostStamped: 0 };

/** Runs `steps` on both; resolves to the announcements heard on Redis. */
async function compare(steps: readonly Step[]): Promise<string[]> {
  await redis.flushall();
  const memory = new MemoryClient();
  const heard: { redis: string[]; memory: string[] } = { redis: [], memory: [] };
  const onRedis = (_: string, message: string): void => void heard.redis.push(message);
  const onMemory = (_: string, message: string): void => void heard.memory.push(message);
  listener.on('smessage', onRedis);
  const subscriber: MemorySubscriber = memory.duplicate();
  subscriber.on('smessage', onMemory);
  await listener.ssubscribe(CHANNEL);
  await subscriber.ssubscribe(CHANNEL);
  try {
    for (const s of steps) {
      const before = await stateOf(redis);
      const a = await outcome(() => perform(redis, s));
      const b = await outcome(() => perform(memory, s));
      expect(b, s.op).toEqual(a);
      tally.steps++;
      if ('refused' in a) tally.refused++;
      else if (s.op === 'stamp' && s.tags.some((i) => before[i]![0] === null)) tally.lostStamped++;
      const [after, inMemory] = [await stateOf(redis), await stateOf(memory)];
      inMemory.forEach(([value, life], i) => {
        expect(value, `value of ${KEYS[i]}`).toBe(after[i]![0]);
        expect(sameLife(after[i]![1], life), `life of ${KEYS[i]}`).toBe(true);
      });
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(heard.memory).toEqual(heard.redis);
    tally.messages += heard.redis.length;
    return heard.redis;
  } finally {
    listener.off('smessage', onRedis);
    await listener.sunsubscribe(CHANNEL);
    subscriber.disconnect();
  }
}

describe('the tag scripts and their JavaScript twins answer alike', () => {
  it('random stamps, bumps and lost keys give the same replies, keys, lives and announcements as on Redis', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 12 }), async (steps) => {
        await compare(steps);
      }),
      fuzzParameters('test/memory/tag-script-twins.spec.ts', 60, 20261205),
    );
    // Not vacuous: answers and refusals came, lost keys were stamped, and both announced.
    expect(tally.steps).toBeGreaterThan(200);
    expect(tally.refused).toBeGreaterThan(5);
    expect(tally.lostStamped).toBeGreaterThan(20);
    expect(tally.messages).toBeGreaterThan(50);
  }, 120_000);

  it('a stamp of keys some of which are lost: the versions found, the new one for the rest, one announcement naming those', async () => {
    const heard = await compare([
      { op: 'bump', tags: [0], version: 0, ms: 0 },
      { op: 'stamp', tags: [1, 0, 3], version: 1, ms: 0 },
      { op: 'stamp', tags: [1, 0, 3], version: 2, ms: 0 },
    ]);
    expect(heard).toEqual(['origin\nt["shop:1"]\nv1', 'origin\nt["a/b \\"q\\"","ü\\n"]\nv2']);
    expect(await redis.mget(KEYS)).toEqual(['v1', 'v2', null, 'v2']);
  });
});
