import { Controller, Get, Inject, Param } from '@nestjs/common';
import { SingleFlight } from '../../lib/index.js';
import { ReportBuilder } from './report-builder.js';
import { ReportCache, type Report } from './report-cache.js';

@Controller('reports')
export class ReportsController {
  constructor(
    @Inject(ReportCache) private readonly cache: ReportCache,
    @Inject(ReportBuilder) private readonly builder: ReportBuilder,
  ) {}

  /**
   * One worker builds a missing report; the others wait for it, then find it in the cache.
   */
  @Get(':id')
  @SingleFlight((id: string) => `report:${id}`)
  async report(@Param('id') id: string): Promise<Report> {
    return (await this.cache.get(id)) ?? (await this.builder.buildAndCache(id));
  }

  /** The same without the lock, for comparison: every caller that misses the cache builds. */
  @Get(':id/unlocked')
  async unlocked(@Param('id') id: string): Promise<Report> {
    return (await this.cache.get(id)) ?? (await this.builder.buildAndCache(id));
  }

  /** How many times the report was built, across all workers. */
  @Get(':id/builds')
  async builds(@Param('id') id: string): Promise<{ id: string; builds: number }> {
    return { id, builds: await this.cache.builds(id) };
  }
}
