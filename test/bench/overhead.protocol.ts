// Shared by the decorator-overhead bench and its server process: the handler bodies it compares,
// and the server's start-up message and lifecycle (sections 3 and 6 both run the server).
import type { ChildProcess } from 'node:child_process';

/** `empty` returns `{ id }`; `cached` reads `cache:item:<id>` and on a miss SETs it with a TTL. */
export type OverheadWork = 'empty' | 'cached';

/** TTL of the cached route's entries; every request has a new id, so every one is a miss. */
export const OVERHEAD_CACHE_TTL_SECONDS = 60;

/** What the server sends over IPC once it is up: its port, or that @SingleFlight is missing. */
export type ServerMessage = { type: 'listening'; port: number } | { type: 'unavailable' };

/**
 * Runs `use` with the message of the overhead server `server` (a child with IPC), then asks it to
 * exit and kills it if it has not within `killAfterMs`. Rejects if it exits before it reports.
 */
export async function withOverheadServer<T>(
  server: ChildProcess,
  killAfterMs: number,
  use: (message: ServerMessage) => Promise<T>,
): Promise<T> {
  const exited = new Promise((resolve) => server.once('exit', resolve));
  try {
    const message = await new Promise<ServerMessage>((resolve, reject) => {
      server.once('message', resolve);
      server.once('exit', (code) => reject(new Error(`overhead server exited with ${code}`)));
    });
    return await use(message);
  } finally {
    if (server.connected) server.send('exit');
    const timer = setTimeout(() => server.kill('SIGKILL'), killAfterMs);
    await exited;
    clearTimeout(timer);
  }
}
