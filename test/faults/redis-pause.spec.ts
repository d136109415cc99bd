import { describe, expect, it } from 'vitest';
import { FAIL_FAST_CLIENT_DEFAULTS } from '../../lib/redis/client-defaults.js';
import { COMMAND_TIMEOUT, faultRig, loadAcrossFault, startLoadWorkers } from './fault-helpers.js';

/**
 * Redis paused (SIGSTOP) under load: a paused server keeps its connections and answers nothing, so
 * only the client's commandTimeout ends a call's wait. 3 worker processes, each with 4 loops of
 * @SingleFlight calls on keys of their own, on the module's fail-fast client with a
 * commandTimeout below FAIL_FAST_CLIENT_DEFAULTS's.
 */

const rig = faultRig((server) => startLoadWorkers(server.url, 'pause:'));

describe('Redis paused (SIGSTOP) under load, on the fail-fast client', () => {
  it(`every call returns within commandTimeout (${COMMAND_TIMEOUT} ms) + 50 ms, and after SIGCONT the lock is used again within 1 s`, async () => {
    expect(COMMAND_TIMEOUT).toBeLessThan(FAIL_FAST_CLIENT_DEFAULTS.commandTimeout);
    const seen = await loadAcrossFault(rig.workers, 'w', 'redis SIGSTOP', {
      begin: () => rig.server.pause(),
      end: () => rig.server.resume(),
    });

    expect(seen.errors).toBe(0);
    expect(seen.during).toBeGreaterThan(0);
    expect(seen.maxLatencyMs).toBeLessThanOrEqual(COMMAND_TIMEOUT + 50);
    expect(seen.relockMs).toBeLessThan(1000);
  });
});
