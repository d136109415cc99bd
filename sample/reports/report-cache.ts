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

/**
 * A plain cache in Redis, without any lock (the no-lock comparison route): reports as JSON, plus
 * a counter of how many times each report was built, by either route (the demo reads it). Its own
 * connection, quit at shutdown.
 */
@Injectable()
export class ReportCache implements OnApplicationShutdown {
  private readonly redis: Redis;

  constructor(@Inject(SampleConfig) config: SampleConfig) {
    this.redis = new Redis(config.redisUrl, { lazyConnect: true });
  }

  async get(id: string): Promise<Report | undefined> {
    const json = await this.redis.get(`sample:report:${id}`);
    return json === null ? undefined : (JSON.parse(json) as Report);
  }

  async set(report: Report): Promise<void> {
    await this.redis.set(`sample:report:${report.id}`, JSON.stringify(report), 'EX', 600);
  }

  /** Counts one build of `id`. */
  async countBuild(id: string): Promise<void> {
    await this.redis.multi().incr(`sample:builds:${id}`).expire(`sample:builds:${id}`, 600).exec();
  }

  async builds(id: string): Promise<number> {
    return Number((await this.redis.get(`sample:builds:${id}`)) ?? 0);
  }

  async onApplicationShutdown(): Promise<void> {
    await this.redis.quit().catch(() => this.redis.disconnect());
  }
}
