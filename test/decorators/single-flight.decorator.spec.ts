/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import {
  Controller,
  ForbiddenException,
  Get,
  Injectable,
  Module,
  Param,
  UseGuards,
  type CanActivate,
  type ExecutionContext,
  type INestApplication,
} from '@nestjs/common';
import { EventEmitter2, EventEmitterModule, OnEvent } from '@nestjs/event-emitter';
import { Cron, ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import type { Redis } from 'ioredis';
// Observable is imported as a value: design:returntype then names it, and the wrapper returns an Observable.
import { isObservable, Observable, Subject } from 'rxjs';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { refusedWith } from '../support/refused.js';
import {
  BufferLockConfigError,
  BufferLockModule,
  BufferLockNotImportedError,
  ENGLISH_MESSAGES,
  LockBusyError,
  RedisLockService,
  SingleFlight,
} from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { deferred, MemoryLogger, until } from '../support/nest-helpers.js';

const NS = 'test:decorator:';

let server: RedisServer;
let admin: Redis;
let app: INestApplication;
let lock: RedisLockService;
const logger = new MemoryLogger();

/** Whether the lock on `cacheKey` is in Redis right now. */
const held = async (cacheKey: string): Promise<boolean> =>
  (await admin.exists(lock.redisKey(cacheKey))) === 1;

class DenyOnHeader implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const req = context.switchToHttp().getRequest<{ headers: Record<string, string> }>();
    if (req.headers['x-deny']) throw new ForbiddenException();
    return true;
  }
}

@Controller('order')
class OrderController {
  @Get('get-above')
  @SingleFlight('get-above')
  async getAbove(): Promise<boolean> {
    return held('get-above');
  }

  @SingleFlight('get-below')
  @Get('get-below')
  async getBelow(): Promise<boolean> {
    return held('get-below');
  }

  @Get('guard-above')
  @UseGuards(DenyOnHeader)
  @SingleFlight('guard-above')
  async guardAbove(): Promise<boolean> {
    return held('guard-above');
  }

  @Get('guard-below')
  @SingleFlight('guard-below')
  @UseGuards(DenyOnHeader)
  async guardBelow(): Promise<boolean> {
    return held('guard-below');
  }

  @Get('report/:id')
  @SingleFlight((id: string) => `report:${id}`, { onBusy: 'throw' })
  async report(@Param('id') id: string): Promise<{ id: string; held: boolean }> {
    return { id, held: await held(`report:${id}`) };
  }

  @Get('stream')
  @SingleFlight('stream')
  stream(): Observable<string> {
    const subject = new Subject<string>();
    void held('stream').then((isHeld) => {
      subject.next(`held=${isHeld}`);
      subject.complete();
    });
    return subject;
  }
}

@Injectable()
class Jobs {
  readonly runs: Record<string, boolean[]> = {};

  private async record(name: string): Promise<void> {
    (this.runs[name] ??= []).push(await held(name));
  }

  @Cron('0 0 1 1 *', { name: 'cron-above' })
  @SingleFlight('cron-above')
  async cronAbove(): Promise<void> {
    await this.record('cron-above');
  }

  @SingleFlight('cron-below')
  @Cron('0 0 1 1 *', { name: 'cron-below' })
  async cronBelow(): Promise<void> {
    await this.record('cron-below');
  }

  @OnEvent('report.requested')
  @SingleFlight('event-above')
  async eventAbove(): Promise<string> {
    await this.record('event-above');
    return 'above';
  }

  @SingleFlight('event-below')
  @OnEvent('report.requested')
  async eventBelow(): Promise<string> {
    await this.record('event-below');
    return 'below';
  }
}

@Injectable()
class Builds {
  readonly events: string[] = [];
  readonly prefix = 'tenant-7';
  gate = deferred();

  @SingleFlight('wait')
  async build(name: string): Promise<string> {
    this.events.push(`start ${name}`);
    if (name === 'first') await this.gate.promise;
    this.events.push(`end ${name}`);
    return name;
  }

