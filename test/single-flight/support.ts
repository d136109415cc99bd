import type { LoggerService } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { RedisLockService, type RedisScriptClient } from '../../lib/index.js';
import { ACQUIRE_KEY } from '../../lib/lock/redis-lock.service.js';

/** A logger that drops everything. */
export const silent: LoggerService = { log() {}, warn() {}, error() {} };

/** `lock` with its acquires counted once answered (the real service underneath). */
export function countingLock<L extends RedisLockService>(
  lock: L,
): { lock: L; acquires: () => number } {
  let acquires = 0;
  const proxy = new Proxy(lock, {
    get(target, property) {
      // The engine acquires by the Redis key it derived already (ACQUIRE_KEY).
      if (property === 'acquire' || property === ACQUIRE_KEY) {
        const acquire = Reflect.get(target, property, target) as RedisLockService['acquire'];
        return async (...args: Parameters<RedisLockService['acquire']>) => {
          const result = await acquire.apply(target, args);
          acquires++;
          return result;
        };
      }
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return { lock: proxy, acquires: () => acquires };
}

const LOCK_COMMANDS: ReadonlySet<string> = new Set(['set', 'eval', 'evalsha']);

/**
 * `client` with its lock commands counted: `set` (an acquire) and `eval`/`evalsha` (a release, an
 * extension, or an acquire on an eval-only client), also inside pipelines; everything else passes
 * through.
 */
export function countingClient<C extends RedisScriptClient>(
  client: C,
): { client: C; calls: () => number } {
  let calls = 0;
  const proxy = new Proxy(client, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== 'function') return value;
      if (property === 'pipeline') {
        // The lock batches concurrent commands into one pipeline: count the lock commands in it.
        return (commands: readonly (readonly unknown[])[]) => {
          calls += commands.filter(([name]) => LOCK_COMMANDS.has(String(name))).length;
          return (value as (...a: unknown[]) => unknown).call(target, commands);
        };
      }
      if (LOCK_COMMANDS.has(String(property))) {
        return (...args: unknown[]) => {
          calls++;
          return (value as (...a: unknown[]) => unknown).apply(target, args);
        };
      }
      return (value as (...a: unknown[]) => unknown).bind(target);
    },
  });
  return { client: proxy, calls: () => calls };
}

/** Sleeps `ms`. */
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** How many connections Redis counts as SSUBSCRIBEd to `channel` now. */
export async function shardSubscribers(admin: Redis, channel: string): Promise<number> {
  const reply = (await admin.call('PUBSUB', 'SHARDNUMSUB', channel)) as [string, number];
  return Number(reply[1]);
}

/** The ids of the pub/sub connections the server has now (CLIENT LIST TYPE pubsub). */
export async function pubsubClients(admin: Redis): Promise<string[]> {
  const list = String(await admin.call('CLIENT', 'LIST', 'TYPE', 'pubsub'));
  return [...list.matchAll(/^id=(\d+)/gm)].map(([, id]) => id!);
}
