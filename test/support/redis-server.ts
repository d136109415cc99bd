import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { Redis, type RedisOptions } from 'ioredis';

/**
 * A throwaway redis-server on a free loopback port, owned by one test file (or bench run), so a
 * test can pause, kill or flush it without touching anyone else's.
 */
export interface RedisServer {
  readonly port: number;
  readonly url: string;
  /** The redis-server process now (a new one after `restart()`). */
  readonly process: ChildProcess;
  /** A new ioredis client for this server; closed by `stop()`. */
  client(options?: RedisOptions): Redis;
  /** SIGSTOP: the server stops answering but keeps its connections. */
  pause(): void;
  /** SIGCONT after `pause()`. */
  resume(): void;
  /** SIGKILL: the server dies at once, its connections with it; resolves once it exited. */
  kill(): Promise<void>;
  /**
   * Starts redis-server again on the same port, with the same arguments, after `kill()` (or kills
   * it first); resolves once it answers PING. Clients made by `client()` reconnect to it.
   */
  restart(): Promise<void>;
  /** Stops the server and every client made by `client()`. */
  stop(): Promise<void>;
}

/** Exits the test run with an install hint when redis-server is not on PATH. */
export function requireRedisServer(): void {
  const probe = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) {
    throw new Error(
      'redis-server was not found on PATH. The tests start their own Redis servers. ' +
        'Install it first, e.g. `sudo apt-get install -y redis-server` (Debian/Ubuntu) ' +
        'or `brew install redis` (macOS).',
    );
  }
}

/** A TCP port on 127.0.0.1 that was free a moment ago. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

async function waitForPing(port: number, child: ChildProcess): Promise<void> {
  const deadline = Date.now() + 5000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`redis-server exited with ${child.exitCode}`);
    const probe = new Redis({
      port,
      host: '127.0.0.1',
      lazyConnect: true,
      retryStrategy: () => null,
    });
    probe.on('error', () => {});
    try {
      await probe.connect();
      if ((await probe.ping()) === 'PONG') return;
    } catch {
      // not up yet
    } finally {
      probe.disconnect();
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`redis-server on port ${port} did not answer within 5 s`);
}

function spawnRedis(port: number, extraArgs: readonly string[]): ChildProcess {
  return spawn(
    'redis-server',
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      ...extraArgs,
    ],
    { stdio: 'ignore' },
  );
}

const alive = (child: ChildProcess): boolean =>
  child.exitCode === null && child.signalCode === null;

async function killed(child: ChildProcess): Promise<void> {
  if (!alive(child)) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGCONT');
  child.kill('SIGKILL');
  await exited;
}

/** Starts redis-server on a free port (`--save '' --appendonly no`), retrying on a port race. */
export async function startRedis(extraArgs: readonly string[] = []): Promise<RedisServer> {
  requireRedisServer();
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    let child = spawnRedis(port, extraArgs);
    try {
      await waitForPing(port, child);
    } catch (error) {
      child.kill('SIGKILL');
      if (attempt < 3) continue;
      throw error;
    }
    const clients: Redis[] = [];
    return {
      port,
      url: `redis://127.0.0.1:${port}`,
      get process() {
        return child;
      },
      client(options = {}) {
        const client = new Redis({ port, host: '127.0.0.1', ...options });
        client.on('error', () => {});
        clients.push(client);
        return client;
      },
      pause: () => void child.kill('SIGSTOP'),
      resume: () => void child.kill('SIGCONT'),
      kill: () => killed(child),
      async restart() {
        await killed(child);
        // The port was this server's a moment ago; a socket of the dead one may linger briefly.
        const deadline = Date.now() + 5000;
        for (;;) {
          child = spawnRedis(port, extraArgs);
          try {
            await waitForPing(port, child);
            return;
          } catch (error) {
            await killed(child);
            if (Date.now() >= deadline) throw error;
            await new Promise((r) => setTimeout(r, 50));
          }
        }
      },
      async stop() {
        for (const client of clients) client.disconnect();
        await killed(child);
      },
    };
  }
}