  @SingleFlight('sync')
  double(n: number): number {
    return n * 2;
  }

  @SingleFlight('throws')
  async fail(error: Error): Promise<never> {
    throw error;
  }

  @SingleFlight('throws-sync')
  failSync(error: Error): never {
    throw error;
  }

  @SingleFlight('busy', { onBusy: 'skip' })
  async skipping(): Promise<string | undefined> {
    return 'ran';
  }

  @SingleFlight('busy', { onBusy: 'throw' })
  async throwing(): Promise<string> {
    return 'ran';
  }

  @SingleFlight('busy', { lockTimeout: 0.3 })
  async waitingBriefly(): Promise<boolean> {
    return held('busy');
  }

  @SingleFlight('short-ttl', { ttl: 2 })
  async shortTtl(): Promise<number> {
    return admin.pttl(lock.redisKey('short-ttl'));
  }

  @SingleFlight(function (this: Builds, id: string) {
    return `${this.prefix}:${id}`;
  })
  async keyed(id: string): Promise<boolean> {
    return held(`${this.prefix}:${id}`);
  }

  @SingleFlight('observable')
  watch(source: Observable<number>): Observable<number> {
    return source;
  }
}

@Injectable()
class Orphan {
  @SingleFlight('orphan')
  async build(): Promise<string> {
    return 'never';
  }
}

@Module({ providers: [Orphan] })
class OrphanModule {}

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
  const ref = await Test.createTestingModule({
    imports: [
      BufferLockModule.forRoot({ redis: () => server.client(), namespace: NS, logger }),
      ScheduleModule.forRoot(),
      EventEmitterModule.forRoot(),
      OrphanModule,
    ],
    controllers: [OrderController],
    providers: [Jobs, Builds],
  }).compile();
  app = ref.createNestApplication({ logger: false });
  await app.init();
  lock = app.get(RedisLockService);
});
afterAll(async () => {
  await app.close();
  await server.stop();
});

describe('@SingleFlight: the lock around the call', () => {
  it('holds the lock while the method runs and releases it after', async () => {
    expect(await app.get(Builds).keyed('9')).toBe(true);
    expect(await held('tenant-7:9')).toBe(false);
  });

  it('computes the key from the arguments with this bound', async () => {
    expect(await app.get(Builds).keyed('42')).toBe(true);
  });

  it('uses the per-method ttl', async () => {
    const pttl = await app.get(Builds).shortTtl();
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(2000);
  });

  it('passes the value through; a sync method resolves to its value', async () => {
    await expect(app.get(Builds).double(21)).resolves.toBe(42);
  });

  it('passes the very same exception through and releases the lock (async and sync)', async () => {
    const boom = new Error('boom');
    await expect(app.get(Builds).fail(boom)).rejects.toBe(boom);
    expect(await held('throws')).toBe(false);
    await expect(app.get(Builds).failSync(boom)).rejects.toBe(boom);
    expect(await held('throws-sync')).toBe(false);
  });
});

describe("onBusy: 'wait' (the default)", () => {
  it('a second caller in this process joins the first: one run, the same value', async () => {
    const builds = app.get(Builds);
    builds.events.length = 0;
    builds.gate = deferred();
    const first = builds.build('first');
    await until(() => builds.events.includes('start first'));
    const second = builds.build('second');
    await new Promise((r) => setTimeout(r, 200));
    expect(builds.events).toEqual(['start first']);
    builds.gate.resolve();
    expect(await Promise.all([first, second])).toEqual(['first', 'first']);
    expect(builds.events).toEqual(['start first', 'end first']);
  });

  it('a caller waits for a holder in another process, then runs after its release', async () => {
    const builds = app.get(Builds);
    builds.events.length = 0;
    const [foreign] = await lock.acquire('wait'); // another worker holds the lock
    const waiting = builds.build('after');
    await new Promise((r) => setTimeout(r, 200));
    expect(builds.events).toEqual([]);
    await lock.release(foreign!);
    expect(await waiting).toBe('after');
    expect(builds.events).toEqual(['start after', 'end after']);
  });

  it('runs without the lock once lockTimeout passes, and logs it', async () => {
    const [guard] = await lock.acquire('busy');
    expect(await app.get(Builds).waitingBriefly()).toBe(true); // still held by the other holder
    expect(logger.at('warn')).toContain(
      ENGLISH_MESSAGES.lock_wait_timeout.replace('SECONDS', '0.3').replace('KEY', 'busy'),
    );
    await lock.release(guard!);
  });
});

