import type { JSONRPCMessage, Transport } from "@modelcontextprotocol/client";

/** The `_meta` key of mcp-broker's resume cursor (an extension a server without it never sends). */
export const CURSOR_META = "io.mcp-broker/cursor";
/** The `_meta` key with which mcp-broker acknowledges a listen that gave a cursor: how it resumed. */
export const RESUMED_META = "io.mcp-broker/resumed";
/** The `_meta` key with which mcp-broker acknowledges a listen: each URI left out of the honored filter, with the error that refused it. */
export const REFUSED_META = "io.mcp-broker/refused";

/** The JSON-RPC error a server gave for a URI it left out of a listen's honored filter. */
export interface RefusalReason {
  code: number;
  message: string;
  data?: unknown;
}

const ACKNOWLEDGED = "notifications/subscriptions/acknowledged";

type Message = { method?: unknown; params?: { _meta?: Record<string, unknown> } };

/**
 * The resume cursor of a client's listen streams: the last one a server wrote on a notification
 * or an acknowledgement. Kept across connections, so that a listen reopened after any drop (or on
 * another broker of a fleet) asks to resume from there, and the broker sends what changed
 * meanwhile. A server that does not know the extension never writes one, and ignores it in requests.
 */
export class ListenCursor {
  private last: string | undefined;
  private resuming = true;
  private resumed: unknown;
  private refusals = new Map<string, RefusalReason>();

  get value(): string | undefined {
    return this.last;
  }

  /**
   * Whether the listens sent from now on ask to resume from the cursor: a stream reopened after a
   * drop, or restored on a new connection, does; one that replaces an open stream to change its
   * filter does not (the open stream covers the overlap, and a resumption would tell the URIs
   * just added as updated: the broker cannot know that the earlier stream did not hold them).
   */
  resume(on: boolean): void {
    this.resuming = on;
  }

  /**
   * Hooks `transport` before the client connects over it: each `subscriptions/listen` it sends
   * carries the last cursor (the SDK's `listen()` takes no `_meta`), and each message it delivers
   * is looked at first (the cursor of notifications, how an acknowledged listen resumed).
   */
  attach<T extends Transport>(transport: T): T {
    const send = transport.send.bind(transport);
    transport.send = (message, options) => send(this.annotate(message), options);
    this.interceptHandler(transport);
    return transport;
  }

  /**
   * Whether the last acknowledged listen resumed exactly from the cursor it gave (the broker
   * sent every change since, so nothing needs re-checking); asking forgets the answer.
   */
  takeExactResume(): boolean {
    const exact = this.resumed === "exact";
    this.resumed = undefined;
    return exact;
  }

  /**
   * Why the last acknowledged listen left URIs out of its honored filter, by URI (empty when the
   * server said nothing: one without the extension); asking forgets the answer.
   */
  takeRefusals(): ReadonlyMap<string, RefusalReason> {
    const refusals = this.refusals;
    this.refusals = new Map();
    return refusals;
  }

  /** Wraps whatever `onmessage` handler is set on `transport` from now on, keeping any accessor it already has. */
  private interceptHandler(transport: Transport): void {
    const own = Object.getOwnPropertyDescriptor(transport, "onmessage");
    let plain = own?.value as Transport["onmessage"];
    const get = own?.get?.bind(transport) ?? (() => plain);
    const set = own?.set?.bind(transport) ?? ((next: Transport["onmessage"]) => void (plain = next));
    Object.defineProperty(transport, "onmessage", {
      configurable: true,
      enumerable: true,
      get,
      set: (handler: Transport["onmessage"]) =>
        set(
          handler === undefined
            ? undefined
            : (message: JSONRPCMessage, extra?: Parameters<NonNullable<Transport["onmessage"]>>[1]) => {
                this.note(message);
                handler(message, extra);
              },
        ),
    });
  }

  private note(message: JSONRPCMessage): void {
    const { method, params } = message as Message;
    if (typeof method !== "string") return;
    const cursor = params?._meta?.[CURSOR_META];
    if (typeof cursor === "string") this.last = cursor;
    if (method !== ACKNOWLEDGED) return;
    this.resumed = params?._meta?.[RESUMED_META];
    this.refusals = refusalsOf(params?._meta?.[REFUSED_META]);
  }

  private annotate(message: JSONRPCMessage): JSONRPCMessage {
    const request = message as Message;
    if (request.method !== "subscriptions/listen" || this.last === undefined || !this.resuming) return message;
    return { ...message, params: { ...request.params, _meta: { ...request.params?._meta, [CURSOR_META]: this.last } } };
  }
}

/** `_meta["io.mcp-broker/refused"]` read leniently: entries not of the documented shape are skipped. */
function refusalsOf(value: unknown): Map<string, RefusalReason> {
  const refusals = new Map<string, RefusalReason>();
  if (!Array.isArray(value)) return refusals;
  for (const entry of value as unknown[]) {
    const { uri, error } = (entry ?? {}) as { uri?: unknown; error?: { code?: unknown; message?: unknown; data?: unknown } };
    if (typeof uri !== "string" || typeof error?.code !== "number" || typeof error.message !== "string") continue;
    refusals.set(uri, { code: error.code, message: error.message, ...(error.data !== undefined && { data: error.data }) });
  }
  return refusals;
}
