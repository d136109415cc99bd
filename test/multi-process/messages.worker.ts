/**
 * A consumer process of test/multi-process/messages.spec.ts: a Nest microservice on NATS (a
 * queue group) or RabbitMQ (one queue, acknowledged by hand), on the Redis at REDIS_URL. Its
 * `payment.captured` handler is `@Idempotent` by the payment's id and waits for a delivery of the
 * same payment in progress elsewhere; `payment.refunded` holds its lock for 1.5 s, and with
 * HOLD=1 never finishes. `counts` answers with every delivery it got and every run
 * of the handler it completed. Environment: REDIS_URL, NS, TRANSPORT (`nats` or `rmq`),
 * NATS_URL, AMQP_URL, CHANNEL (the queue, or the queue group), HOLD.
 */
/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import 'reflect-metadata';
import {
  Controller,
  Injectable,
  Module,
  UseInterceptors,
  type CallHandler,
  type ExecutionContext,
  type NestInterceptor,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  EventPattern,
  Payload,
  RmqContext,
  Transport,
  type MicroserviceOptions,
} from '@nestjs/microservices';
import { tap, type Observable } from 'rxjs';
import { BufferLockModule, Idempotent } from '../../lib/index.js';
import type { MessagesCommand, MessagesReply } from './messages.protocol.js';

const send = (reply: MessagesReply): void => void process.send!(reply);
const rmq = process.env['TRANSPORT'] === 'rmq';
const deliveries: Record<string, number> = {};
const runs: Record<string, number> = {};

interface Payment {
  readonly paymentId: string;
  readonly amount: number;
  /** How long capturing it takes, in ms. */
  readonly ms: number;
}

/** Counts each delivery; on RabbitMQ, acknowledges it once handled (or requeues it on an error). */
@Injectable()
class DeliveryInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const { paymentId } = context.switchToRpc().getData<Payment>();
    deliveries[paymentId] = (deliveries[paymentId] ?? 0) + 1;
    if (!rmq) return next.handle();
    const message = context.switchToRpc().getContext<RmqContext>();
    const channel = message.getChannelRef() as {
      ack(message: unknown): void;
      nack(message: unknown, allUpTo: boolean, requeue: boolean): void;
    };
    return next.handle().pipe(
      tap({
        complete: () => channel.ack(message.getMessage()),
        error: () => channel.nack(message.getMessage(), false, true),
      }),
    );
  }
}

const paymentIdOf = (context: ExecutionContext): string =>
  context.switchToRpc().getData<Payment>().paymentId;

@Controller()
@UseInterceptors(DeliveryInterceptor)
class PaymentsController {
  /** With HOLD=1, a refund never ends here: only this process's death lets go of it. */
  @EventPattern('payment.refunded')
  @Idempotent({ key: paymentIdOf, onBusy: 'wait', lockTimeout: 0.5, ttl: 1.5 })
  async refund(@Payload() payment: Payment): Promise<{ refunded: string }> {
    if (process.env['HOLD'] === '1') await new Promise(() => {});
    runs[payment.paymentId] = (runs[payment.paymentId] ?? 0) + 1;
    return { refunded: payment.paymentId };
  }

  @EventPattern('payment.captured')
  @Idempotent({ key: paymentIdOf, onBusy: 'wait', lockTimeout: 10, ttl: 15 })
  async capture(@Payload() payment: Payment): Promise<{ captured: string }> {
    await new Promise((resolve) => setTimeout(resolve, payment.ms));
    runs[payment.paymentId] = (runs[payment.paymentId] ?? 0) + 1;
    return { captured: payment.paymentId };
  }
}

@Module({
  imports: [
    BufferLockModule.forRoot({
      redis: process.env['REDIS_URL']!,
      namespace: process.env['NS']!,
      logger: { log() {}, warn() {}, error() {} },
    }),
  ],
  controllers: [PaymentsController],
})
class MessagesWorkerModule {}

const channel = process.env['CHANNEL']!;
const transport: MicroserviceOptions = rmq
  ? {
      transport: Transport.RMQ,
      options: {
        urls: [process.env['AMQP_URL']!],
        queue: channel,
        queueOptions: { durable: false },
        noAck: false,
        prefetchCount: 10,
      },
    }
  : {
      transport: Transport.NATS,
      options: { servers: [process.env['NATS_URL']!], queue: channel },
    };
const app = await NestFactory.createMicroservice<MicroserviceOptions>(MessagesWorkerModule, {
  ...transport,
  logger: false,
});
await app.listen();

process.on('message', (command: MessagesCommand) => send({ id: command.id, deliveries, runs }));
process.on('disconnect', () => void app.close().then(() => process.exit(0)));
send({ ready: true });
