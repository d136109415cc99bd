import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { RedisScriptClient, SubscriberConnection } from '../types/clients.js';
import { definedScript, type LuaScript } from '../redis/lua-script.js';
import { MemoryKeyspace, type ChannelListener } from './keyspace.js';
import { memoryUrlMaxKeys, memoryUrlName, type MemoryUrl } from './memory-url.js';

/** Redis's strict integer syntax, for the number of keys of EVAL and EVALSHA. */
const INTEGER = /^(?:0|-?[1-9]\d*)$/;

/** What ioredis rejects a command on a closed connection with. */
const CONNECTION_CLOSED = 'Connection is closed.';

// String.prototype.toWellFormed is ES2024; the library compiles against ES2023.
type WellFormed = string & { isWellFormed(): boolean; toWellFormed(): string };

/** An argument as ioredis sends it: numbers as decimal text, a lone surrogate as U+FFFD (UTF-8). */
function asSent(argument: string | number): string {
  const text = String(argument) as WellFormed;
  return text.isWellFormed() ? text : text.toWellFormed();
}

const refuse = (text: string): Promise<never> => Promise.reject(new Error(text));

/**
 * The ioredis-shaped client of `memory://`, in this process only: EVAL and EVALSHA run the
 * JavaScript twin of one of the library's own scripts (any other is refused, EVALSHA with
 * NOSCRIPT), with Redis's replies and error texts, as a promise. It has no `pipeline()`: there is
 * no round trip to save. `get`, `pttl`, `exists`, `del` and `dbsize` let tests look at the keys.
 */
export class MemoryClient implements RedisScriptClient {
  readonly isCluster = false;
  private closed = false;

  constructor(readonly keyspace: MemoryKeyspace = new MemoryKeyspace()) {}

  eval(script: string, numkeys: number, ...args: (string | number)[]): Promise<unknown> {
    const known = definedScript(createHash('sha1').update(String(script)).digest('hex'));
    if (known === undefined) {
      return refuse('ERR the in-memory backend runs only the scripts of nestjs-buffer-lock');
    }
    return this.run(known, numkeys, args);
  }

  evalsha(sha: string, numkeys: number, ...args: (string | number)[]): Promise<unknown> {
    const known = definedScript(String(sha).toLowerCase());
    if (known === undefined) return refuse('NOSCRIPT No matching script. Please use EVAL.');
    return this.run(known, numkeys, args);
  }

  set(key: string, value: string, ...options: (string | number)[]): Promise<unknown> {
    return this.command((k) => k.set(asSent(key), asSent(value), ...options.map(asSent)));
  }

  get(key: string): Promise<string | null> {
    return this.command((k) => k.get(asSent(key)));
  }

  pttl(key: string): Promise<number> {
    return this.command((k) => k.pttl(asSent(key)));
  }

  exists(key: string): Promise<number> {
    return this.command((k) => k.exists(asSent(key)));
  }

  del(key: string): Promise<number> {
    return this.command((k) => k.del(asSent(key)));
  }

  dbsize(): Promise<number> {
    return this.command((k) => k.dbsize());
  }

  ping(): Promise<string> {
    return this.command(() => 'PONG');
  }

  /** The release subscriber's pub/sub connection, on the same keyspace. */
  duplicate(): MemorySubscriber {
    return new MemorySubscriber(this.keyspace);
  }

  quit(): Promise<'OK'> {
    if (this.closed) return refuse(CONNECTION_CLOSED);
    this.closed = true;
    return Promise.resolve('OK');
  }

  disconnect(): void {
    this.closed = true;
  }

  private run(
    script: LuaScript,
    numkeys: number,
    args: readonly (string | number)[],
  ): Promise<unknown> {
    const count = String(numkeys);
    if (!INTEGER.test(count)) return refuse('ERR value is not an integer or out of range');
    const keys = Number(count);
    if (keys > args.length)
      return refuse("ERR Number of keys can't be greater than number of args");
    if (keys < 0) return refuse("ERR Number of keys can't be negative");
    const texts = args.map(asSent);
    return this.command((k) => script.twin(k, texts.slice(0, keys), texts.slice(keys)));
  }

  private command<T>(work: (keyspace: MemoryKeyspace) => T): Promise<T> {
    if (this.closed) return refuse(CONNECTION_CLOSED);
    try {
      return Promise.resolve(this.keyspace.atomically(() => work(this.keyspace)));
    } catch (error) {
      return Promise.reject(error);
    }
  }
}

/**
 * SSUBSCRIBE and SUNSUBSCRIBE on a keyspace's channels, an `'smessage'` for each SPUBLISH there;
 * once disconnected, no more messages and a rejection for every command, as ioredis does.
 */
export class MemorySubscriber
  extends EventEmitter
  implements SubscriberConnection, ChannelListener
{
  private readonly subscribed = new Set<string>();
  private closed = false;

  constructor(private readonly keyspace: MemoryKeyspace) {
    super();
  }

  /** Resolves how many channels the connection is subscribed to after it, as Redis answers. */
  ssubscribe(...channels: string[]): Promise<unknown> {
    if (this.closed) return refuse(CONNECTION_CLOSED);
    for (const channel of channels.map(asSent)) {
      this.subscribed.add(channel);
      this.keyspace.subscribe(channel, this);
    }
    return Promise.resolve(this.subscribed.size);
  }

  sunsubscribe(...channels: string[]): Promise<unknown> {
    if (this.closed) return refuse(CONNECTION_CLOSED);
    const leaving = channels.length > 0 ? channels.map(asSent) : [...this.subscribed];
    for (const channel of leaving) {
      this.subscribed.delete(channel);
      this.keyspace.unsubscribe(channel, this);
    }
    return Promise.resolve(this.subscribed.size);
  }

  /** Messages still on their way are dropped. */
  disconnect(): void {
    if (this.closed) return;
    this.closed = true;
    for (const channel of this.subscribed) this.keyspace.unsubscribe(channel, this);
    this.subscribed.clear();
    this.emit('close');
  }

  deliver(channel: string, message: string): void {
    if (!this.closed) this.emit('smessage', channel, message);
  }
}

/** The keyspaces of `memory://NAME`, one per name for the life of the process. */
const named = new Map<string, MemoryKeyspace>();

/**
 * A client on a keyspace of its own for `memory://`, on the process's one of that name else (its
 * first URL sets its `maxKeys`).
 */
export function memoryClient(url: MemoryUrl): MemoryClient {
  const name = memoryUrlName(url);
  const make = (): MemoryKeyspace => new MemoryKeyspace(Date.now, memoryUrlMaxKeys(url));
  if (name === '') return new MemoryClient(make());
  let keyspace = named.get(name);
  if (keyspace === undefined) named.set(name, (keyspace = make()));
  return new MemoryClient(keyspace);
}
