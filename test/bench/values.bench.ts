// Section 11: what storing a large value costs. Every value BufferCache stores is first checked
// for what JSON would drop or change (a Map, a function, a circular reference), then encoded; the
// rows set that beside JSON.stringify alone and beside other ways to write the same value.
import KeyvRedis from '@keyv/redis';
import { createCache } from 'cache-manager';
import { Keyv } from 'keyv';
import { BufferCache, RedisLockService } from '../../lib/index.js';
import { JSON_RESULT_SERIALIZER } from '../../lib/serialization/result-serializer.js';
import {
  fmt,
  fmtRatio,
  selected,
  summarize,
  table,
  type BenchContext,
  type BenchSection,
} from './harness.js';

/** A list an API might return: `items` rows of a few fields, one of them a Date. */
const listOf = (items: number): unknown =>
  Array.from({ length: items }, (_, i) => ({
    id: i,
    name: `item ${i}`,
    price: i * 1.5,
    tags: ['new', 'sale'],
    updatedAt: new Date(1_700_000_000_000 + i),
  }));

interface Size {
  readonly label: string;
  readonly items: number;
  /** Calls per contender and round. */
  readonly calls: number;
}

const SIZES: readonly Size[] = [
  { label: '10 KB', items: 100, calls: 400 },
  { label: '1 MB', items: 10_000, calls: 20 },
];

interface Contender {
  readonly name: string;
  /** The row it is held against: itself for the first row of a group. */
  readonly against: string;
  call(key: string, value: unknown): unknown;
}

const STRINGIFY = 'JSON.stringify alone';
const HAND_SET = 'hand-written SET (ioredis, JSON.stringify)';

const silent = { log(): void {}, warn(): void {}, error(): void {} };

async function values(context: BenchContext): Promise<void> {
  const { quick, redis, report } = context;
  const rounds = quick ? 1 : 5;
  const callsOf = (size: Size): number => (quick ? Math.max(2, size.calls / 20) : size.calls);
  const client = redis.client();
  const keyvStore = new KeyvRedis(`redis://127.0.0.1:${redis.port}`);
  const lock = new RedisLockService({ redis: client, namespace: 'bench:values:' });
  const cache = new BufferCache({ lock, options: { logger: silent } });
  const aside = createCache({
    stores: [new Keyv({ store: keyvStore, namespace: 'bench-values' })],
  });
  const candidates: readonly Contender[] = [
    { name: STRINGIFY, against: STRINGIFY, call: (_k, v) => JSON.stringify(v) },
    {
      name: 'BufferCache serializer (check + JSON)',
      against: STRINGIFY,
      call: (_k, v) => JSON_RESULT_SERIALIZER.serialize(v),
    },
    {
      name: HAND_SET,
      against: HAND_SET,
      call: (k, v) => client.set(`bench:values:aside:${k}`, JSON.stringify(v), 'PX', 60_000),
    },
    {
      name: 'BufferCache.set(key, value, { ttl: 60 })',
      against: HAND_SET,
      call: (k, v) => cache.set(k, v, { ttl: 60 }),
    },
    {
      name: 'cache-manager set (Keyv Redis store)',
      against: HAND_SET,
      call: (k, v) => aside.set(k, v, 60_000),
    },
  ];
  const contenders = candidates.filter((c) => c.name === c.against || selected(context, c.name));
  const rows: string[][] = [];
  try {
    for (const size of SIZES) {
      const value = listOf(size.items);
      const bytes = Buffer.byteLength(JSON.stringify(value));
      const calls = callsOf(size);
      const ms = new Map<string, number[]>(contenders.map((c) => [c.name, []]));
      // Rounds interleave the contenders; the first round of each warms it up and is not kept.
      for (let round = 0; round <= rounds; round++) {
        for (const contender of contenders) {
          report.progress(`values: ${size.label}, ${contender.name}, round ${round}`);
          for (let i = 0; i < calls; i++) {
            const started = performance.now();
            await contender.call(`${size.label}:${i}`, value);
            if (round > 0) ms.get(contender.name)!.push(performance.now() - started);
          }
        }
      }
      const p50 = new Map([...ms].map(([name, all]) => [name, summarize(all).p50]));
      for (const contender of contenders) {
        const latencies = summarize(ms.get(contender.name)!);
        rows.push([
          `${size.label} (${fmt(bytes / 1024, 0)} KiB of JSON)`,
          contender.name,
          fmt(latencies.p50, 3),
          fmt(latencies.p99, 3),
          fmtRatio(latencies.p50 / p50.get(contender.against)!),
        ]);
      }
    }
  } finally {
    await keyvStore.disconnect();
    client.disconnect();
  }
  report.add(
    `## 11. Large values\n\n` +
      `A list of plain rows (an id, a name, a price, two tags, a Date) at two sizes, written ` +
      `${rounds} round(s) of ${SIZES.map((s) => `${callsOf(s)} (${s.label})`).join(' and ')} ` +
      `sequential calls per contender, interleaved, after a round of warm-up. ms per call. ` +
      `"vs" is the row's p50 over the first row of its group: JSON.stringify alone for the two ` +
      `encodings, the hand-written SET for the three writes to this Redis.\n\n` +
      table(['value', 'contender', 'p50 ms', 'p99 ms', 'vs'], rows),
  );
}

export const valuesSection: BenchSection = {
  id: 'values',
  title: '11. Large values',
  run: values,
};
