import { ClientProxyFactory, Transport, type ClientProxy } from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AMQP_URL, NATS_URL, requireBroker } from '../support/brokers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { compileWorkers, Worker } from './flight.workers.js';
import type { Counts, MessagesCommand, MessagesReply } from './messages.protocol.js';

/**
 * An idempotent consumer: two consumer processes of one queue (RabbitMQ, acknowledged by hand)
 * or one queue group (NATS), on one redis-server. Each payment event is delivered three times,
 * twice at once (a redelivery while the first is still being processed) and once after it was
 * processed; each is processed once across both consumers, and every delivery is acknowledged.
 */

const WORKER = '.build/multi-process/test/multi-process/messages.worker.js';
const PAYMENTS = 20;
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const sum = (counts: Readonly<Record<string, number>>): number =>
  Object.values(counts).reduce((a, b) => a + b, 0);

let server: RedisServer;
beforeAll(async () => {
  await requireBroker(NATS_URL);
  await requireBroker(AMQP_URL);
  compileWorkers();
  server = await startRedis();
}, 120_000);
afterAll(async () => {
  await server?.stop();
});

describe.each(['nats', 'rmq'] as const)(
  '@Idempotent consumers across 2 processes on %s',
  (transport) => {
    const channel = `payments-${transport}-${process.pid}-${Date.now()}`;
    let workers: Worker<MessagesCommand, MessagesReply>[] = [];
    let client: ClientProxy;

    beforeAll(async () => {
      const env = {
        REDIS_URL: server.url,
        NS: `mp:messages:${transport}:`,
        TRANSPORT: transport,
        NATS_URL,
        AMQP_URL,
        CHANNEL: channel,
      };
      workers = await Promise.all(
        [0, 1].map(() => Worker.start<MessagesCommand, MessagesReply>(env, WORKER)),
      );
      client =
        transport === 'rmq'
          ? ClientProxyFactory.create({
              transport: Transport.RMQ,
              options: { urls: [AMQP_URL], queue: channel, queueOptions: { durable: false } },
            })
          : ClientProxyFactory.create({
              transport: Transport.NATS,
              options: { servers: [NATS_URL] },
            });
      await client.connect();
    }, 60_000);
    afterAll(async () => {
      await client?.close();
      await Promise.all(workers.map((w) => w.stop()));
    });

    const counts = (): Promise<Counts[]> =>
      Promise.all(workers.map((w) => w.ask<Extract<MessagesReply, Counts>>({ cmd: 'counts' })));
    const totals = async (): Promise<{ deliveries: number; runs: number }> => {
      const all = await counts();
      return {
        deliveries: all.reduce((n, c) => n + sum(c.deliveries), 0),
        runs: all.reduce((n, c) => n + sum(c.runs), 0),
      };
    };
    const settle = async (deliveries: number): Promise<void> => {
      for (let waited = 0; waited < 20_000; waited += 50) {
        const now = await totals();
        if (now.deliveries >= deliveries && now.runs >= PAYMENTS) return;
        await sleep(50);
      }
    };
    const emit = (paymentId: string): Promise<unknown> =>
      lastValueFrom(client.emit('payment.captured', { paymentId, amount: 5, ms: 300 }), {
        defaultValue: undefined,
      });

    it('processes each payment once, whether redelivered while it is processed or after', async () => {
      const ids = Array.from({ length: PAYMENTS }, (_, i) => `${channel}-${i}`);
      // Two deliveries of each at once: the second reaches a consumer while the first is processed.
      await Promise.all(ids.flatMap((id) => [emit(id), emit(id)]));
      await settle(2 * PAYMENTS);
      // One more of each, after it was processed.
      await Promise.all(ids.map(emit));
      await settle(3 * PAYMENTS);
      await sleep(200);
      const all = await counts();
      const per = (id: string, of: 'deliveries' | 'runs'): number =>
        all.reduce((n, c) => n + (c[of][id] ?? 0), 0);
      const split = all.map((c) => `${sum(c.deliveries)} deliveries, ${sum(c.runs)} runs`);
      console.log(
        `[messages ${transport}] ${PAYMENTS} payments, 3 deliveries each: ${split.join(' | ')} (consumer 1 | consumer 2)`,
      );
      expect(ids.map((id) => per(id, 'deliveries'))).toEqual(Array(PAYMENTS).fill(3));
      expect(ids.map((id) => per(id, 'runs'))).toEqual(Array(PAYMENTS).fill(1));
    });
  },
);

describe('@Idempotent consumers on rmq, one of them killed mid-message', () => {
  it("hands the message to the other consumer, which processes it once the dead one's lock expired", async () => {
    const channel = `refunds-${process.pid}-${Date.now()}`;
    const env = {
      REDIS_URL: server.url,
      NS: 'mp:messages:killed:',
      TRANSPORT: 'rmq',
      NATS_URL,
      AMQP_URL,
      CHANNEL: channel,
    };
    const doomed = await Worker.start<MessagesCommand, MessagesReply>(
      { ...env, HOLD: '1' },
      WORKER,
    );
    const client = ClientProxyFactory.create({
      transport: Transport.RMQ,
      options: { urls: [AMQP_URL], queue: channel, queueOptions: { durable: false } },
    });
    try {
      await client.connect();
      const paymentId = `${channel}-1`;
      const countsOf = (worker: typeof doomed) =>
        worker.ask<Extract<MessagesReply, Counts>>({ cmd: 'counts' });
      // The only consumer takes it, and dies holding it: unacknowledged, and its lock held.
      await lastValueFrom(client.emit('payment.refunded', { paymentId, amount: 5, ms: 0 }), {
        defaultValue: undefined,
      });
      while (((await countsOf(doomed)).deliveries[paymentId] ?? 0) === 0) await sleep(20);
      const other = await Worker.start<MessagesCommand, MessagesReply>(env, WORKER);
      doomed.process.kill('SIGKILL');
      const killedAt = Date.now();
      let counts = await countsOf(other);
      while ((counts.runs[paymentId] ?? 0) === 0 && Date.now() - killedAt < 10_000) {
        await sleep(20);
        counts = await countsOf(other);
      }
      const after = Date.now() - killedAt;
      console.log(
        `[messages rmq, killed] redelivered to the other consumer ${counts.deliveries[paymentId]} times, processed there ${after} ms after the kill (lock ttl 1.5 s)`,
      );
      await sleep(300);
      counts = await countsOf(other);
      expect(counts.runs[paymentId]).toBe(1);
      expect(counts.deliveries[paymentId]).toBeGreaterThanOrEqual(1);
      // Not before the dead consumer's lock expired: extended every 0.5 s, it lived 1 to 1.5 s on.
      expect(after).toBeGreaterThanOrEqual(900);
      expect(after).toBeLessThan(3_000);
      await other.stop();
    } finally {
      await client.close();
      await doomed.stop();
    }
  });
});
