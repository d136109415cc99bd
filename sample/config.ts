import { Injectable, Module } from '@nestjs/common';
import type { BufferCacheOptions } from '../lib/index.js';

/**
 * How long a report is fresh, then served stale while one worker refreshes it (seconds). A
 * decorator's options are fixed when the class is defined, so they come from the environment here.
 */
export const REPORT_CACHE: BufferCacheOptions = {
  ttl: Number(process.env.REPORT_TTL ?? 60),
  grace: Number(process.env.REPORT_GRACE ?? 600),
};

/** The sample's settings, from the environment (strings, as real config delivers them). */
@Injectable()
export class SampleConfig {
  readonly redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  readonly port = Number(process.env.PORT ?? 3000);
  /** How long building one report takes, in ms: the expensive part the lock protects. */
  readonly buildMs = Number(process.env.BUILD_MS ?? 500);
  readonly lockTtl = process.env.LOCK_TTL ?? '60';
  readonly lockTimeout = process.env.LOCK_TIMEOUT ?? '10';
}

@Module({ providers: [SampleConfig], exports: [SampleConfig] })
// oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module is an empty class with metadata
export class SampleConfigModule {}

/** The URL without user name and password, for log lines. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.username = '';
    parsed.password = '';
    return parsed.toString();
  } catch {
    return '(unparsable Redis URL)';
  }
}
