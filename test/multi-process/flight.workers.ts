import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import type { Command, Reply } from './flight.protocol.js';

/** The repository root: workers run from there. */
const root = new URL('../..', import.meta.url).pathname.replace(/\/\.build\/multi-process\/$/, '/');

/** The compiled worker (`tsc -p test/multi-process/tsconfig.json`), relative to the root. */
export const WORKER = '.build/multi-process/test/multi-process/flight.worker.js';

/** Compiles the workers and the library they load (`tsc -p test/multi-process/tsconfig.json`). */
export function compileWorkers(): void {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  const build = spawnSync(process.execPath, [tsc, '-p', 'test/multi-process/tsconfig.json'], {
    cwd: root,
    encoding: 'utf8',
  });
  if (build.status !== 0) throw new Error(`tsc failed:\n${build.stdout}`);
}

export type Result = Extract<Reply, { results: unknown }>;
/** A command without its id (distributed over the union). */
type Ask<C> = C extends unknown ? Omit<C, 'id'> : never;

/**
 * What every worker may send: that it is ready, that a build started, an answer by id, or
 * something that happened (an event).
 */
type AnyReply =
  | { readonly ready: true }
  | { readonly started: string }
  | { readonly id: number }
  | { readonly event: string };

/**
 * One worker process and its IPC. `C` and `R` are the commands and replies of its script
 * (default: flight.worker.ts).
 */
export class Worker<C extends { readonly id: number } = Command, R extends AnyReply = Reply> {
  private next = 0;
  readonly started: string[] = [];
  /** The events the worker sent, in order. */
  readonly events: Extract<R, { readonly event: string }>[] = [];
  private constructor(readonly process: ChildProcess) {
    process.on('message', (reply: AnyReply) => {
      if ('started' in reply) this.started.push(reply.started);
      if ('event' in reply) this.events.push(reply as Extract<R, { readonly event: string }>);
    });
  }

  /** Starts `script` (compiled, relative to the repository root) and waits for its `ready`. */
  static async start<C extends { readonly id: number } = Command, R extends AnyReply = Reply>(
    env: Record<string, string>,
    script: string = WORKER,
  ): Promise<Worker<C, R>> {
    const child = spawn(process.execPath, [script], {
      cwd: root,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    });
    const ready = new Promise<void>((resolve) =>
      child.on('message', (reply: AnyReply) => 'ready' in reply && resolve()),
    );
    const exited = once(child, 'exit').then(([code]) => {
      throw new Error(`worker exited with ${String(code)} before it was ready`);
    });
    exited.catch(() => {});
    await Promise.race([ready, exited]);
    return new Worker<C, R>(child);
  }

  ask<A extends R>(command: Ask<C>): Promise<A> {
    const id = ++this.next;
    return new Promise<A>((resolve, reject) => {
      const onMessage = (reply: AnyReply): void => {
        if (!('id' in reply) || reply.id !== id) return;
        this.process.off('message', onMessage);
        if ('error' in reply) reject(new Error(String(reply.error)));
        else resolve(reply as A);
      };
      this.process.on('message', onMessage);
      this.process.send({ ...command, id });
    });
  }

  async stop(): Promise<void> {
    const child = this.process;
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGTERM');
    await exited;
  }
}
