import type { INestApplication, Type } from '@nestjs/common';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { BufferLockModule, type BufferLockOptions } from '../../lib/index.js';
import type { RedisServer } from './redis-server.js';

/** Express's `Response` and Fastify's `FastifyReply` both have these. */
export interface PlatformResponse {
  status(code: number): unknown;
  header(name: string, value: string): unknown;
}

export interface Platform {
  readonly name: string;
  readonly adapter: () => ExpressAdapter | FastifyAdapter;
}

export const PLATFORMS: Platform[] = [
  { name: 'Express', adapter: () => new ExpressAdapter() },
  { name: 'Fastify', adapter: () => new FastifyAdapter() },
];

/** Apps started by `startApp`, closed by `closeApps`. */
const opened: INestApplication[] = [];

/** An app of `controllers` on `platform`, listening on a free port; resolves to its URL. */
export async function startApp(
  platform: Platform,
  server: RedisServer,
  controllers: Type[],
  options: Partial<BufferLockOptions> & { namespace: string },
): Promise<{ url: string; nest: INestApplication }> {
  const ref = await Test.createTestingModule({
    imports: [BufferLockModule.forRoot({ redis: () => server.client(), ...options })],
    controllers,
  }).compile();
  const nest = ref.createNestApplication(platform.adapter(), { logger: false });
  opened.push(nest);
  await nest.init();
  if (platform.name === 'Fastify') {
    await (nest.getHttpAdapter().getInstance() as { ready: () => Promise<unknown> }).ready();
  }
  await nest.listen(0, '127.0.0.1');
  return { url: await nest.getUrl(), nest };
}

export async function closeApps(): Promise<void> {
  for (const app of opened.splice(0)) await app.close();
}

/** An answer: its status, body text and headers (names in lower case). */
export interface Reply {
  readonly status: number;
  readonly text: string;
  readonly headers: Readonly<Record<string, string | undefined>>;
  /** `X-Cache`. */
  readonly cache: string | undefined;
}

export async function send(
  url: string,
  path: string,
  headers: Record<string, string> = {},
  method: 'get' | 'head' = 'get',
): Promise<Reply> {
  const response = await request(url)[method](path).set(headers);
  const got = response.headers as Record<string, string | undefined>;
  return {
    status: response.status,
    text: response.text ?? '',
    headers: got,
    cache: got['x-cache'],
  };
}
