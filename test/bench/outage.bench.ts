import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { startRedis } from '../support/redis-server.js';
import { decorate, singleFlightApi } from './features.js';
import {
  fmt,
  median,
  NOT_AVAILABLE,
  sleep,
  summarize,
  table,
  target,
  type BenchContext,
  type BenchSection,
} from './harness.js';

/** The first object among the library's exports that carries a numeric `commandTimeout`. */
function findCommandTimeout(lib: Readonly<Record<string, unknown>>): number | undefined {
  for (const value of Object.values(lib)) {
    if (typeof value !== 'object' || value === null) continue;
    try {
      const timeout = (value as { commandTimeout?: unknown }).commandTimeout;
      if (typeof timeout === 'number') return timeout;
    } catch {
      // Nest's ConfigurableModuleBuilder type tokens throw when read as values.
    }
  }
  return undefined;
}

/** Whether the library has a circuit breaker the module uses. */
function hasBreaker(lib: Readonly<Record<string, unknown>>): boolean {
  return typeof lib['CircuitBreaker'] === 'function' || 'CIRCUIT_BREAKER_DEFAULTS' in lib;
}

interface Sample {
  readonly start: number;
  readonly ms: number;
}

const LOOPS = 8;
const CALL_LIMIT_MS = 5_000;

