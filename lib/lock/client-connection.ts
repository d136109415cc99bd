import { isScriptClient, type LockClient, type RedisClientFactory } from '../redis/client.js';
import { ConnectTimeout, NoClient, UnsupportedClient } from './lock-failures.js';

const hasEval = (value: unknown): boolean =>
  typeof value === 'object' &&
  value !== null &&
  typeof (value as { eval?: unknown }).eval === 'function';

function inTime(made: unknown, connectTimeout: number): Promise<[unknown]> {
  let timer: NodeJS.Timeout | undefined;
  let late = false;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      late = true;
      reject(new ConnectTimeout());
    }, connectTimeout * 1000);
    // A factory still pending keeps no process alive.
    timer.unref();
  });
  // Boxed, so that no promise adopts a client with a `then`; one thenable step per macrotask, so
  // that one resolving to thenables for ever cannot keep the deadline from firing.
  const settled = async (): Promise<[unknown]> => {
    let value = made;
    for (;;) {
      const then = isScriptClient(value) ? undefined : (value as { then?: unknown } | null)?.then;
      if (typeof then !== 'function' || late) return [value];
      [value] = await new Promise<[unknown]>((resolve, reject) =>
        then.call(value, (next: unknown) => resolve([next]), reject),
      );
      await new Promise(setImmediate);
    }
  };
  // race() handles a late rejection too: nothing is left unhandled.
  return Promise.race([settled(), deadline]).finally(() => clearTimeout(timer));
}

/**
 * Hands the factory's client to `use`, awaited for at most `connectTimeout` seconds when it is no
 * client itself (a promise, of any library). Resolves with nothing: a client may look like a
 * promise (a Proxy with a `then`), and resolving with it would call that. Rejects with NoClient,
 * UnsupportedClient, ConnectTimeout or the factory's own error.
 */
export async function connectBy(
  factory: RedisClientFactory,
  connectTimeout: number,
  use: (client: LockClient) => void,
): Promise<void> {
  const made = factory();
  const [client] = isScriptClient(made) ? [made] : await inTime(made, connectTimeout);
  if (!isScriptClient(client)) throw hasEval(client) ? new UnsupportedClient() : new NoClient();
  use(client);
}
