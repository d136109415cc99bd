import { Controller, Get, Inject, Param } from '@nestjs/common';
import { Cached } from '../../lib/index.js';
import { REPORT_CACHE } from '../config.js';
import { ReportBuilder } from './report-builder.js';
import { ReportCache, type Report } from './report-cache.js';

@Controller('reports')
export class ReportsController {
  constructor(
    @Inject(ReportCache) private readonly cache: ReportCache,
    @Inject(ReportBuilder) private readonly builder: ReportBuilder,
  ) {}

  /**
   * A fresh hit is one store read and no lock. A miss is built by one worker of the fleet while
   * the others wait for it; a stale report (within `grace`) is served at once while one worker
   * refreshes it.
   */
  @Get(':id')
  @Cached((id: string) => `report:${id}`, REPORT_CACHE)
  report(@Param('id') id: string): Promise<Report> {
    return this.builder.build(id);
  }

  /** For comparison, a plain cache-aside with no lock: every caller that misses builds. */
  @Get(':id/unlocked')
  async unlocked(@Param('id') id: string): Promise<Report> {
    const cached = await this.cache.get(id);
    if (cached) return cached;
    const report = await this.builder.build(id);
    await this.cache.set(report);
    return report;
  }

  /** How many times the report was built, across all workers. */
  @Get(':id/builds')
  async builds(@Param('id') id: string): Promise<{ id: string; builds: number }> {
    return { id, builds: await this.cache.builds(id) };
  }
}
