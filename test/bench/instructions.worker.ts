// Runs under callgrind (instructions.bench.ts): one lock strategy's acquire+release pairs at
// concurrency 1 on distinct keys, warmed up uncounted, then counted. Prints the count as JSON.
// Arguments: strategy name, warm-up pairs, counted pairs, Redis port, and for the baseline's row
// the baseline's ref and built entry.
import { Redis } from 'ioredis';
import { loadBaseline } from './baseline.js';
import { countInstructions } from './callgrind.js';
import { lockStrategies } from './lock.bench.js';

const [name, warmup, pairs, port, baselineRef, baselineEntry] = process.argv.slice(2);
const client = new Redis({ host: '127.0.0.1', port: Number(port) });
const baseline =
  baselineRef === undefined
    ? undefined
    : { ref: baselineRef, Service: await loadBaseline(baselineEntry!) };
const strategy = (await lockStrategies(client, { baseline })).find((s) => s.name === name);
if (!strategy) throw new Error(`no lock strategy named ${name}`);
let next = 0;
const run = async (count: number, prefix: string): Promise<void> => {
  for (let i = 0; i < count; i++) {
    if (!(await strategy.pair(`${prefix}:${next++}`))) throw new Error(`${name}: lock not taken`);
  }
};
// Workers run side by side on one Redis, and some strategies use the key as given: keys of their own.
const prefix = `bench:instructions:${process.pid}`;
await run(Number(warmup), `${prefix}:warm`);
const instructions = await countInstructions(process.pid, () => run(Number(pairs), prefix));
process.stdout.write(JSON.stringify({ instructions, pairs: Number(pairs) }));
client.disconnect();
