// The IPC of test/multi-process/messages.worker.ts: the parent asks what the consumer saw.
export type MessagesCommand = { readonly id: number; readonly cmd: 'counts' };

/** Deliveries of each payment here, and the runs of its handler that completed. */
export interface Counts {
  readonly deliveries: Readonly<Record<string, number>>;
  readonly runs: Readonly<Record<string, number>>;
}

export type MessagesReply = { readonly ready: true } | ({ readonly id: number } & Counts);
