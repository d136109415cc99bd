import { createConnection, createServer, type Server, type Socket } from 'node:net';

/**
 * What a {@link TcpProxy} does with the traffic, also on connections opened later:
 * - `pass`: forwards it;
 * - `delay`: forwards every chunk `ms` later, in order;
 * - `cut`: destroys every socket (the client sees the connection close; new ones are closed at once);
 * - `blackhole`: keeps the sockets open and forwards nothing either way, as a partitioned network
 *   does: the client sees no error, only silence. Bytes are left unread in the sockets (TCP holds
 *   and retransmits them), so they arrive once the proxy passes traffic again.
 */
export type ProxyMode =
  | { readonly kind: 'pass' }
  | { readonly kind: 'delay'; readonly ms: number }
  | { readonly kind: 'cut' }
  | { readonly kind: 'blackhole' };

/**
 * A TCP proxy on a free loopback port in front of `127.0.0.1:targetPort`, for fault tests: point
 * a client at `port` and change `mode` to delay, cut or blackhole its connection.
 */
export interface TcpProxy {
  readonly port: number;
  /** `redis://127.0.0.1:<port>`. */
  readonly url: string;
  readonly mode: ProxyMode;
  /** Connections open now (client side). */
  readonly connections: number;
  setMode(mode: ProxyMode): void;
  close(): Promise<void>;
}

/** One direction of a proxied connection: reads `from`, writes `to`, as the mode says. */
class Pipe {
  /** Chunks held back by `delay`, each with when it may go. */
  private readonly held: { at: number; chunk: Buffer }[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly from: Socket,
    private readonly to: Socket,
    private mode: () => ProxyMode,
  ) {
    from.on('data', (chunk: Buffer) => this.receive(chunk));
  }

  /** Applies the current mode: reading stops in a blackhole and resumes after it. */
  apply(): void {
    const mode = this.mode();
    if (mode.kind === 'blackhole') {
      this.from.pause();
      clearTimeout(this.timer);
      this.timer = undefined;
    } else {
      this.from.resume();
      this.flush();
    }
  }

  private receive(chunk: Buffer): void {
    const mode = this.mode();
    // Chunks already held go first, whatever the mode is now: order is TCP's promise.
    if (mode.kind === 'delay') this.held.push({ at: Date.now() + mode.ms, chunk });
    else if (this.held.length > 0) this.held.push({ at: 0, chunk });
    else this.write(chunk);
    this.flush();
  }

  private flush(): void {
    if (this.mode().kind === 'blackhole') return;
    const now = Date.now();
    while (this.held.length > 0 && this.held[0]!.at <= now) this.write(this.held.shift()!.chunk);
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.held.length > 0) {
      this.timer = setTimeout(() => this.flush(), this.held[0]!.at - now);
    }
  }

  private write(chunk: Buffer): void {
    if (!this.to.destroyed) this.to.write(chunk);
  }

  stop(): void {
    clearTimeout(this.timer);
    this.held.length = 0;
  }
}

/**
 * Starts a proxy to `127.0.0.1:targetPort` in mode `pass`.
 *
 * @example
 * ```ts
 * const proxy = await startTcpProxy(server.port);
 * const client = new Redis(proxy.url);
 * proxy.setMode({ kind: 'blackhole' }); // commands now time out; no error, no close
 * proxy.setMode({ kind: 'pass' }); // what was held back arrives
 * await proxy.close();
 * ```
 */
export async function startTcpProxy(targetPort: number): Promise<TcpProxy> {
  let mode: ProxyMode = { kind: 'pass' };
  const links = new Set<{ client: Socket; upstream: Socket; pipes: Pipe[] }>();

  const server: Server = createServer((client) => {
    if (mode.kind === 'cut') return void client.destroy();
    const upstream = createConnection({ port: targetPort, host: '127.0.0.1' });
    const pipes = [new Pipe(client, upstream, () => mode), new Pipe(upstream, client, () => mode)];
    const link = { client, upstream, pipes };
    links.add(link);
    const end = (): void => {
      if (!links.delete(link)) return;
      for (const pipe of pipes) pipe.stop();
      client.destroy();
      upstream.destroy();
    };
    for (const socket of [client, upstream]) {
      socket.setNoDelay(true);
      socket.on('error', end);
      socket.on('close', end);
    }
    for (const pipe of pipes) pipe.apply();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as { port: number };

  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    get mode() {
      return mode;
    },
    get connections() {
      return links.size;
    },
    setMode(next) {
      mode = next;
      for (const link of links) {
        if (mode.kind === 'cut') {
          link.client.destroy();
          link.upstream.destroy();
        } else {
          for (const pipe of link.pipes) pipe.apply();
        }
      }
    },
    async close() {
      for (const link of links) {
        link.client.destroy();
        link.upstream.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
