import { Inject, Injectable, Logger } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { setTimeout as sleep } from 'node:timers/promises';
import { RedisLockService } from '../../lib/index.js';

/**
 * Every worker on every machine schedules this job; the lock lets exactly one of them run it.
 * It uses RedisLockService directly: take the lock, run, release; busy means another machine has it.
 */
@Injectable()
export class NightlyReportJob {
  private readonly logger = new Logger(NightlyReportJob.name);

  constructor(@Inject(RedisLockService) private readonly lock: RedisLockService) {}

  @Cron('0 3 * * *')
  async run(): Promise<'ran' | 'busy' | 'redis-error'> {
    // A TTL longer than the job ever takes, so the lock cannot expire under it.
    const [guard, error] = await this.lock.acquire('nightly-report', 15 * 60);
    if (guard) {
      try {
        await this.buildNightlyReport();
        return 'ran';
      } finally {
        await this.lock.release(guard);
      }
    }
    if (error) {
      this.logger.warn(error.message); // Redis trouble: the job runs elsewhere or tomorrow
      return 'redis-error';
    }
    return 'busy'; // another machine is already doing it
  }

  private async buildNightlyReport(): Promise<void> {
    this.logger.log('building the nightly report');
    await sleep(100);
  }
}
