/**
 * Request/response between the orchestrator and its helper processes, over any message link
 * (Node IPC, or JSON lines over a socket for the stdio backend, whose stdio belongs to MCP).
 * One side serves an API, the other calls it; calls are answered in any order, by id.
 */

/** A bidirectional message pipe carrying JSON-serialisable values. */
export interface Link {
  send(message: unknown): void;
  onMessage(listener: (message: unknown) => void): void;
  /** Fires once when the other side is gone. */
  onClose(listener: () => void): void;
}

/** An API: each method takes one params object and returns a value or a promise. */
export type ApiShape = Record<string, (params: never) => unknown>;

type Params<F> = F extends (params: infer P) => unknown ? P : never;

interface RequestMessage {
  rpc: "req";
  id: number;
  method: string;
  params: unknown;
}

interface ResponseMessage {
  rpc: "res";
  id: number;
  ok: boolean;
  result?: unknown;
  error?: string;
}

function isRequest(message: unknown): message is RequestMessage {
  return typeof message === "object" && message !== null && (message as { rpc?: unknown }).rpc === "req";
}

function isResponse(message: unknown): message is ResponseMessage {
  return typeof message === "object" && message !== null && (message as { rpc?: unknown }).rpc === "res";
}

/** Serves `handlers` on `link`; a handler that throws answers the call with its message. */
export function serveRpc<A extends ApiShape>(link: Link, handlers: A): void {
  link.onMessage((message) => {
    if (!isRequest(message)) return;
    const handler = handlers[message.method] as ((params: unknown) => unknown) | undefined;
    const reply = (response: Omit<ResponseMessage, "rpc" | "id">): void => link.send({ rpc: "res", id: message.id, ...response });
    if (handler === undefined) {
      reply({ ok: false, error: `unknown method ${message.method}` });
      return;
    }
    Promise.resolve()
      .then(() => handler(message.params))
      .then(
        (result) => reply({ ok: true, result: result ?? null }),
        (error: unknown) => reply({ ok: false, error: error instanceof Error ? (error.stack ?? error.message) : String(error) }),
      );
  });
}

/** Calls an API served on the other end of `link`. Pending calls fail when the link closes. */
export class RpcClient<A extends ApiShape> {
  private nextId = 0;
  private readonly pending = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void; method: string }>();
  private closed = false;

  constructor(
    private readonly link: Link,
    private readonly name: string,
  ) {
    link.onMessage((message) => {
      if (!isResponse(message)) return;
      const waiter = this.pending.get(message.id);
      if (waiter === undefined) return;
      this.pending.delete(message.id);
      if (message.ok) waiter.resolve(message.result);
      else waiter.reject(new Error(`${this.name}.${waiter.method}: ${message.error ?? "failed"}`));
    });
    link.onClose(() => {
      this.closed = true;
      for (const waiter of this.pending.values()) waiter.reject(new Error(`${this.name} exited during ${waiter.method}`));
      this.pending.clear();
    });
  }

  call<K extends keyof A & string>(method: K, params: Params<A[K]>): Promise<Awaited<ReturnType<A[K]>>> {
    if (this.closed) return Promise.reject(new Error(`${this.name} is gone (calling ${method})`));
    const id = ++this.nextId;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (value: unknown) => void, reject, method });
      this.link.send({ rpc: "req", id, method, params });
    });
  }
}
