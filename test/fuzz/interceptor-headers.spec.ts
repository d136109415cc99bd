import { Controller, Get, Headers, type INestApplication } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import fc from 'fast-check';
import {
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
} from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BufferCacheInterceptor, BufferLockModule } from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { fuzzParameters } from './fuzz.js';

/**
 * Hostile headers through BufferCacheInterceptor (module option `http.vary: ['accept-language']`)
 * on Express and Fastify, on a real redis-server: random `Authorization`, `Cookie`, `Host` and
 * `Accept-Language` values, names in any case, repeated headers, values up to past the server's
 * header limit, sent in concurrent batches. Every answer names the request it was built for; an
 * answer built for another request is allowed only when neither request carried `Authorization`
 * or `Cookie` and both had the same path, `Host` and `Accept-Language` as the server read them.
 */

const FILE = 'test/fuzz/interceptor-headers.spec.ts';
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

@Controller()
class WhoController {
  @Get('who/:page')
  async who(@Headers('x-request-id') id: string): Promise<object> {
    await sleep(10);
    return { id };
  }
}

const printable = fc.string({
  unit: fc.integer({ min: 0x20, max: 0x7e }).map((code) => String.fromCharCode(code)),
  maxLength: 40,
});
const long = fc.integer({ min: 1, max: 12_000 }).map((length) => 'v'.repeat(length));
/** A few values that repeat (so that answers are shared), odd ones, and very long ones. */
const values = (...common: string[]): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...common) },
    { weight: 1, arbitrary: printable },
    { weight: 1, arbitrary: long },
  );

/** A header's name in some case, and its value(s): one, repeated, or none. */
function header(
  name: string,
  given: fc.Arbitrary<string>,
): fc.Arbitrary<[string, string | string[]] | undefined> {
  const upper = name.toUpperCase();
  const mixed = [...name].map((c, i) => (i % 2 ? c.toUpperCase() : c)).join('');
  const spelled = fc.constantFrom(name, upper, mixed, name[0]!.toUpperCase() + name.slice(1));
  const value = fc.oneof(given, fc.array(given, { minLength: 2, maxLength: 3 }));
  return fc.option(fc.tuple(spelled, value), { nil: undefined, freq: 2 });
}

const sent = fc.record({
  page: fc.constantFrom('a', 'b'),
  headers: fc.tuple(
    header('authorization', values('Bearer alice', 'Bearer bob', '')),
    header('cookie', values('sid=alice', 'sid=bob', '')),
    header('host', values('evil.example', 'EVIL.example', 'shop.example')),
    header('accept-language', values('fr', 'en', 'fr, en', '')),
  ),
});
type Sent = typeof sent extends fc.Arbitrary<infer T> ? T : never;

interface Answer {
  readonly id: string;
  readonly status: number;
  readonly text: string;
}

let serial = 0;

/** Sends one request with its headers as spelled, repeated ones as several lines. */
function send(port: number, { page, headers }: Sent): Promise<Answer> {
  const id = `r${++serial}`;
  return new Promise((resolve) => {
    const outgoing = httpRequest({ host: '127.0.0.1', port, path: `/who/${page}`, method: 'GET' });
    outgoing.setHeader('x-request-id', id);
    for (const pair of headers) if (pair) outgoing.setHeader(pair[0], pair[1]);
    // A server may close the connection on headers it refuses (Fastify on a repeated Host).
    outgoing.on('error', () => resolve({ id, status: 0, text: '' }));
    outgoing.on('response', (response: IncomingMessage) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (text += chunk));
      response.on('end', () => resolve({ id, status: response.statusCode ?? 0, text }));
    });
    outgoing.end();
  });
}

const idOf = (text: string): string | undefined => {
  try {
    const body = JSON.parse(text) as { id?: unknown };
    return typeof body.id === 'string' ? body.id : undefined;
  } catch {
    return undefined;
  }
};

const personal = (view: IncomingHttpHeaders): boolean =>
  view.authorization !== undefined || view.cookie !== undefined;

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

describe.each([
  { name: 'Express', adapter: (): ExpressAdapter | FastifyAdapter => new ExpressAdapter() },
  { name: 'Fastify', adapter: (): ExpressAdapter | FastifyAdapter => new FastifyAdapter() },
])('BufferCacheInterceptor on $name under hostile headers', ({ name, adapter }) => {
  let app: INestApplication;
  let port: number;
  // The headers of each request as the server read them, by request id.
  const views = new Map<string, IncomingHttpHeaders>();
  const urls = new Map<string, string | undefined>();
  beforeAll(async () => {
    const ref = await Test.createTestingModule({
      imports: [
        BufferLockModule.forRoot({
          redis: () => server.client(),
          namespace: `fuzz:interceptor:${name}:`,
          http: { vary: ['accept-language'] },
        }),
      ],
      controllers: [WhoController],
      providers: [{ provide: APP_INTERCEPTOR, useClass: BufferCacheInterceptor }],
    }).compile();
    app = ref.createNestApplication(adapter(), { logger: false });
    await app.init();
    if (name === 'Fastify') {
      await (app.getHttpAdapter().getInstance() as { ready: () => Promise<unknown> }).ready();
    }
    const http = app.getHttpServer() as Server;
    http.prependListener('request', (incoming: IncomingMessage) => {
      const id = String(incoming.headers['x-request-id']);
      views.set(id, { ...incoming.headers });
      urls.set(id, incoming.url);
    });
    await app.listen(0, '127.0.0.1');
    port = Number(new URL(await app.getUrl()).port);
  });
  afterAll(() => app.close());

  it("never hands one client's answer to another", async () => {
    const figures = { requests: 0, checked: 0, shared: 0, refused: 0 };
    await fc.assert(
      fc.asyncProperty(fc.array(sent, { minLength: 1, maxLength: 6 }), async (batch) => {
        const answers = await Promise.all(batch.map((one) => send(port, one)));
        figures.requests += answers.length;
        for (const answer of answers) {
          const builtFor = idOf(answer.text);
          if (builtFor === undefined) {
            // Refused before any handler ran (431, 400, a closed connection): nobody's answer.
            expect(answer.status).not.toBe(200);
            figures.refused++;
            continue;
          }
          figures.checked++;
          if (builtFor === answer.id) continue;
          figures.shared++;
          const own = views.get(answer.id)!;
          const other = views.get(builtFor);
          expect(other, `${answer.id} got the answer of ${builtFor}`).toBeDefined();
          expect(personal(own), `${answer.id} carries credentials`).toBe(false);
          expect(personal(other!), `${builtFor} carried credentials`).toBe(false);
          expect([other!.host, other!['accept-language'], urls.get(builtFor)]).toEqual([
            own.host,
            own['accept-language'],
            urls.get(answer.id),
          ]);
        }
      }),
      fuzzParameters(FILE, 100),
    );
    console.log(`interceptor headers fuzz on ${name}`, figures);
    // The cache did share answers (else the property would say nothing).
    expect(figures.shared).toBeGreaterThan(0);
  });
});
