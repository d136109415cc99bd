import {
  Controller,
  Get,
  Headers,
  Inject,
  Injectable,
  Scope,
  type INestApplication,
} from '@nestjs/common';
import {
  ContextIdFactory,
  REQUEST,
  type ContextId,
  type ContextIdResolver,
  type ContextIdStrategy,
  type HostComponentInfo,
} from '@nestjs/core';
import { Test } from '@nestjs/testing';
import type { Redis } from 'ioredis';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BufferLockModule, RedisLockService, SingleFlight } from '../lib/index.js';
import { startRedis, type RedisServer } from './support/redis-server.js';

/** One durable context per tenant header, as the Nest docs' multi-tenancy example. */
class TenantStrategy implements ContextIdStrategy {
  private readonly tenants = new Map<string, ContextId>();
  attach(contextId: ContextId, req: { headers: Record<string, string> }): ContextIdResolver {
    const tenant = req.headers['x-tenant'] ?? 'none';
    let tenantId = this.tenants.get(tenant);
    if (!tenantId) {
      tenantId = ContextIdFactory.create();
      this.tenants.set(tenant, tenantId);
    }
    return {
      resolve: (info: HostComponentInfo) => (info.isTreeDurable ? tenantId : contextId),
      payload: { tenant },
    };
  }
}

let server: RedisServer;
let admin: Redis;
let app: INestApplication;
let factoryCalls = 0;
const durableInstances = new Set<object>();

@Injectable({ scope: Scope.REQUEST, durable: true })
class TenantReports {
  constructor(
    @Inject(REQUEST) readonly payload: { tenant: string },
    readonly lock: RedisLockService,
  ) {
    durableInstances.add(this);
  }

  @SingleFlight(function (this: TenantReports) {
    return `tenant:${this.payload.tenant}`;
  })
  async build(): Promise<string> {
    const held = await admin.exists(this.lock.redisKey(`tenant:${this.payload.tenant}`));
    return `${this.payload.tenant}:${held}`;
  }
}

@Controller({ path: 'scoped', scope: Scope.REQUEST })
class ScopedController {
  constructor(
    private readonly reports: TenantReports,
    private readonly lock: RedisLockService,
  ) {}

  @Get()
  @SingleFlight((tenant: string) => `scoped:${tenant}`)
  async get(@Headers('x-tenant') tenant: string): Promise<string[]> {
    const held = await admin.exists(this.lock.redisKey(`scoped:${tenant}`));
    return [`controller:${held}`, await this.reports.build()];
  }
}

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
  ContextIdFactory.apply(new TenantStrategy());
  const ref = await Test.createTestingModule({
    imports: [
      BufferLockModule.forRoot({
        redis: () => {
          factoryCalls++;
          return server.client();
        },
        namespace: 'test:scope:',
      }),
    ],
    controllers: [ScopedController],
    providers: [TenantReports],
  }).compile();
  app = ref.createNestApplication({ logger: false });
  await app.init();
});
afterAll(async () => {
  await app.close();
  await server.stop();
});

describe('request-scoped controller and durable provider', () => {
  it('both inject RedisLockService and run @SingleFlight methods under the lock', async () => {
    const http = app.getHttpServer();
    const replies = await Promise.all(
      ['a', 'b', 'a', 'b', 'a', 'c'].map((tenant) =>
        request(http).get('/scoped').set('x-tenant', tenant),
      ),
    );
    expect(replies.map((reply) => reply.body)).toEqual(
      ['a', 'b', 'a', 'b', 'a', 'c'].map((tenant) => ['controller:1', `${tenant}:1`]),
    );
    // Durable: one instance per tenant, not per request.
    expect(durableInstances.size).toBe(3);
    expect(factoryCalls).toBe(1);
  });
});
