// Runs under callgrind (instructions.bench.ts): one lock strategy's acquire+release pairs at
// concurrency 1 on distinct keys, or one cache hit row's calls (cache-hit.ts), warmed up
// uncounted, then counted in `rounds` rounds. Prints the counts as JSON.
// Arguments: row name, warm-up operations, counted operations per round, rounds, Redis port, and
// for a baseline's row the baseline's ref and built entry.
import { Redis } from 'ioredis';
import { loadBaseline } from './baseline.js';
import { cacheHit, isHitRow } from './cache-hit.js';
import { countInstructions } from './callgrind.js';
import { lockStrategies } from './lock.bench.js';

const [name, warmup, count, rounds, port, baselineRef, baselineEntry] = process.argv.slice(2);
let operation: (key: string) => Promise<boolean>;
let close: () => Promise<unknown>;
if (isHitRow(name!)) {
  const hit = await cacheHit(name, Number(port), baselineEntry);
  operation = async () => (await hit.call()) !== undefined;
  close = hit.close;
} else {
  const client = new Redis({ host: '127.0.0.1', port: Number(port) });
  const baseline =
    baselineRef === undefined
      ? undefined
      : { ref: baselineRef, Service: await loadBaseline(baselineEntry!) };
  const strategy = (await lockStrategies(client, { baseline })).find((s) => s.name === name);
  if (!strategy) throw new Error(`no lock strategy named ${name}`);
  operation = (key) => strategy.pair(key);
  close = async () => client.disconnect();
}
let next = 0;
const run = async (times: number, prefix: string): Promise<void> => {
  for (let i = 0; i < times; i++) {
    if (!(await operation(`${prefix}:${next++}`))) throw new Error(`${name}: no lock, or no value`);
  }
};
// Workers run side by side on one Redis, and some strategies use the key as given: keys of their own.
const prefix = `bench:instructions:${process.pid}`;
await run(Number(warmup), `${prefix}:warm`);
const instructions: number[] = [];
for (let round = 0; round < Number(rounds); round++) {
  instructions.push(await countInstructions(process.pid, () => run(Number(count), prefix)));
}
process.stdout.write(JSON.stringify({ instructions, count: Number(count) }));
await close();
