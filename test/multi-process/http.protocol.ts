// The IPC of test/multi-process/http.worker.ts: the parent asks for the port the app listens on.
export type HttpCommand = { readonly id: number; readonly cmd: 'port' };

export type HttpReply = { readonly ready: true } | { readonly id: number; readonly port: number };
