import { describe, expect, it } from 'vitest';
import { MemoryKeyspace } from '../../lib/memory/keyspace.js';
import { ExpiryQueue } from '../../lib/memory/expiry-queue.js';

/** The text `run` was refused with, or `undefined` when it was not refused. */
function refusal(run: () => unknown): string | undefined {
  try {
    run();
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}

/** A keyspace on a clock the test moves by hand. */
function keyspaceAt(start = 1_000_000): { keyspace: MemoryKeyspace; clock: { now: number } } {
  const clock = { now: start };
  return { keyspace: new MemoryKeyspace(() => clock.now), clock };
}

describe('the in-memory keyspace: expiry to the millisecond, as Redis keeps it', () => {
  it('a key set with PX n lives through its last millisecond, PTTL counting down to 0, and is gone one later', () => {
    const { keyspace, clock } = keyspaceAt();
    expect(keyspace.set('k', 'v', 'PX', '100')).toBe('OK');
    expect(keyspace.pttl('k')).toBe(100);
    clock.now += 60;
    expect(keyspace.pttl('k')).toBe(40);
    clock.now += 40;
    expect([keyspace.get('k'), keyspace.pttl('k')]).toEqual(['v', 0]);
    clock.now += 1;
    expect([keyspace.get('k'), keyspace.pttl('k'), keyspace.exists('k')]).toEqual([null, -2, 0]);
  });

  it('an expired key is free for SET NX, not there for DEL, and PEXPIRE finds nothing', () => {
    const { keyspace, clock } = keyspaceAt();
    keyspace.set('k', 'old', 'PX', '10');
    expect(keyspace.set('k', 'busy', 'NX', 'PX', '10')).toBeNull();
    clock.now += 11;
    expect(keyspace.del('k')).toBe(0);
    expect(keyspace.pexpire('k', '1000')).toBe(0);
    expect(keyspace.set('k', 'new', 'NX', 'PX', '10')).toBe('OK');
    expect(keyspace.get('k')).toBe('new');
  });

  it('PEXPIRE moves the expiry; to a time not in the future it deletes the key and answers 1', () => {
    const { keyspace, clock } = keyspaceAt();
    keyspace.set('k', 'v', 'PX', '100');
    expect(keyspace.pexpire('k', '500')).toBe(1);
    clock.now += 400;
    expect(keyspace.pttl('k')).toBe(100);
    expect(keyspace.pexpire('k', '0')).toBe(1);
    expect(keyspace.exists('k')).toBe(0);
    keyspace.set('j', 'v');
    expect(keyspace.pexpire('j', '-5')).toBe(1);
    expect(keyspace.exists('j')).toBe(0);
  });

  it('a key without expiry answers PTTL -1; INCR keeps a key’s expiry and counts a missing one from 0', () => {
    const { keyspace, clock } = keyspaceAt();
    expect(keyspace.incr('n')).toBe(1);
    expect(keyspace.pttl('n')).toBe(-1);
    keyspace.set('m', '41', 'PX', '50');
    expect(keyspace.incr('m')).toBe(42);
    expect(keyspace.pttl('m')).toBe(50);
    clock.now += 51;
    expect(keyspace.incr('m')).toBe(1);
    expect(keyspace.pttl('m')).toBe(-1);
  });

  it('one script sees one instant: a key that expires during it is still there at its end', () => {
    const { keyspace, clock } = keyspaceAt();
    keyspace.set('k', 'v', 'PX', '5');
    const seen = keyspace.atomically((redis) => {
      const first = redis.get('k');
      clock.now += 100;
      return [first, redis.get('k'), redis.pttl('k')];
    });
    expect(seen).toEqual(['v', 'v', 5]);
    expect(keyspace.get('k')).toBeNull();
  });

  it('refuses what Redis refuses, with its words', () => {
    const { keyspace } = keyspaceAt();
    expect(refusal(() => keyspace.set('k', 'v', 'PX', '0'))).toBe(
      "ERR invalid expire time in 'set' command",
    );
    expect(refusal(() => keyspace.set('k', 'v', 'PX', '1.5'))).toBe(
      'ERR value is not an integer or out of range',
    );
    expect(refusal(() => keyspace.set('k', 'v', 'NX', 'XX'))).toBe('ERR syntax error');
    expect(refusal(() => keyspace.set('k', 'v', 'PX'))).toBe('ERR syntax error');
    keyspace.set('t', 'not a number');
    expect(refusal(() => keyspace.incr('t'))).toBe('ERR value is not an integer or out of range');
    keyspace.set('max', '9223372036854775807');
    expect(refusal(() => keyspace.incr('max'))).toBe('ERR increment or decrement would overflow');
    expect(refusal(() => keyspace.pexpire('t', '9223372036854775807'))).toBe(
      "ERR invalid expire time in 'pexpire' command",
    );
  });
});

describe('the in-memory keyspace: keys nobody reads again do not stay in memory', () => {
  it('10 000 keys that expired unread are dropped at the next command', () => {
    const { keyspace, clock } = keyspaceAt();
    for (let i = 0; i < 10_000; i++) keyspace.set(`k${i}`, 'v', 'PX', String(1 + (i % 50)));
    keyspace.set('stays', 'v');
    expect(keyspace.dbsize()).toBe(10_001);
    clock.now += 51;
    keyspace.atomically((redis) => redis.get('stays'));
    expect(keyspace.dbsize()).toBe(1);
  });

  it('a key given a later expiry, or set again without one, is not dropped at its old expiry', () => {
    const { keyspace, clock } = keyspaceAt();
    keyspace.set('extended', 'v', 'PX', '10');
    keyspace.pexpire('extended', '1000');
    keyspace.set('kept', 'v', 'PX', '10');
    keyspace.set('kept', 'w');
    clock.now += 20;
    keyspace.atomically(() => undefined);
    expect([keyspace.get('extended'), keyspace.get('kept'), keyspace.dbsize()]).toEqual([
      'v',
      'w',
      2,
    ]);
  });

  it('the expiry queue gives expiries in time order, only those before now', () => {
    const queue = new ExpiryQueue();
    const times = Array.from({ length: 200 }, (_, i) => (i * 7919) % 1000);
    times.forEach((at, i) => queue.add(`k${i}`, at));
    const out: number[] = [];
    for (let due = queue.takeDue(500); due; due = queue.takeDue(500)) out.push(due.at);
    expect(out).toEqual(times.filter((at) => at < 500).toSorted((a, b) => a - b));
    let left = 0;
    while (queue.takeDue(Infinity)) left++;
    expect(left).toBe(times.filter((at) => at >= 500).length);
  });
});
