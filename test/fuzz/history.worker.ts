/**
 * A worker process of the history run (test/fuzz/history.run.ts): for each round, a Nest
 * application context with BufferLockModule.forRoot on the round's Redis, store and `l1`, whose
 * factories read a versioned source of truth (a hash in another redis-server), driven over IPC.
 * Each call is answered with its start and end on the shared clock.
 */
/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import 'reflect-metadata';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import KeyvRedis from '@keyv/redis';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cluster, Redis } from 'ioredis';
import Keyv from 'keyv';
import { BufferCache, BufferLockModule, CacheEvict, CachePut, Cached } from '../../lib/index.js';
import type { RowValue } from './history-checker.js';
import {
  keyOf,
  keySpec,
  rowKeys,
  rowTag,
  sharedClock,
  type Call,
  type FleetSetup,
  type HistoryCommand,
  type HistoryReply,
} from './history.protocol.js';

const send = (reply: HistoryReply): void => void process.send!(reply);
const now = sharedClock;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

let counter = 0;
let source: Redis | undefined;

const versionOf = async (row: string): Promise<number> =>
  Number((await source!.hget('rows', row)) ?? 0);
const bump = (row: string): Promise<number> => source!.hincrby('rows', row, 1);

/** A factory's value: the row's version read after `madeAt`, then `buildMs` of work. */
async function build(row: string, buildMs: number): Promise<RowValue> {
  const madeAt = now();
  const version = await versionOf(row);
  if (buildMs > 0) await sleep(buildMs);
  return { row, version, id: `${process.pid}:${++counter}`, origin: 'build', madeAt };
}

/** A writer's value: the row bumped, the new version. */
async function written(row: string): Promise<RowValue> {
  const madeAt = now();
  const version = await bump(row);
  return { row, version, id: `${process.pid}:${++counter}`, origin: 'write', madeAt };
}

/** What a call made before it could fail: a write's value, the row and version it bumped. */
interface Made {
  wrote?: RowValue;
  row?: string;
  version?: number;
}

/** The decorated methods: `@Cached` reads, `@CachePut` writes, `@CacheEvict` row writes. */
@Injectable()
class Rows {
  @Cached((row: string) => keyOf(row, 'a'), {
    ttl: 30,
    tags: (row: string) => [...keySpec(keyOf(row, 'a')).tags],
  })
  async cachedA(row: string, buildMs: number): Promise<RowValue> {
    return build(row, buildMs);
  }

  @CachePut((row: string) => keyOf(row, 'a'), {
    ttl: 30,
    tags: (row: string) => [...keySpec(keyOf(row, 'a')).tags],
  })
  async putA(row: string, made: Made): Promise<RowValue> {
    return (made.wrote = await written(row));
  }

  @CachePut((row: string) => keyOf(row, 'c'), { ttl: 30 })
  async putC(row: string, made: Made): Promise<RowValue> {
    return (made.wrote = await written(row));
  }

  @CacheEvict((row: string) => rowKeys(row))
  async evictKeys(row: string): Promise<number> {
    return bump(row);
  }

  @CacheEvict([], { tags: (row: string) => [rowTag(row)] })
  async evictTag(row: string): Promise<number> {
    return bump(row);
  }
}

let cache: BufferCache;
let rows: Rows;

/** A fail-fast Cluster client, once ready (as test/faults/cluster.spec.ts makes them). */
async function cluster(ports: readonly number[]): Promise<Cluster> {
  const client = new Cluster(
    ports.map((port) => ({ host: '127.0.0.1', port })),
    {
      enableOfflineQueue: false,
      retryDelayOnFailover: 0,
      retryDelayOnClusterDown: 0,
      redisOptions: { commandTimeout: 1000, maxRetriesPerRequest: 1, connectTimeout: 2000 },
    },
  );
  client.on('error', () => {});
  if (client.status !== 'ready') await new Promise((resolve) => client.once('ready', resolve));
  return client;
}

