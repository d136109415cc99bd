import { isScriptClient, type LockClient, type RedisClientFactory } from '../redis/client.js';
import { ConnectTimeout, NoClient, UnsupportedClient } from './lock-failures.js';

/**
 * An object with an `eval` method, of any client family.
 *
 * @example
 * ```ts
 * hasEval({ eval: () => 1 }); // true
 * hasEval(null); // false
 * ```
 */
export const hasEval = (value: unknown): boolean =>
  typeof value === 'object' &&
  value !== null &&
  typeof (value as { eval?: unknown }).eval === 'function';

/**
 * `made` awaited for at most `connectTimeout` seconds; rejects with ConnectTimeout after.
 *
 * @example
 * ```ts
 * const client: unknown = await inTime(factory(), 5);
 * ```
 */
export function inTime(made: unknown, connectTimeout: number): Promise<unknown> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new ConnectTimeout()), connectTimeout * 1000);
    // A factory still pending keeps no process alive.
    timer.unref();
  });
  // race() handles a late rejection of `made` too: nothing is left unhandled.
  return Promise.race([made, deadline]).finally(() => clearTimeout(timer));
}

/**
 * Makes the client by `factory` and hands it to `use`: at once when the factory returns a
 * client, else once its promise settles within `connectTimeout` seconds. Rejects with
 * NoClient, UnsupportedClient or ConnectTimeout, or the factory's own error.
 *
 * @example
 * ```ts
 * await connectBy(() => new Redis(), 5, (client) => this.use(client));
 * ```
 */
export async function connectBy(
  factory: RedisClientFactory,
  connectTimeout: number,
  use: (client: LockClient) => void,
): Promise<void> {
  const made = factory();
  // A client is used as it is; only something else (a promise, of any library) is awaited.
  const client: unknown = isScriptClient(made) ? made : await inTime(made, connectTimeout);
  if (!isScriptClient(client)) {
    // Something with eval() that is not driven is refused; nothing is no client.
    throw hasEval(client) ? new UnsupportedClient() : new NoClient();
  }
  use(client);
}

/**
 * The client made by a factory on first use. Concurrent first calls share one attempt; a failed
 * attempt is forgotten, so the next call asks the factory again.
 *
 * @example
 * ```ts
 * const connection = new FactoryConnection(() => new Redis(), 5, (client) => this.use(client));
 * if (!this.client) await connection.connect();
 * ```
 */
export class FactoryConnection {
  private connecting: Promise<void> | undefined;

  constructor(
    private readonly factory: RedisClientFactory,
    private readonly connectTimeout: number,
    private readonly use: (client: LockClient) => void,
  ) {}

  /**
   * Makes the client by the factory, or joins the attempt under way. The promise settles with
   * nothing: a client may itself look like a promise (a Proxy that sends every property as a
   * command has a `then`), and resolving a promise with it would call that.
   */
  connect(): Promise<void> {
    if (this.connecting) return this.connecting;
    const attempt = connectBy(this.factory, this.connectTimeout, this.use);
    // A failed attempt is forgotten, so the next call asks the factory again.
    attempt.catch(() => {
      if (this.connecting === attempt) this.connecting = undefined;
    });
    this.connecting = attempt;
    return attempt;
  }
}
