'use strict';
// A CommonJS app that uses the packed library the way a CommonJS user would: require() of the
// ES module (on by default from Node 20.19 and 22.12), a Nest application context importing
// BufferLockModule with a provider of its own that injects RedisLockService, and the lock
// against the Redis at REDIS_URL, from the module and on its own with `new`. Decorators are
// applied as functions (CommonJS JavaScript has no decorator syntax). Prints one JSON line with
// what it saw; exits 1 on any failure. The `nestjs-buffer-lock/terminus` entry is required too,
// and its health indicator checks the same Redis in an app context with TerminusModule.
require('reflect-metadata');
const assert = require('node:assert/strict');
const { Inject, Injectable, Module } = require('@nestjs/common');
const { NestFactory } = require('@nestjs/core');
const { Redis } = require('ioredis');
const { TerminusModule } = require('@nestjs/terminus');
const library = require('nestjs-buffer-lock');
const terminus = require('nestjs-buffer-lock/terminus');

const { BufferLockModule, LockError, RedisLockService } = library;
const url = process.env.REDIS_URL;

/** Builds the nightly report on one worker at a time: 'built', or 'busy' when another holds it. */
class NightlyReport {
  constructor(lock) {
    this.lock = lock;
  }

  async run(build) {
    const [guard, error] = await this.lock.acquire('nightly-report');
    if (error) throw error;
    if (!guard) return 'busy';
    try {
      await build();
    } finally {
      await this.lock.release(guard);
    }
    return 'built';
  }
}
Injectable()(NightlyReport);
Inject(RedisLockService)(NightlyReport, undefined, 0);

// oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class carries only metadata
class AppModule {}
Module({
  imports: [BufferLockModule.forRoot({ redis: url, namespace: 'cjs-app:' })],
  providers: [NightlyReport],
})(AppModule);

async function main() {
  const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
  const report = app.get(NightlyReport);
  const { lock } = report;
  assert.ok(lock instanceof RedisLockService);
  assert.equal(lock, app.get(RedisLockService));

  // A second service with its own client, as another worker would have.
  const client = new Redis(url);
  const other = new RedisLockService({ redis: () => client, namespace: 'cjs-app:' });
  const outcome = await report.run(async () => {
    assert.equal(await report.run(async () => assert.fail('built twice')), 'busy');
    assert.deepEqual(await other.acquire('nightly-report'), [undefined, undefined]);
  });
  assert.equal(outcome, 'built');

  const [guard, error] = await lock.acquire('nightly-report');
  assert.equal(error, undefined);
  assert.equal(typeof guard.token, 'string');
  assert.deepEqual(await lock.release(guard), [true, undefined]);
  const [taken] = await other.acquire('nightly-report');
  assert.equal(typeof taken.token, 'string');
  // A stale guard: its release succeeds and leaves the new holder's lock alone.
  assert.deepEqual(await lock.release(guard), [true, undefined]);
  assert.deepEqual(await lock.extend(guard), [false, undefined]);
  assert.deepEqual(await lock.acquire('nightly-report'), [undefined, undefined]);
  assert.deepEqual(await other.release(taken), [true, undefined]);
  const [invalid, invalidError] = await lock.release({});
  assert.equal(invalid, false);
  assert.ok(invalidError instanceof LockError);

  await client.quit();
  await app.close();
  const health = await checkHealth();
  console.log(
    JSON.stringify({
      node: process.version,
      requireModule: process.features.require_module === true,
      resolved: require.resolve('nestjs-buffer-lock'),
      version: require('nestjs-buffer-lock/package.json').version,
      exports: Object.keys(library).toSorted(),
      terminusResolved: require.resolve('nestjs-buffer-lock/terminus'),
      terminusExports: Object.keys(terminus).toSorted(),
      health,
      keysLeft: await countKeys(url),
    }),
  );
}

/** What BufferLockHealthIndicator reports in an app context with TerminusModule. */
async function checkHealth() {
  // oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class carries only metadata
  class HealthModule {}
  Module({
    imports: [BufferLockModule.forRoot({ redis: url, namespace: 'cjs-app:' }), TerminusModule],
    providers: [terminus.BufferLockHealthIndicator],
  })(HealthModule);
  const context = await NestFactory.createApplicationContext(HealthModule, { logger: false });
  try {
    const indicator = context.get(terminus.BufferLockHealthIndicator);
    const result = await indicator.isHealthy();
    return result['buffer-lock'];
  } finally {
    await context.close();
  }
}

/** Keys left under the app's namespace: none once every lock is released. */
async function countKeys(redisUrl) {
  const admin = new Redis(redisUrl);
  try {
    return (await admin.keys('cjs-app:*')).length;
  } finally {
    await admin.quit();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1); // open clients would keep a failed run alive
});