async function open(setup: FleetSetup): Promise<void> {
  const ports = setup.clusterPorts;
  source ??= new Redis(setup.sourceUrl);
  const keyv =
    setup.store === 'keyv' ? new Keyv({ store: new KeyvRedis(setup.redisUrl) }) : undefined;
  keyv?.on('error', () => {});
  @Module({
    imports: [
      BufferLockModule.forRoot({
        redis: ports ? () => cluster(ports) : setup.redisUrl,
        namespace: setup.namespace,
        cachePrefix: `${setup.namespace}c:`,
        logger: { log() {}, warn() {}, error() {} },
        lockTimeout: 3,
        ...(keyv ? { cache: keyv } : {}),
        ...(setup.l1MaxAge === undefined ? {} : { l1: { maxAge: setup.l1MaxAge } }),
        ...(setup.writeReplicas === undefined
          ? {}
          : { writeReplicas: { replicas: setup.writeReplicas, timeout: 1 } }),
      }),
    ],
    providers: [Rows],
  })
  class RoundModule {}
  const app = await NestFactory.createApplicationContext(RoundModule, { logger: false });
  cache = app.get(BufferCache);
  rows = app.get(Rows);
  // Connected (and the scripts loaded) before the parent fires.
  await cache.get('warm-up');
}

/** Makes `call`: a read's value, or what a write made, into `made` (kept when the call fails). */
async function perform(call: Call, made: Made): Promise<RowValue | null | undefined> {
  switch (call.call) {
    case 'get':
      return (await cache.get<RowValue>(call.key)) ?? null;
    case 'getOrSet': {
      const { row, tags, ttl, grace } = keySpec(call.key);
      const options = { ttl, grace, tags: [...tags] };
      return cache.getOrSet(call.key, () => build(row, call.buildMs), options);
    }
    case 'cached':
      return rows.cachedA(keySpec(call.key).row, call.buildMs);
    case 'set': {
      const { row, tags, ttl, grace } = keySpec(call.key);
      const value = (made.wrote = await written(row));
      Object.assign(made, { row, version: value.version });
      await cache.set(call.key, value, { ttl, grace, tags: [...tags] });
      return undefined;
    }
    case 'put': {
      const { row, view } = keySpec(call.key);
      made.row = row;
      await (view === 'a' ? rows.putA(row, made) : rows.putC(row, made));
      made.version = made.wrote!.version;
      return undefined;
    }
    case 'delete': {
      made.row = keySpec(call.key).row;
      made.version = await bump(made.row);
      await cache.delete(call.key);
      return undefined;
    }
    case 'deleteByTag': {
      if (call.tag.startsWith('row:')) {
        made.row = call.tag.slice('row:'.length);
        made.version = await bump(made.row);
      }
      await cache.deleteByTag(call.tag);
      return undefined;
    }
    case 'evictKeys':
      made.row = call.row;
      made.version = await rows.evictKeys(call.row);
      return undefined;
    case 'evictTag':
      made.row = call.row;
      made.version = await rows.evictTag(call.row);
      return undefined;
  }
}

// How long this process may leave what it received unhandled: see `in-flight-to-reader`.
const loopDelay = monitorEventLoopDelay({ resolution: 1 });
loopDelay.enable();

async function handle(command: HistoryCommand): Promise<void> {
  if (command.cmd === 'open') {
    await open(command);
    loopDelay.reset();
    return send({ id: command.id, done: true });
  }
  if (command.cmd === 'lag') return send({ id: command.id, lagMs: loopDelay.max / 1e6 });
  if (command.cmd === 'clock') return send({ id: command.id, clock: now() });
  const start = now();
  const made: Made = {};
  try {
    const value = await perform(command, made);
    send({
      id: command.id,
      start,
      end: now(),
      ok: true,
      ...made,
      ...(value === undefined ? {} : { value }),
    });
  } catch (error) {
    const text = error instanceof Error ? error.message : String(error);
    send({ id: command.id, start, end: now(), ok: false, failure: text, ...made });
  }
}

process.on('message', (command: HistoryCommand) => {
  void handle(command).catch((error: unknown) =>
    send({ id: command.id, error: error instanceof Error ? error.stack! : String(error) }),
  );
});
// The parent's SIGTERM or its exit ends this worker, and every round's context with it.
process.on('disconnect', () => process.exit(0));

send({ ready: true, pid: process.pid });