export const outageSection: BenchSection = {
  id: 'outage',
  title: '4. Outage',
  async run({ quick, report }: BenchContext) {
    const api = await singleFlightApi();
    const commandTimeout = api ? findCommandTimeout(api.lib) : undefined;
    if (!api || !hasBreaker(api.lib) || commandTimeout === undefined) {
      const missing = !api
        ? 'no @SingleFlight'
        : !hasBreaker(api.lib)
          ? 'no circuit breaker export'
          : 'no client defaults with commandTimeout';
      report.add(`## 4. Outage\n\n${NOT_AVAILABLE} (${missing}).\n`);
      for (const name of ['p99 before the breaker opens', 'p99 after the breaker opens']) {
        target(`outage: ${name}`, NOT_AVAILABLE, undefined);
      }
      return;
    }
    // Its own server: this section freezes it.
    const redis = await startRedis();
    const probe = redis.client();
    let checkLock = false;
    let lockSeen = false;
    try {
      let lockKeyOf: ((key: string) => string) | undefined;
      class Calls {
        async call(key: string): Promise<void> {
          // Only after SIGCONT: was this call run under the lock?
          if (checkLock && lockKeyOf && (await probe.exists(lockKeyOf(key))) === 1) lockSeen = true;
        }
      }
      Injectable()(Calls);
      decorate(
        Calls.prototype,
        'call',
        api.SingleFlight((key: string) => key),
      );
      // The module's breaker defaults; quick mode shortens the open time to keep CI short.
      const breakerDefaults = (
        api.lib['BUFFER_LOCK_DEFAULTS'] as Record<string, unknown> | undefined
      )?.['circuitBreaker'] as Record<string, unknown> | undefined;
      const breaker =
        breakerDefaults && quick ? { ...breakerDefaults, openSeconds: 1 } : breakerDefaults;
      // oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class is empty
      const OutageApp = class {};
      Module({
        imports: [
          api.BufferLockModule.forRoot({
            redis: redis.url,
            namespace: 'bench:outage:',
            ttl: 10,
            lockTimeout: 5,
            ...(breaker ? { circuitBreaker: breaker } : {}),
          }),
        ],
        providers: [Calls],
      })(OutageApp);
      const app = await NestFactory.createApplicationContext(OutageApp, { logger: false });
      const calls = app.get(Calls);
      const lockService = app.get(
        api.lib['RedisLockService'] as new () => { redisKey(k: string): string },
      );
      lockKeyOf = (key) => lockService.redisKey(key);
      // The engine tells when its breaker changes state; without that, latency tells.
      const transitions: { state: string; at: number }[] = [];
      const Engine = api.lib['SingleFlightEngine'];
      const engine =
        typeof Engine === 'function'
          ? (app.get(Engine as new () => unknown) as {
              on?: (event: 'breaker', listener: (state: string) => void) => unknown;
            })
          : undefined;
      const hasEvents = typeof engine?.on === 'function';
      engine?.on?.('breaker', (state) => transitions.push({ state, at: performance.now() }));

      let serial = 0;
      // A call that never returns (no command timeout) counts as CALL_LIMIT_MS and is left behind.
      const timed = async (): Promise<Sample> => {
        const start = performance.now();
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          calls.call(`outage:${serial++}`),
          new Promise((r) => (timer = setTimeout(r, CALL_LIMIT_MS))),
        ]);
        clearTimeout(timer);
        return { start, ms: performance.now() - start };
      };
      const healthy: Sample[] = [];
      for (let i = 0; i < (quick ? 200 : 2000); i++) healthy.push(await timed());

      // Several outages in a row: few calls happen before a breaker opens, so one outage gives
      // too few samples for a percentile.
      const cycles = quick ? 1 : 3;
      const before: Sample[] = [];
      const after: Sample[] = [];
      const openedMs: number[] = [];
      const recovered: number[] = [];
      const closedMs: number[] = [];
      let opened = true;
      const limitMs = quick ? 6_000 : 20_000;
      for (let cycle = 0; cycle < cycles && opened; cycle++) {
        report.progress(`outage: SIGSTOP (${cycle + 1} of ${cycles})`);
        const fromTransition = transitions.length;
        const openedNow = (): number | undefined =>
          transitions.slice(fromTransition).find((t) => t.state === 'open')?.at;
        checkLock = false;
        redis.pause();
        const paused: Sample[] = [];
        const pausedAt = performance.now();
        let fastInARow = 0;
        const wanted = quick ? 200 : 700;
        // LOOPS callers at a time until, after the breaker opened, `wanted` calls were made; or
        // until `limitMs` passed (no breaker in the call path).
        const enough = (): boolean =>
          hasEvents
            ? openedNow() !== undefined &&
              paused.filter((s) => s.start >= openedNow()!).length >= wanted
            : fastInARow >= wanted;
        await Promise.all(
          Array.from({ length: LOOPS }, async () => {
            while (!enough() && performance.now() - pausedAt < limitMs) {
              // A real caller arrives through I/O. With the breaker open a call settles in
              // microtasks only, so a loop that never yields would starve this process's timers,
              // the ioredis command timeouts of the calls still waiting among them.
              await new Promise((resolve) => setImmediate(resolve));
              const sample = await timed();
              paused.push(sample);
              fastInARow = sample.ms < 5 ? fastInARow + 1 : 0;
            }
          }),
        );
        opened = enough();
        // Without breaker events: calls that started before the last slow one ended ran before
        // the breaker opened.
        const openAt = !opened
          ? Number.POSITIVE_INFINITY
          : hasEvents
            ? openedNow()!
            : paused.filter((s) => s.ms >= 5).reduce((t, s) => Math.max(t, s.start + s.ms), 0);
        before.push(...paused.filter((s) => s.start < openAt));
        after.push(...paused.filter((s) => s.start >= openAt));
        if (opened) openedMs.push(openAt - pausedAt);

        report.progress('outage: SIGCONT');
        redis.resume();
        const resumedAt = performance.now();
        const fromResume = transitions.length;
        checkLock = true;
        lockSeen = false;
        while (performance.now() - resumedAt < 60_000) {
          await timed();
          if (lockSeen) {
            recovered.push(performance.now() - resumedAt);
            break;
          }
          await sleep(5);
        }
        const closed = transitions.slice(fromResume).find((t) => t.state === 'closed');
        if (closed) closedMs.push(closed.at - resumedAt);
      }
      await app.close();
      const recoveredMs = median(recovered);
      const closedText = closedMs.length
        ? ` The breaker closed ${closedMs.map((ms) => fmt(ms, 0)).join(', ')} ms after SIGCONT.`
        : '';

      const b = summarize(before.map((s) => s.ms));
      const a = summarize(after.map((s) => s.ms));
      const h = summarize(healthy.map((s) => s.ms));
      const breakerText = opened
        ? `The breaker opened ${openedMs.map((ms) => fmt(ms, 0)).join(', ')} ms after SIGSTOP` +
          (hasEvents ? ' (its state-change event).' : ' (judged by latency).')
        : `${NOT_AVAILABLE}: the breaker did not open within ${limitMs / 1000} s of SIGSTOP ` +
          `(no call came back in under 5 ms), so @SingleFlight does not use one yet.`;
      report.add(
        `## 4. Outage\n\n` +
          `A Nest application context with \`BufferLockModule.forRoot({ redis: url })\` (the ` +
          `module's own client, so its fail-fast defaults apply: commandTimeout ${commandTimeout} ms) ` +
          `calls a \`@SingleFlight\` method on distinct keys, ${LOOPS} callers at a time; each ` +
          `yields to the event loop before its next call, as callers that arrive by I/O do. The ` +
          `section's own redis-server is frozen with SIGSTOP, then resumed with SIGCONT, ` +
          `${cycles} time(s); the paused rows pool all outages.\n\n` +
          table(
            ['phase', 'calls', 'p50 ms', 'p99 ms', 'max ms'],
            [
              ['Redis healthy', String(h.count), fmt(h.p50, 3), fmt(h.p99, 3), fmt(h.max, 1)],
              [
                'paused, before the breaker opened',
                String(b.count),
                fmt(b.p50, 1),
                fmt(b.p99, 1),
                fmt(b.max, 1),
              ],
              [
                'paused, breaker open',
                String(a.count),
                fmt(a.p50, 3),
                fmt(a.p99, 3),
                fmt(a.max, 3),
              ],
            ],
          ) +
          `\n${breakerText} After SIGCONT, calls used the lock again after ` +
          `${recovered.map((ms) => fmt(ms, 0)).join(', ')} ms (median ` +
          `**${fmt(recoveredMs, 0)} ms**).${closedText} Breaker settings: ` +
          `${breaker ? `\`${JSON.stringify(breaker)}\`` : 'unknown'}` +
          `${quick ? ' (quick mode shortens openSeconds)' : ' (the module defaults)'}.\n`,
      );
      target(
        `outage: p99 before the breaker opens ≤ commandTimeout + 20 ms (${commandTimeout + 20} ms)`,
        `${fmt(b.p99, 1)} ms`,
        b.count > 0 && b.p99 <= commandTimeout + 20,
      );
      target(
        'outage: p99 after the breaker opens ≤ 1 ms',
        opened ? `${fmt(a.p99, 3)} ms` : NOT_AVAILABLE,
        opened ? a.p99 <= 1 : undefined,
      );
      target(
        'outage: calls use the lock again after SIGCONT',
        `${fmt(recoveredMs, 0)} ms (median)`,
        Number.isFinite(recoveredMs),
      );
    } finally {
      redis.resume();
      await redis.stop();
    }
  },
};
