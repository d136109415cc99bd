import { writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { startRedis } from '../support/redis-server.js';
import {
  cpuTicks,
  environment,
  fmt,
  metText,
  Report,
  table,
  targets,
  type BenchContext,
  type BenchSection,
  stealShare,
} from './harness.js';
import { buildBaseline } from './baseline.js';
import { cacheSection } from './cache.bench.js';
import { earlyRefreshSection } from './early-refresh.bench.js';
import { graphqlSection } from './graphql.bench.js';
import { historySection } from './history.bench.js';
import { idempotencySection } from './idempotency.bench.js';
import { instructionsSection } from './instructions.bench.js';
import { l1Section } from './l1.bench.js';
import { lockSection } from './lock.bench.js';
import { memorySection } from './memory.bench.js';
import { outageSection } from './outage.bench.js';
import { overheadSection } from './overhead.bench.js';
import { soakSection } from './soak.bench.js';
import { stampedeSection } from './stampede.bench.js';
import { valuesSection } from './values.bench.js';

const SECTIONS: readonly BenchSection[] = [
  lockSection,
  stampedeSection,
  overheadSection,
  outageSection,
  memorySection,
  instructionsSection,
  cacheSection,
  earlyRefreshSection,
  l1Section,
  soakSection,
  valuesSection,
  historySection,
  idempotencySection,
  graphqlSection,
];

// Compiled to .build/test/bench/run.js; RESULTS.md lives next to the sources.
const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    out: { type: 'string' },
    filter: { type: 'string' },
    'soak-minutes': { type: 'string' },
    baseline: { type: 'string' },
    rounds: { type: 'string' },
  },
});
const quick = values.quick ?? false;
const only = values.only?.split(',');
const filter = values.filter?.split(',');
const soakMinutes =
  values['soak-minutes'] === undefined ? undefined : Number(values['soak-minutes']);
if (soakMinutes !== undefined && !(soakMinutes > 0)) {
  throw new Error(`--soak-minutes must be a positive number, not ${values['soak-minutes']}`);
}
const rounds = values.rounds === undefined ? undefined : Number(values.rounds);
if (rounds !== undefined && !(Number.isInteger(rounds) && rounds > 0)) {
  throw new Error(`--rounds must be a positive integer, not ${values.rounds}`);
}
/** A section runs when named in --only, or, unless it is opt-in (the soak), when none is named. */
const runs = (section: BenchSection): boolean =>
  only ? only.includes(section.id) : section.optIn !== true;
// A quick run is a smoke test, a run of opt-in sections alone (the soak) measures nothing
// RESULTS.md quotes, a run against a baseline compares two builds, and a run of some sections or
// rows (--only, --filter, --rounds) is not the full run: none of them overwrites the committed
// full results.
const soakOnly = SECTIONS.filter(runs).every((section) => section.optIn === true);
const partial = only !== undefined || filter !== undefined || rounds !== undefined;
const out = resolve(
  repoRoot,
  values.out ??
    (quick
      ? '.build/bench-results.quick.md'
      : soakOnly
        ? '.build/bench-results.soak.md'
        : values.baseline !== undefined
          ? '.build/bench-results.baseline.md'
          : partial
            ? '.build/bench-results.partial.md'
            : 'test/bench/RESULTS.md'),
);

async function main(): Promise<number> {
  const started = Date.now();
  // Built before anything is timed: tsc takes seconds.
  const baseline =
    values.baseline === undefined ? undefined : buildBaseline(repoRoot, values.baseline);
  const redis = await startRedis();
  const report = new Report();
  const admin = redis.client();
  let failed = 0;
  try {
    report.add(
      `# nestjs-buffer-lock benchmarks\n\n` +
        `\`npm run bench${quick ? ' -- --quick' : ''}\` on ${new Date().toISOString()}` +
        `${quick ? ' (quick mode: small counts, a smoke test, not figures to quote)' : ''}.\n\n` +
        (await environment(admin)),
    );
    const machine: string[][] = [];
    const runStart = cpuTicks();
    for (const section of SECTIONS) {
      if (!runs(section)) continue;
      // Node alone takes about 17 s to start under valgrind: a quick run that must stay under a
      // minute leaves the instruction counts out unless asked (--only=instructions; CI does).
      if (quick && !only && section === instructionsSection) continue;
      const context: BenchContext = {
        quick,
        redis,
        report,
        filter,
        soakMinutes,
        baseline,
        rounds,
        chartDir: dirname(out),
      };
      const sectionStart = { ticks: cpuTicks(), at: Date.now() };
      try {
        await section.run(context);
      } catch (error) {
        failed++;
        const text = error instanceof Error ? (error.stack ?? error.message) : String(error);
        report.add(`## ${section.title}\n\nFAILED:\n\n\`\`\`\n${text}\n\`\`\`\n`);
      }
      machine.push([
        section.title,
        fmt((Date.now() - sectionStart.at) / 1000, 0),
        fmt(100 * stealShare(sectionStart.ticks, cpuTicks()), 1),
      ]);
    }
    machine.push([
      'whole run',
      fmt((Date.now() - started) / 1000, 0),
      fmt(100 * stealShare(runStart, cpuTicks()), 1),
    ]);
    report.add(
      `## The machine during the run\n\n` +
        `CPU steal: the share of all CPU time (both cores, idle included) that the hypervisor gave ` +
        `to other guests while ours were ready to run (/proc/stat). Timings, and above all Redis ` +
        `round trips between processes, slow down with it; instruction counts (section 6) do not.\n\n` +
        table(['section', 'seconds', 'CPU steal %'], machine),
    );
    report.add(
      `## Targets\n\n` +
        table(
          ['target', 'measured', 'result'],
          targets.map((t) => [t.target, t.measured, metText(t.met)]),
        ) +
        `\nTotal run time ${((Date.now() - started) / 1000).toFixed(0)} s.\n`,
    );
  } finally {
    admin.disconnect();
    await redis.stop();
  }
  writeFileSync(out, report.toString());
  process.stderr.write(`\nwrote ${out}\n`);
  return failed ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
