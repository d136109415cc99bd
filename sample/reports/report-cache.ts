import { Inject, Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { Redis } from 'ioredis';
import { SampleConfig } from '../config.js';

/** A finished report. */
export interface Report {
  id: string;
  rows: number[];
  builtBy: number;
  builtAt: string;
}

/** Where the plain cache keeps its strings: Redis, or a Map for `memory://` (this process only). */
interface Strings {
  get(key: string): Promise<string | null>;
  set(key: string, value: string, ttlS: number): Promise<void>;
  incr(key: string, ttlS: number): Promise<void>;
  close(): Promise<void>;
}

function redisStrings(url: string): Strings {
  const redis = new Redis(url, { lazyConnect: true });
  return {
    get: (key) => redis.get(key),
    set: async (key, value, ttlS) => void (await redis.set(key, value, 'EX', ttlS)),
    incr: async (key, ttlS) => void (await redis.multi().incr(key).expire(key, ttlS).exec()),
    close: async () => void (await redis.quit().catch(() => redis.disconnect())),
  };
}

/** Without expiry: the one process that holds it is short-lived (the demo, a trial run). */
function memoryStrings(): Strings {
  const values = new Map<string, string>();
  return {
    get: async (key) => values.get(key) ?? null,
    set: async (key, value) => void values.set(key, value),
    incr: async (key) => void values.set(key, String(Number(values.get(key) ?? 0) + 1)),
    close: async () => values.clear(),
  };
}

/**
 * A plain cache without any lock (the no-lock comparison route): reports as JSON, plus a counter
 * of how many times each report was built, by either route (the demo reads it). In Redis, on its
 * own connection, quit at shutdown; with a `memory://` URL, in this process's memory.
 */
@Injectable()
export class ReportCache implements OnApplicationShutdown {
  private readonly strings: Strings;

  constructor(@Inject(SampleConfig) config: SampleConfig) {
    this.strings = config.redisUrl.startsWith('memory://')
      ? memoryStrings()
      : redisStrings(config.redisUrl);
  }

  async get(id: string): Promise<Report | undefined> {
    const json = await this.strings.get(`sample:report:${id}`);
    return json === null ? undefined : (JSON.parse(json) as Report);
  }

  async set(report: Report): Promise<void> {
    await this.strings.set(`sample:report:${report.id}`, JSON.stringify(report), 600);
  }

  /** Counts one build of `id`. */
  async countBuild(id: string): Promise<void> {
    await this.strings.incr(`sample:builds:${id}`, 600);
  }

  async builds(id: string): Promise<number> {
    return Number((await this.strings.get(`sample:builds:${id}`)) ?? 0);
  }

  async onApplicationShutdown(): Promise<void> {
    await this.strings.close();
  }
}
