import { connect } from 'node:net';

/** The message brokers the microservice tests use: NATS and RabbitMQ on this machine. */
export const NATS_URL = process.env['NATS_URL'] ?? 'nats://127.0.0.1:4222';
export const AMQP_URL = process.env['AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';

/** Throws with an install hint when nothing answers at `url` (the CI starts both brokers). */
export async function requireBroker(url: string): Promise<void> {
  const { hostname, port } = new URL(url);
  const reached = await new Promise<boolean>((resolve) => {
    const socket = connect(Number(port), hostname);
    socket.setTimeout(2_000, () => (socket.destroy(), resolve(false)));
    socket.once('connect', () => (socket.end(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
  if (!reached) {
    throw new Error(
      `Nothing answers at ${hostname}:${port}. The microservice tests need NATS (nats-server -p ` +
        `4222) and RabbitMQ (rabbitmq-server); bash .ci/run installs and starts both, or set ` +
        `NATS_URL and AMQP_URL.`,
    );
  }
}
