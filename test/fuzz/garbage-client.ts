import fc from 'fast-check';
import { anyValue, throwingThenable } from './fuzz.js';

/**
 * A client that answers garbage: how each command of a misbehaving client replies. Only for
 * testing how the library treats such a client; behaviour against Redis is tested on a real
 * redis-server.
 */
export type Reply =
  | { readonly kind: 'value' | 'resolve' | 'reject' | 'throw'; readonly value: unknown }
  | { readonly kind: 'never' }
  | { readonly kind: 'late'; readonly ms: number; readonly value: unknown }
  | {
      readonly kind: 'thenable';
      readonly how: 'resolve' | 'reject' | 'throw' | 'never' | 'twice';
      readonly value: unknown;
    };

/** The answers Redis itself gives to the lock's commands, and an ioredis NOSCRIPT error. */
const redisLike = fc.constantFrom<unknown>(
  'OK',
  null,
  0,
  1,
  7,
  'PONG',
  new Error('NOSCRIPT No matching script. Please use EVAL.'),
  new Error('Command timed out'),
);
/** `exec()` answers of a pipeline: arrays of `[error, reply]` pairs, well or badly formed. */
const pipelineAnswer = fc.array(
  fc.oneof(
    fc.tuple(fc.constant(null), fc.oneof(redisLike, anyValue)),
    fc.tuple(fc.oneof(redisLike, anyValue), anyValue),
    anyValue,
  ),
  { maxLength: 4 },
);
const garbage: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: redisLike },
  { weight: 3, arbitrary: anyValue },
  { weight: 1, arbitrary: pipelineAnswer },
  { weight: 1, arbitrary: fc.constant(null).map(throwingThenable) },
);

export const reply: fc.Arbitrary<Reply> = fc.oneof(
  fc.record({
    kind: fc.constantFrom(
      'value' as const,
      'resolve' as const,
      'reject' as const,
      'throw' as const,
    ),
    value: garbage,
  }),
  fc.constant({ kind: 'never' as const }),
  fc.record({
    kind: fc.constant('late' as const),
    ms: fc.integer({ min: 1, max: 40 }),
    value: garbage,
  }),
  fc.record({
    kind: fc.constant('thenable' as const),
    how: fc.constantFrom(
      'resolve' as const,
      'reject' as const,
      'throw' as const,
      'never' as const,
      'twice' as const,
    ),
    value: garbage,
  }),
);

/** Which methods the client has besides `eval`, and whether it looks like ioredis. */
export interface ClientShape {
  readonly evalsha: boolean;
  readonly set: boolean;
  readonly ioredis: boolean;
  readonly extras: boolean;
}

export const clientShape: fc.Arbitrary<ClientShape> = fc.record({
  evalsha: fc.boolean(),
  set: fc.boolean(),
  ioredis: fc.boolean(),
  extras: fc.boolean(),
});

/** What the fake client did: commands answered, and the timers and listeners it keeps. */
export interface GarbageClient {
  readonly client: Record<string, unknown>;
  /** Listeners the library added with `on` and has not taken off. */
  readonly listeners: () => number;
  /** Stops every pending 'late' and command-timeout timer. */
  readonly stop: () => void;
}

/**
 * A client whose every command answers with the next of `replies` (round and round). A `never`
 * reply is, as in ioredis with `commandTimeout`, rejected after `commandTimeoutMs`.
 */
export function garbageClient(
  shape: ClientShape,
  replies: readonly Reply[],
  commandTimeoutMs: number,
): GarbageClient {
  let next = 0;
  const timers = new Set<NodeJS.Timeout>();
  const later = (ms: number, run: () => void): void => {
    const timer = setTimeout(() => {
      timers.delete(timer);
      run();
    }, ms);
    timers.add(timer);
  };
  const timedOut = (): Promise<never> =>
    new Promise((_, reject) =>
      later(commandTimeoutMs, () => reject(new Error('Command timed out'))),
    );
  const answer = (): unknown => {
    const r = replies.length ? replies[next++ % replies.length]! : ({ kind: 'never' } as const);
    switch (r.kind) {
      case 'value':
        return r.value;
      case 'resolve':
        return Promise.resolve(r.value);
      case 'reject':
        return Promise.reject(r.value);
      case 'throw':
        throw r.value;
      case 'never':
        return timedOut();
      case 'late':
        return new Promise((resolve) => later(r.ms, () => resolve(r.value)));
      case 'thenable':
        return {
          // oxlint-disable-next-line unicorn/no-thenable -- a misbehaving client's thenable
          then(resolve: (v: unknown) => void, reject: (e: unknown) => void): void {
            if (r.how === 'throw') throw r.value;
            if (r.how === 'never') {
              later(commandTimeoutMs, () => reject(new Error('Command timed out')));
              return;
            }
            if (r.how === 'reject') reject(r.value);
            else resolve(r.value);
            if (r.how === 'twice') {
              resolve(r.value);
              reject(r.value);
            }
          },
        };
    }
  };
  const listening = new Set<unknown>();
  const client: Record<string, unknown> = { eval: () => answer() };
  if (shape.evalsha) client.evalsha = () => answer();
  if (shape.set) client.set = () => answer();
  if (shape.ioredis) {
    Object.assign(client, {
      evalsha: () => answer(),
      set: () => answer(),
      pipeline: () => ({ exec: () => answer() }),
      options: {},
      status: 'ready',
      isCluster: false,
    });
  }
  if (shape.extras) {
    Object.assign(client, {
      get: () => answer(),
      ping: () => answer(),
      publish: () => answer(),
      duplicate: () => answer(),
      on: (_event: string, listener: unknown) => void listening.add(listener),
      off: (_event: string, listener: unknown) => void listening.delete(listener),
    });
  }
  return {
    client,
    listeners: () => listening.size,
    stop: () => {
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
    },
  };
}