describe("onBusy: 'skip'", () => {
  it('resolves undefined without running the method', async () => {
    const [guard] = await lock.acquire('busy');
    await expect(app.get(Builds).skipping()).resolves.toBeUndefined();
    await lock.release(guard!);
    await expect(app.get(Builds).skipping()).resolves.toBe('ran');
  });
});

describe("onBusy: 'throw'", () => {
  it('rejects with LockBusyError in the catalog words', async () => {
    const [guard] = await lock.acquire('busy');
    const error: unknown = await app
      .get(Builds)
      .throwing()
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockBusyError);
    expect((error as LockBusyError).message).toBe(ENGLISH_MESSAGES.lock_busy);
    expect((error as LockBusyError).cacheKey).toBe('busy');
    await lock.release(guard!);
  });

  it('answers HTTP 409 with the catalog text', async () => {
    const [guard] = await lock.acquire('report:1');
    const reply = await request(app.getHttpServer()).get('/order/report/1');
    expect(reply.status).toBe(409);
    expect(reply.body).toEqual({
      statusCode: 409,
      code: 'lock_busy',
      message: ENGLISH_MESSAGES.lock_busy,
    });
    await lock.release(guard!);
    const free = await request(app.getHttpServer()).get('/order/report/1');
    expect(free.body).toEqual({ id: '1', held: true });
  });
});

describe('Observables: the lock is held until the Observable completes', () => {
  it('takes the lock on subscription, not before', async () => {
    const source = new Subject<number>();
    const result = app.get(Builds).watch(source);
    expect(isObservable(result)).toBe(true);
    expect(await held('observable')).toBe(false);
    const seen: number[] = [];
    let completed = false;
    result.subscribe({
      next: (n) => seen.push(n!),
      complete: () => (completed = true),
    });
    await until(() => source.observed); // subscribed to, so the lock is held
    expect(await held('observable')).toBe(true);
    source.next(1);
    source.next(2);
    expect(await held('observable')).toBe(true);
    source.complete();
    expect(seen).toEqual([1, 2]);
    expect(completed).toBe(true);
    await until(async () => !(await held('observable')));
  });

  it('releases on error and on unsubscribe', async () => {
    const failing = new Subject<number>();
    const failure = new Error('stream broke');
    let seenError: unknown;
    app
      .get(Builds)
      .watch(failing)
      .subscribe({ error: (e: unknown) => (seenError = e) });
    await until(() => failing.observed);
    failing.error(failure);
    expect(seenError).toBe(failure);
    await until(async () => !(await held('observable')));

    const endless = new Subject<number>();
    const subscription = app.get(Builds).watch(endless).subscribe();
    await until(() => endless.observed);
    expect(await held('observable')).toBe(true);
    subscription.unsubscribe();
    await until(async () => !(await held('observable')));
  });

  it('works as an HTTP handler', async () => {
    const reply = await request(app.getHttpServer()).get('/order/stream');
    expect(reply.text).toBe('held=true');
  });
});

