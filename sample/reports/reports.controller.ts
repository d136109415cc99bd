import { Controller, Get, Inject, Param } from '@nestjs/common';
import { ReportBuilder } from './report-builder.js';
import { ReportCache, type Report } from './report-cache.js';

@Controller('reports')
export class ReportsController {
  constructor(
    @Inject(ReportCache) private readonly cache: ReportCache,
    @Inject(ReportBuilder) private readonly builder: ReportBuilder,
  ) {}

  /**
   * A hit is one cache read and never touches the lock. A miss goes to the locked build: one
   * worker builds the report, the others wait for it.
   */
  @Get(':id')
  async report(@Param('id') id: string): Promise<Report> {
    return (await this.cache.get(id)) ?? (await this.builder.build(id));
  }

  /** The same without the lock, for comparison: every caller that misses the cache builds. */
  @Get(':id/unlocked')
  async unlocked(@Param('id') id: string): Promise<Report> {
    return (await this.cache.get(id)) ?? (await this.builder.buildUnlocked(id));
  }

  /** How many times the report was built, across all workers. */
  @Get(':id/builds')
  async builds(@Param('id') id: string): Promise<{ id: string; builds: number }> {
    return { id, builds: await this.cache.builds(id) };
  }
}
