import { Inject, Injectable } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import { SampleConfig } from '../config.js';
import { ReportCache, type Report } from './report-cache.js';

/** The expensive part: builds a report (an artificial delay), counting every build for the demo. */
@Injectable()
export class ReportBuilder {
  constructor(
    @Inject(SampleConfig) private readonly config: SampleConfig,
    @Inject(ReportCache) private readonly cache: ReportCache,
  ) {}

  async build(id: string): Promise<Report> {
    await this.cache.countBuild(id);
    await sleep(this.config.buildMs);
    return {
      id,
      rows: Array.from({ length: 5 }, (_, i) => i * id.length),
      builtBy: process.pid,
      builtAt: new Date().toISOString(),
    };
  }
}