describe('other decorators keep working, in either order', () => {
  it('@Get', async () => {
    for (const path of ['get-above', 'get-below']) {
      const reply = await request(app.getHttpServer()).get(`/order/${path}`);
      expect([path, reply.status, reply.text]).toEqual([path, 200, 'true']);
    }
  });

  it('@UseGuards', async () => {
    for (const path of ['guard-above', 'guard-below']) {
      const denied = await request(app.getHttpServer()).get(`/order/${path}`).set('x-deny', '1');
      expect([path, denied.status]).toEqual([path, 403]);
      const allowed = await request(app.getHttpServer()).get(`/order/${path}`);
      expect([path, allowed.status, allowed.text]).toEqual([path, 200, 'true']);
    }
  });

  it('@Cron', async () => {
    const registry = app.get(SchedulerRegistry);
    for (const name of ['cron-above', 'cron-below']) {
      await registry.getCronJob(name).fireOnTick();
      await until(() => app.get(Jobs).runs[name]?.length === 1);
      expect(app.get(Jobs).runs[name]).toEqual([true]);
    }
  });

  it('@OnEvent', async () => {
    const results = await app.get(EventEmitter2).emitAsync('report.requested');
    expect(results.toSorted()).toEqual(['above', 'below']);
    expect(app.get(Jobs).runs['event-above']).toEqual([true]);
    expect(app.get(Jobs).runs['event-below']).toEqual([true]);
  });
});

describe('a class whose module cannot see BufferLockModule', () => {
  it('throws an error naming the class and method', async () => {
    const expected = ENGLISH_MESSAGES.single_flight_no_module
      .replace('CLASS', 'Orphan')
      .replace('METHOD', 'build');
    expect(() => app.get(Orphan).build()).toThrow(BufferLockNotImportedError);
    expect(() => app.get(Orphan).build()).toThrow(expected);
    expect(() => new Orphan().build()).toThrow(expected);
  });
});

/** The codes of the config error `define` throws. */
const codesOf = (define: () => unknown): string[] => {
  try {
    define();
  } catch (error) {
    expect(error).toBeInstanceOf(BufferLockConfigError);
    return (error as BufferLockConfigError).violations.map((v) => v.code);
  }
  throw new Error('no error thrown');
};

describe('decorator arguments are checked when the class is defined', () => {
  it('rejects an empty or non-string key', () => {
    expect(codesOf(() => SingleFlight(''))).toEqual(['single_flight_key_invalid']);
    expect(codesOf(() => SingleFlight(42 as never))).toEqual(['single_flight_key_invalid']);
  });

  it.each([
    ["'skip'", 'skip'],
    ['null', null],
    ['42', 42],
    ['true', true],
    ['an array', [{ onBusy: 'skip' }]],
    ['a function', () => ({ onBusy: 'skip' })],
  ])('rejects options that are no object: %s', (_name, options) => {
    expect(codesOf(() => SingleFlight('k', options as never))).toEqual([
      'single_flight_options_invalid',
    ]);
    const error = (() => {
      try {
        SingleFlight('k', options as never);
      } catch (thrown) {
        return thrown as BufferLockConfigError;
      }
    })();
    expect(error?.message).toEqual(
      refusedWith(
        '@SingleFlight options must be an object of the per-method settings (ttl, lockTimeout, onBusy, share, onRedisError, maxHold)',
      ),
    );
  });

  it('takes options left out, given as undefined, or an empty object', () => {
    expect(() => SingleFlight('k')).not.toThrow();
    expect(() => SingleFlight('k', undefined)).not.toThrow();
    expect(() => SingleFlight('k', {})).not.toThrow();
  });

  it('rejects bad ttl, lockTimeout and onBusy, all at once', () => {
    expect(
      codesOf(() =>
        SingleFlight('k', { ttl: 0, lockTimeout: 'x' as never, onBusy: 'no' as never }),
      ),
    ).toEqual(['redis_ttl_invalid', 'lock_timeout_invalid', 'on_busy_invalid']);
    expect(codesOf(() => SingleFlight('k', { ttl: 2, lockTimeout: 5 }))).toEqual([
      'lock_timeout_not_below_ttl',
    ]);
  });
});
