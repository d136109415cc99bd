import type { ScriptCommands } from '../redis/lua-script.js';
import { ExpiryQueue } from './expiry-queue.js';
import { DEFAULT_MAX_KEYS } from './memory-url.js';

/** Redis's strict integer syntax (string2ll): an optional minus, no leading zero, no sign or space. */
const INTEGER = /^(?:0|-?[1-9]\d*)$/;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

const replyError = (text: string): Error => new Error(text);

const NOT_AN_INTEGER = 'ERR value is not an integer or out of range';

/** `text` as a 64-bit integer, or `undefined` when Redis would not read it as one. */
function int64(text: string | undefined): bigint | undefined {
  if (text === undefined || !INTEGER.test(text)) return undefined;
  const value = BigInt(text);
  return value < INT64_MIN || value > INT64_MAX ? undefined : value;
}

/** A script that passes nil (a missing ARGV) gets Lua's refusal. */
function argument(value: string | undefined): string {
  if (typeof value !== 'string') {
    throw replyError('ERR Lua redis lib command arguments must be strings or integers');
  }
  return value;
}

interface Entry {
  value: string;
  /** Epoch ms after which the key is gone; `undefined`: no expiry. */
  expiresAt: number | undefined;
}

export interface ChannelListener {
  deliver(channel: string, message: string): void;
}

/**
 * The data of one in-memory Redis: string keys with millisecond expiry and sharded pub/sub
 * channels, answering the scripts' commands with Redis 7's replies, refusals and expiry rules (a
 * key lives through the millisecond its expiry names; a PEXPIRE to a time not in the future
 * deletes it). Expired keys are dropped at the next command, so one nobody reads costs nothing.
 * It holds `maxKeys` keys at most: a new one beyond evicts the least recently used, as Redis's
 * `allkeys-lru` does.
 */
export class MemoryKeyspace implements ScriptCommands {
  private readonly entries = new Map<string, Entry>();
  private readonly expiries = new ExpiryQueue();
  private readonly channels = new Map<string, Set<ChannelListener>>();
  /** The time of the script running now; `undefined` between commands. */
  private frozen: number | undefined;

  constructor(
    private readonly clock: () => number = Date.now,
    private readonly maxKeys: number = DEFAULT_MAX_KEYS,
  ) {}

  /** One atomic step at one instant, as Redis runs a script; keys expired before it go first. */
  atomically<T>(work: (commands: ScriptCommands) => T): T {
    if (this.frozen !== undefined) return work(this);
    this.frozen = this.clock();
    try {
      this.purge(this.frozen);
      return work(this);
    } finally {
      this.frozen = undefined;
    }
  }

  get(key: string): string | null {
    return this.live(argument(key))?.value ?? null;
  }

  set(key: string, value: string, ...options: string[]): 'OK' | null {
    let nx = false;
    let xx = false;
    let ms: number | undefined;
    for (const option of options) argument(option);
    for (let i = 0; i < options.length; i++) {
      const option = options[i]!.toUpperCase();
      if (option === 'NX' && !xx) nx = true;
      else if (option === 'XX' && !nx) xx = true;
      else if ((option === 'PX' || option === 'EX') && ms === undefined && i + 1 < options.length) {
        const amount = int64(options[++i]);
        if (amount === undefined) throw replyError(NOT_AN_INTEGER);
        const scaled = option === 'EX' ? amount * 1000n : amount;
        const at = BigInt(this.now()) + scaled;
        if (amount <= 0n || at > INT64_MAX) {
          throw replyError("ERR invalid expire time in 'set' command");
        }
        ms = Number(scaled);
      } else throw replyError('ERR syntax error');
    }
    const name = argument(key);
    const exists = this.live(name) !== undefined;
    if ((nx && exists) || (xx && !exists)) return null;
    this.write(name, argument(value), ms === undefined ? undefined : this.now() + ms);
    return 'OK';
  }

  del(key: string): number {
    const name = argument(key);
    if (this.live(name) === undefined) return 0;
    this.entries.delete(name);
    return 1;
  }

