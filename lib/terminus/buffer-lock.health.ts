import { Inject, Injectable, Optional } from '@nestjs/common';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { errorText } from '../messages/error-text.js';
import { LockError } from '../errors/lock.error.js';
import { RedisLockService } from '../lock/redis-lock.service.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { ping } from '../redis/plain-commands.js';
import {
  SingleFlightEngine,
  SUBSCRIBER_STATE,
  type SubscriberState,
} from '../single-flight/single-flight.engine.js';

const DEFAULT_TIMEOUT_MS = 1000;
// Node fires a longer timer at once.
const MAX_TIMEOUT_MS = 2_147_483_647;

/** Options of one `isHealthy` check. */
export interface BufferLockHealthOptions {
  /** Milliseconds Redis has to answer PING; the check is down after that. Default `1000`. */
  readonly timeout?: number;
}

/** What a check reports under its key, next to Terminus's `status`. */
export interface BufferLockHealthDetails {
  /** The engine's circuit breaker, or `disabled` (`circuitBreaker: false`). */
  readonly breaker: 'closed' | 'open' | 'half-open' | 'disabled';
  /** PING's round trip through the lock's client, in ms; `null` when Redis did not answer. */
  readonly pingMs: number | null;
  /** The wake-up subscriber (`unusable`: waiters poll); never a reason to be down. */
  readonly subscriber: SubscriberState;
  /** Why the check is down, in the catalog's words; absent when up. */
  readonly message?: string;
}

const TIMED_OUT: unique symbol = Symbol('timedOut');

/**
 * A Terminus health indicator for the lock's Redis: one PING through the lock's client, bounded
 * by `timeout`, and the engine's breaker and subscriber. Down when PING fails or is late, or the
 * breaker is open; the reason is in `message`.
 *
 * @example
 * ```ts
 * // in a module with TerminusModule and providers: [BufferLockHealthIndicator]
 * @Get('health')
 * @HealthCheck()
 * check() {
 *   return this.health.check([() => this.bufferLock.isHealthy('buffer-lock', { timeout: 500 })]);
 * }
 * ```
 */
@Injectable()
export class BufferLockHealthIndicator {
  constructor(
    @Inject(RedisLockService) private readonly lock: RedisLockService,
    @Inject(SingleFlightEngine) private readonly engine: SingleFlightEngine,
    @Inject(HealthIndicatorService) private readonly health: HealthIndicatorService,
    @Optional()
    @Inject(BufferLockMessages)
    private readonly messages: BufferLockMessages = new BufferLockMessages(),
  ) {}

  /** `up` or `down` under `key`, within `timeout` ms; rejects only for a bad `timeout`. */
  async isHealthy<const Key extends string = 'buffer-lock'>(
    key: Key = 'buffer-lock' as Key,
    options: BufferLockHealthOptions = {},
  ): Promise<HealthIndicatorResult<Key>> {
    const timeout = this.timeoutOf(options);
    const indicator = this.health.check(key);
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<typeof TIMED_OUT>((resolve) => {
      timer = setTimeout(() => resolve(TIMED_OUT), timeout);
    });
    try {
      const [outcome, subscriber] = await Promise.all([
        this.ping(deadline, timeout),
        Promise.race([this.engine[SUBSCRIBER_STATE](), deadline]).then(
          (state): SubscriberState => (state === TIMED_OUT ? 'unusable' : state),
          (): SubscriberState => 'unusable',
        ),
      ]);
      // Read after PING: a breaker whose cool-down ended meanwhile reads half-open.
      const breaker = this.engine.breaker?.state ?? 'disabled';
      const pingMs = typeof outcome === 'number' ? outcome : null;
      const problems = typeof outcome === 'string' ? [outcome] : [];
      if (breaker === 'open') problems.push(this.messages.render('health_breaker_open'));
      const details = { breaker, pingMs, subscriber };
      return problems.length === 0
        ? indicator.up(details)
        : indicator.down({ ...details, message: problems.join('; ') });
    } finally {
      clearTimeout(timer);
    }
  }

  /** The round trip in ms, or what went wrong. */
  private async ping(
    deadline: Promise<typeof TIMED_OUT>,
    timeout: number,
  ): Promise<number | string> {
    const started = performance.now();
    const answered = this.lock.getClient().then((client) => ping(client));
    // Settled later than the deadline, its rejection is still handled.
    answered.catch(() => {});
    let answer: unknown;
    try {
      answer = await Promise.race([answered, deadline]);
    } catch (error) {
      return this.messages.render('health_ping_failed', { ERROR: errorText(error) });
    }
    if (answer === TIMED_OUT) return this.messages.render('health_ping_timeout', { MS: timeout });
    if (answer !== 'PONG') return this.messages.render('health_ping_bad_reply');
    return Math.round((performance.now() - started) * 100) / 100;
  }

  private timeoutOf(options: BufferLockHealthOptions): number {
    const timeout = (options as BufferLockHealthOptions | undefined)?.timeout ?? DEFAULT_TIMEOUT_MS;
    if (typeof timeout !== 'number' || !(timeout > 0) || timeout > MAX_TIMEOUT_MS) {
      throw new LockError('health_timeout_invalid', this.messages.render('health_timeout_invalid'));
    }
    return timeout;
  }
}
