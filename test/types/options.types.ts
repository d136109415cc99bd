// Options in seconds, checked by the compiler (test/types/types.spec.ts compiles it): a number or
// a numeric string, as an environment variable gives it; anything else is refused.
import { BufferLockModule, Cached, Idempotent, type SecondsOption } from '../../lib/index.js';

export const fromNumbers = BufferLockModule.forRoot({ redis: 'redis://127.0.0.1:6379', ttl: 30 });
export const fromEnvironment = BufferLockModule.forRoot({
  redis: 'redis://127.0.0.1:6379',
  ttl: '30',
  lockTimeout: '10',
  cacheDefaults: { ttl: '60', grace: '600' },
});

// @ts-expect-error -- '30s' is no number of seconds
export const withUnit = BufferLockModule.forRoot({ redis: 'redis://127.0.0.1:6379', ttl: '30s' });

const fromVariable = (process.env['LOCK_TTL'] ?? '30') as SecondsOption;

export class Reports {
  @Cached('report', { ttl: fromVariable, grace: '600' })
  async report(): Promise<string> {
    return 'report';
  }
}

export const idempotentFromEnvironment = Idempotent({ expiresAfter: '86400', ttl: fromVariable });

// @ts-expect-error -- a request is never skipped: it runs, waits or is refused
export const idempotentSkip = Idempotent({ onBusy: 'skip' });

// @ts-expect-error -- a scope is a function of the request's context
export const idempotentScope = Idempotent({ scope: 'user' });
