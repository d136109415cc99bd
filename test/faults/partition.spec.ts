import { describe, expect, it } from 'vitest';
import { startTcpProxy, type ProxyMode, type TcpProxy } from '../support/tcp-proxy.js';
import {
  COMMAND_TIMEOUT,
  faultRig,
  loadAcrossFault,
  startLoadWorkers,
  type LoadFigures,
} from './fault-helpers.js';

/**
 * A network partition between the workers and Redis: every connection goes through a TCP proxy
 * that starts forwarding nothing either way (a blackhole), while the sockets stay open. The
 * client sees no error and no close, only silence, until commandTimeout. 3 worker processes, each
 * with 4 loops of @SingleFlight calls on keys of their own, on the module's fail-fast client.
 */

let proxy: TcpProxy;
const rig = faultRig(
  async (server) => {
    proxy = await startTcpProxy(server.port);
    return startLoadWorkers(proxy.url, 'partition:');
  },
  () => proxy.close(),
);

/** Runs the load across a fault the proxy makes for FAULT_MS, then passes traffic again. */
function acrossFault(mode: ProxyMode, prefix: string): Promise<LoadFigures> {
  return loadAcrossFault(rig.workers, prefix, `partition (${mode.kind})`, {
    begin: () => proxy.setMode(mode),
    end: () => {
      connectionsAtEnd = proxy.connections;
      proxy.setMode({ kind: 'pass' });
    },
  });
}

/** Connections through the proxy just before traffic passed again. */
let connectionsAtEnd = 0;

describe('a network partition through a TCP proxy, under load', () => {
  it(`blackhole (sockets open, nothing forwarded): every call returns within commandTimeout (${COMMAND_TIMEOUT} ms) + 50 ms, and once traffic passes again the lock is used again within 1 s`, async () => {
    const connections = proxy.connections;
    const seen = await acrossFault({ kind: 'blackhole' }, 'blackhole:');
    // Nothing was closed: the clients saw silence, not an error.
    expect(connectionsAtEnd).toBeGreaterThanOrEqual(connections);
    expect(seen.errors).toBe(0);
    expect(seen.during).toBeGreaterThan(0);
    expect(seen.maxLatencyMs).toBeLessThanOrEqual(COMMAND_TIMEOUT + 50);
    expect(seen.relockMs).toBeLessThan(1000);
  });

  it(`cut (every socket destroyed, new ones refused): every call returns within commandTimeout (${COMMAND_TIMEOUT} ms) + 50 ms, and once connections are let through the lock is used again within ioredis's reconnect delay + 1 s`, async () => {
    const seen = await acrossFault({ kind: 'cut' }, 'cut:');
    expect(connectionsAtEnd).toBe(0);
    expect(seen.errors).toBe(0);
    expect(seen.during).toBeGreaterThan(0);
    expect(seen.maxLatencyMs).toBeLessThanOrEqual(COMMAND_TIMEOUT + 50);
    // The client reconnects by ioredis's retryStrategy, min(attempt × 50, 2000) ms apart: after a
    // cut of FAULT_MS the next attempt is at most 400 ms away (attempts at 50, 150, 300, 500, …).
    expect(seen.relockMs).toBeLessThan(1000 + 400);
  });
});
