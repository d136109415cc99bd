import { connect } from 'node:net';
import type { Redis } from 'ioredis';

/** One command MONITOR saw: the client's address (or `lua` inside a script) and its arguments. */
export interface MonitoredCommand {
  readonly source: string;
  readonly args: string[];
}

/**
 * Starts MONITOR on a socket of its own to the server `client` talks to, and resolves, once
 * MONITOR is on, to a function that stops it. Not ioredis's `monitor()`: it enters its monitoring
 * state a tick after MONITOR's OK, so a command of another client that arrives in the same read
 * is taken for a reply with no command ("Command queue state error") and lost.
 */
export function monitor(
  client: Redis,
  onCommand: (command: MonitoredCommand) => void,
): Promise<() => void> {
  const { host = '127.0.0.1', port = 6379 } = client.options;
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    let on = false;
    let pending = '';
    const stop = (): void => void socket.destroy();
    socket.setEncoding('latin1');
    socket.on('error', (error) => {
      if (!on) reject(error);
    });
    socket.on('connect', () => socket.write('MONITOR\r\n'));
    socket.on('data', (chunk: string) => {
      pending += chunk;
      let end: number;
      while ((end = pending.indexOf('\r\n')) >= 0) {
        const line = pending.slice(0, end);
        pending = pending.slice(end + 2);
        if (!on) {
          if (line !== '+OK') {
            stop();
            return reject(new Error(`MONITOR was refused: ${line}`));
          }
          on = true;
          resolve(stop);
        } else {
          const command = parseLine(line);
          if (command) onCommand(command);
        }
      }
    });
  });
}

/** `+1796221691.201925 [0 127.0.0.1:49154] "hello" "3"`; arguments as redis-server quotes them. */
function parseLine(line: string): MonitoredCommand | undefined {
  const open = line.indexOf('[');
  const close = line.indexOf('] ', open);
  if (!line.startsWith('+') || open < 0 || close < 0) return undefined;
  const source = line.slice(open + 1, close).split(' ')[1] ?? '';
  const args: string[] = [];
  let bytes: number[] = [];
  let quoted = false;
  for (let i = close + 2; i < line.length; i++) {
    const c = line[i]!;
    if (!quoted) {
      if (c === '"') {
        quoted = true;
        bytes = [];
      }
      continue;
    }
    if (c === '"') {
      args.push(Buffer.from(bytes).toString('utf8'));
      quoted = false;
    } else if (c !== '\\') {
      bytes.push(c.charCodeAt(0));
    } else {
      const next = line[++i]!;
      if (next === 'x') {
        bytes.push(parseInt(line.slice(i + 1, i + 3), 16));
        i += 2;
      } else {
        const escaped: Record<string, string> = { n: '\n', r: '\r', t: '\t', a: '\x07', b: '\b' };
        bytes.push((escaped[next] ?? next).charCodeAt(0));
      }
    }
  }
  return { source, args };
}
