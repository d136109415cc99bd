import { describe, expect, it } from 'vitest';
import type { WorkerEvent } from '../multi-process/flight.protocol.js';
import {
  builds,
  calls,
  faultRig,
  figures,
  killWorker,
  overlapping,
  sleep,
  startHolderAndWaiters,
  type Call,
} from './fault-helpers.js';

/**
 * The holder, a worker process, killed (SIGKILL) in the middle of its build: it never releases,
 * so its lock ends by its TTL, and only then may a waiter in another process build. The waiting
 * processes have a lockTimeout (and so a ttl, which must be longer) that outlasts the dead
 * holder's lock and the next build: a waiter gives up only after lockTimeout, and then builds
 * without the lock, as documented.
 */

const HOLDER_TTL = 1.5;
const WAITER_TTL = 4;
const WAITER_LOCK_TIMEOUT = 3;
const BUILD_MS = 600;

const rig = faultRig((server) =>
  startHolderAndWaiters(
    server,
    'holder-death:',
    { ttl: HOLDER_TTL, lockTimeout: 1 },
    { ttl: WAITER_TTL, lockTimeout: WAITER_LOCK_TIMEOUT },
  ),
);

const began = (events: readonly WorkerEvent[]): Extract<WorkerEvent, { event: 'began' }>[] =>
  events.flatMap((e) => (e.event === 'began' ? [e] : []));

describe('the holder (a worker process) killed (SIGKILL) mid-build', () => {
  it('a waiter in another process builds once the TTL ended, and no two builds overlap', async () => {
    const [holder, ...waiters] = rig.workers;
    const key = 'report';
    void calls(holder!, { cmd: 'calls', key, callers: 3, buildMs: 5000 }).catch(() => {});
    while (began(holder!.events).length === 0) await sleep(5);
    const holderRun = began(holder!.events)[0]!;
    await sleep(200); // into the build, before its first extension (at ttl/3)
    const killedAt = await killWorker(holder!);
    const answers: readonly Call[] = (
      await Promise.all(
        waiters.map((w) => calls(w, { cmd: 'calls', key, callers: 3, buildMs: BUILD_MS })),
      )
    ).flat();

    const after = builds(waiters);
    // The holder's build ran from its start to its death.
    const spans = [{ pid: holderRun.pid, startedAt: holderRun.at, finishedAt: killedAt }, ...after];
    const next = after[0]!;
    figures('holder SIGKILL mid-build', {
      holderTtlMs: HOLDER_TTL * 1000,
      nextBuildAfterHolderStartMs: next.startedAt - holderRun.at,
      nextBuildAfterKillMs: next.startedAt - killedAt,
      builds: spans.length,
      overlaps: overlapping(spans).length,
    });

    expect(answers.filter((c) => c.error !== undefined)).toEqual([]);
    expect(answers).toHaveLength(6);
    // One build after the death, under the lock, shared with every waiting caller.
    expect(after).toHaveLength(1);
    expect(next.fence).toBeGreaterThan(holderRun.fence!);
    expect(answers.every((c) => c.value?.startedAt === next.startedAt)).toBe(true);
    // Not before the dead holder's lock expired (its acquire answered just before its build began).
    expect(next.startedAt - holderRun.at).toBeGreaterThanOrEqual(HOLDER_TTL * 1000 - 50);
    expect(overlapping(spans)).toEqual([]);
  });
});