  pexpire(key: string, milliseconds: string): number {
    const amount = int64(argument(milliseconds));
    if (amount === undefined) throw replyError(NOT_AN_INTEGER);
    const at = BigInt(this.now()) + amount;
    if (at > INT64_MAX) {
      throw replyError("ERR invalid expire time in 'pexpire' command");
    }
    const name = argument(key);
    const entry = this.live(name);
    if (entry === undefined) return 0;
    if (at <= BigInt(this.now())) {
      this.entries.delete(name);
      return 1;
    }
    entry.expiresAt = Number(at);
    this.expire(name, entry.expiresAt);
    return 1;
  }

  pttl(key: string): number {
    const entry = this.live(argument(key));
    if (entry === undefined) return -2;
    if (entry.expiresAt === undefined) return -1;
    return Math.max(0, entry.expiresAt - this.now());
  }

  incr(key: string): number {
    const name = argument(key);
    const entry = this.live(name);
    const current = entry === undefined ? 0n : int64(entry.value);
    if (current === undefined) throw replyError(NOT_AN_INTEGER);
    if (current === INT64_MAX) throw replyError('ERR increment or decrement would overflow');
    const next = String(current + 1n);
    if (entry === undefined) this.write(name, next, undefined);
    else entry.value = next;
    return Number(next);
  }

  spublish(channel: string, message: string): number {
    const name = argument(channel);
    const listeners = this.channels.get(name);
    if (listeners === undefined) return 0;
    const text = argument(message);
    // Delivered after the script, as Redis writes the message out once the script is done.
    for (const listener of listeners) queueMicrotask(() => listener.deliver(name, text));
    return listeners.size;
  }

  time(): [string, string] {
    const ms = Math.floor(this.now());
    return [String(Math.floor(ms / 1000)), String((ms % 1000) * 1000)];
  }

  exists(key: string): number {
    return this.live(argument(key)) === undefined ? 0 : 1;
  }

  dbsize(): number {
    this.purge(this.now());
    return this.entries.size;
  }

  subscribe(channel: string, listener: ChannelListener): void {
    const name = argument(channel);
    let listeners = this.channels.get(name);
    if (listeners === undefined) this.channels.set(name, (listeners = new Set()));
    listeners.add(listener);
  }

  unsubscribe(channel: string, listener: ChannelListener): void {
    const name = argument(channel);
    const listeners = this.channels.get(name);
    if (listeners?.delete(listener) && listeners.size === 0) this.channels.delete(name);
  }

  private now(): number {
    return this.frozen ?? this.clock();
  }

  /** Lazy expiry: an expired entry is deleted when read. */
  private live(name: string): Entry | undefined {
    const entry = this.entries.get(name);
    if (entry === undefined) return undefined;
    if (entry.expiresAt !== undefined && this.now() > entry.expiresAt) {
      this.entries.delete(name);
      return undefined;
    }
    // A Map keeps its order of insertion: the least recently used key comes first.
    this.entries.delete(name);
    this.entries.set(name, entry);
    return entry;
  }

  private write(name: string, value: string, expiresAt: number | undefined): void {
    this.entries.delete(name);
    this.entries.set(name, { value, expiresAt });
    if (this.entries.size > this.maxKeys) this.entries.delete(this.entries.keys().next().value!);
    if (expiresAt !== undefined) this.expire(name, expiresAt);
  }

  // Expiries of keys deleted or set again stay queued until their time: rebuilt when they are most.
  private expire(name: string, at: number): void {
    this.expiries.add(name, at);
    if (this.expiries.size <= 2 * this.entries.size + 1024) return;
    this.expiries.clear();
    for (const [key, entry] of this.entries) {
      if (entry.expiresAt !== undefined) this.expiries.add(key, entry.expiresAt);
    }
  }

  private purge(now: number): void {
    for (let due = this.expiries.takeDue(now); due; due = this.expiries.takeDue(now)) {
      const entry = this.entries.get(due.key);
      // A key set again or given another expiry since has a later entry of its own in the queue.
      if (entry !== undefined && entry.expiresAt === due.at) this.entries.delete(due.key);
    }
  }
}
