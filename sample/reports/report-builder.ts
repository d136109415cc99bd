import { Inject, Injectable } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import { SingleFlight } from '../../lib/index.js';
import { SampleConfig } from '../config.js';
import { ReportCache, type Report } from './report-cache.js';

/**
 * The expensive part: builds a report (an artificial delay) and caches it for every worker. Only
 * the build is locked; the hit path reads the cache before it gets here (ReportsController).
 */
@Injectable()
export class ReportBuilder {
  constructor(
    @Inject(SampleConfig) private readonly config: SampleConfig,
    @Inject(ReportCache) private readonly cache: ReportCache,
  ) {}

  /**
   * One build per report across every worker. The others wait for the lock's release, then find
   * the report in the cache: hence the second read, under the lock, before building.
   */
  @SingleFlight((id: string) => `report:${id}`)
  async build(id: string): Promise<Report> {
    const cached = await this.cache.get(id); // built by another worker while this one waited?
    if (cached) return cached;
    return this.buildAndStore(id);
  }

  /** The same build without a lock, for the demo's comparison: every caller that missed builds. */
  buildUnlocked(id: string): Promise<Report> {
    return this.buildAndStore(id);
  }

  private async buildAndStore(id: string): Promise<Report> {
    await this.cache.countBuild(id);
    await sleep(this.config.buildMs);
    const report: Report = {
      id,
      rows: Array.from({ length: 5 }, (_, i) => i * id.length),
      builtBy: process.pid,
      builtAt: new Date().toISOString(),
    };
    await this.cache.set(report);
    return report;
  }
}
