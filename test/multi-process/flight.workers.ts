import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import type { Command, Reply } from './flight.protocol.js';

/** The repository root: workers run from there. */
const root = new URL('../..', import.meta.url).pathname.replace(/\/\.build\/multi-process\/$/, '/');

/** The compiled worker (`tsc -p test/multi-process/tsconfig.json`), relative to the root. */
export const WORKER = '.build/multi-process/test/multi-process/flight.worker.js';

export type Result = Extract<Reply, { results: unknown }>;
/** A command without its id (distributed over the union). */
type Ask = Command extends infer C ? (C extends Command ? Omit<C, 'id'> : never) : never;

/** One worker process and its IPC. */
export class Worker {
  private next = 0;
  readonly started: string[] = [];
  private constructor(readonly process: ChildProcess) {
    process.on('message', (reply: Reply) => {
      if ('started' in reply) this.started.push(reply.started);
    });
  }

  static async start(env: Record<string, string>): Promise<Worker> {
    const child = spawn(process.execPath, [WORKER], {
      cwd: root,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    });
    const ready = new Promise<void>((resolve) =>
      child.on('message', (reply: Reply) => 'ready' in reply && resolve()),
    );
    const exited = once(child, 'exit').then(([code]) => {
      throw new Error(`worker exited with ${String(code)} before it was ready`);
    });
    exited.catch(() => {});
    await Promise.race([ready, exited]);
    return new Worker(child);
  }

  ask<R extends Reply>(command: Ask): Promise<R> {
    const id = ++this.next;
    return new Promise<R>((resolve, reject) => {
      const onMessage = (reply: Reply): void => {
        if (!('id' in reply) || reply.id !== id) return;
        this.process.off('message', onMessage);
        if ('error' in reply) reject(new Error(reply.error));
        else resolve(reply as R);
      };
      this.process.on('message', onMessage);
      this.process.send({ ...command, id } as Command);
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
