import { readFileSync } from 'node:fs';
import { Controller, Post, type INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferLockConfigError,
  BufferLockMessages,
  BufferLockModule,
  RedisLockService,
  SingleFlight,
  type LockGuard,
} from '../../lib/index.js';
import { translatedMessages, translations } from './i18n-buffer-lock-messages.js';
import { docShowsRecipe } from './recipe.js';

const french = JSON.parse(
  readFileSync(new URL('i18n/fr/buffer-lock.json', import.meta.url), 'utf8'),
);
const overrides = [translatedMessages];

@Controller('imports')
class ImportsController {
  @Post()
  @SingleFlight('import', { onBusy: 'throw' })
  async start(): Promise<string> {
    return 'started';
  }
}

describe('the nestjs-i18n recipe of docs/messages.md', () => {
  it('is the module the test runs, word for word', () => {
    const recipe = new URL('i18n-buffer-lock-messages.ts', import.meta.url);
    expect(docShowsRecipe(recipe, 'docs/messages.md')).toBe(true);
  });

  describe('in an app on memory:// while another worker holds the lock', () => {
    let app: INestApplication;
    let guard: LockGuard;

    beforeAll(async () => {
      const ref = await Test.createTestingModule({
        imports: [translations, BufferLockModule.forRoot({ redis: 'memory://', overrides })],
        controllers: [ImportsController],
      }).compile();
      app = ref.createNestApplication({ logger: false });
      await app.init();
      const [taken] = await app.get(RedisLockService).acquire('import');
      guard = taken!;
    });

    afterAll(async () => {
      await app?.get(RedisLockService).release(guard);
      await app?.close();
    });

    it('answers a busy @SingleFlight with 409 in French for Accept-Language: fr', async () => {
      const response = await request(app.getHttpServer())
        .post('/imports')
        .set('Accept-Language', 'fr');
      expect(response.status).toBe(409);
      expect(response.body).toMatchObject({ code: 'lock_busy', message: french.lock_busy });
    });

    it('answers it in English for Accept-Language: en, whose catalog leaves the text out', async () => {
      const response = await request(app.getHttpServer())
        .post('/imports')
        .set('Accept-Language', 'en');
      expect(response.status).toBe(409);
      expect(response.body.message).toBe(new BufferLockMessages().render('lock_busy'));
    });
  });

  it('reports a bad module option at bootstrap in the fallback language, French', async () => {
    const compiling = Test.createTestingModule({
      imports: [translations, BufferLockModule.forRoot({ redis: 'memory://', ttl: -1, overrides })],
    }).compile();
    const error: unknown = await compiling.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BufferLockConfigError);
    expect((error as BufferLockConfigError).violations).toContainEqual({
      property: 'ttl',
      code: 'redis_ttl_invalid',
      message: `${french.redis_ttl_invalid} (ttl: -1)`,
      values: [{ name: 'ttl', value: '-1', isDefault: false }],
    });
  });
});
