'use strict';
// A CommonJS app without ioredis: it loads the packed library and locks through node-redis, once
// with the client as it is and once behind an object with eval() only, and on memory:// with no
// client at all. Asking the library to build a client from a URL fails with redis_client_missing.
// Prints one JSON line with what it saw; exits 1 on any failure.
require('reflect-metadata');
const assert = require('node:assert/strict');
const { createClient } = require('redis');
const { Logger } = require('@nestjs/common');
const { connectFailFast, LockError, RedisLockService } = require('nestjs-buffer-lock');

/** What the library logged through the Nest Logger (the memory:// start-up line). */
const logged = [];
Logger.overrideLogger({
  log: (text) => logged.push(String(text)),
  warn: (text) => logged.push(String(text)),
  error: (text) => logged.push(String(text)),
});

const url = process.env.REDIS_URL;

/** Acquires and releases `key` through `lock`; answers whether both did what they should. */
async function lockOnce(lock, key) {
  const [guard, error] = await lock.acquire(key);
  assert.equal(error, undefined);
  assert.deepEqual(await lock.acquire(key), [undefined, undefined]);
  assert.deepEqual(await lock.release(guard), [true, undefined]);
  return typeof guard.token === 'string';
}

async function main() {
  let ioredisFound = true;
  try {
    require.resolve('ioredis');
  } catch {
    ioredisFound = false;
  }
  const client = createClient({ url });
  client.on('error', () => {});
  await client.connect();
  const evalOnly = {
    eval: (script, numkeys, ...args) =>
      client.eval(script, {
        keys: args.slice(0, numkeys).map(String),
        arguments: args.slice(numkeys).map(String),
      }),
  };
  const nodeRedis = await lockOnce(
    new RedisLockService({ redis: client, namespace: 'no-io:' }),
    'a',
  );
  const scripts = await lockOnce(
    new RedisLockService({ redis: evalOnly, namespace: 'no-io:' }),
    'b',
  );

  const memory = await lockOnce(new RedisLockService({ redis: 'memory://' }), 'm');

  const byUrl = new RedisLockService({ redis: () => connectFailFast(url), namespace: 'no-io:' });
  const [none, missing] = await byUrl.acquire('c');
  assert.equal(none, undefined);
  assert.ok(missing instanceof LockError);
  const direct = await connectFailFast(url).then(
    () => undefined,
    (error) => error,
  );
  assert.ok(direct instanceof LockError);

  const keysLeft = (await client.keys('no-io:*')).length;
  client.destroy();
  console.log(
    JSON.stringify({
      ioredisFound,
      nodeRedis,
      scripts,
      memory,
      logged,
      missing: { code: missing.code, message: missing.message },
      direct: { code: direct.code, message: direct.message },
      keysLeft,
    }),
  );
}

main().catch((error) => {
  console.error(error);
  process.exit(1); // open clients would keep a failed run alive
});
