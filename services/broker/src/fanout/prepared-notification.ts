import { META, NOTIFICATION, LIST_CHANGED_METHOD, type ListName } from "@mcp-broker/shared";
import { formatEventId, type EventId } from "./event-ids.js";
import { chunkBody, encodeEvent, httpChunk } from "./sse-event.js";

/**
 * One notification on its way to many streams, encoded at most once per era: legacy streams all
 * get the same frame, event id included, in one write; modern streams get the same bytes around
 * their own subscription id.
 */
export class PreparedNotification {
  /** The legacy frame as an HTTP/1.1 chunk (see `legacyChunk`), and the frame inside it. */
  private legacy: { chunk: Buffer; frame: Buffer } | undefined;
  private modern: { head: Buffer; tail: Buffer } | undefined;
  private line: string | undefined;

  private constructor(
    private readonly method: string,
    private readonly params: Record<string, unknown>,
    /** Its place in the cluster's order (see `EventId`); legacy streams carry it as the SSE event id. */
    readonly id: EventId,
    /**
     * The URI of a `resources/updated` that says nothing but its URI, which with its id makes it
     * again (a session's history keeps such an update so); undefined for any other notification.
     */
    readonly bareUpdatedUri?: string,
  ) {}

  /**
   * `id`: the update's (see `EventClock`); a replay passes the id it had when first sent.
   * `passedOn`: what the backend said besides the URI (`_meta` and the rest), kept as it came; only
   * the URI is the broker's.
   */
  static resourceUpdated(uri: string, id: EventId, passedOn?: Record<string, unknown>): PreparedNotification {
    if (passedOn === undefined) return new PreparedNotification(NOTIFICATION.resourceUpdated, { uri }, id, uri);
    const params = { uri, ...passedOn };
    params.uri = uri;
    return new PreparedNotification(NOTIFICATION.resourceUpdated, params, id);
  }

  /** The SSE event id legacy streams carry. */
  get eventId(): string {
    return formatEventId(this.id);
  }

  /** What it tells of, for telling repeats apart: the resource of a `resources/updated`, the list of a `list_changed`; undefined for anything else. */
  subject(): string | undefined {
    if (this.method === NOTIFICATION.resourceUpdated) return `resource ${this.params.uri as string}`;
    return this.method.endsWith("/list_changed") ? this.method : undefined;
  }

  static listChanged(list: ListName, id: EventId): PreparedNotification {
    return new PreparedNotification(LIST_CHANGED_METHOD[list], {}, id);
  }

  /** A log message from the broker itself (`notifications/message`, logger `mcp-broker`). */
  static brokerMessage(level: "warning" | "error", data: Record<string, unknown>, id: EventId): PreparedNotification {
    return new PreparedNotification(NOTIFICATION.message, { level, logger: "mcp-broker", data }, id);
  }

  /** The whole SSE event for legacy streams, its id line included. */
  legacyFrame(): Buffer {
    return this.encodedLegacy().frame;
  }

  /** `legacyFrame` as one HTTP/1.1 chunk, the same bytes for every chunked stream (see `SseStream.write`). */
  legacyChunk(): Buffer {
    return this.encodedLegacy().chunk;
  }

  private encodedLegacy(): { chunk: Buffer; frame: Buffer } {
    if (this.legacy === undefined) {
      const chunk = httpChunk(encodeEvent({ jsonrpc: "2.0", method: this.method, params: this.params }, this.eventId));
      this.legacy = { chunk, frame: chunkBody(chunk) };
    }
    return this.legacy;
  }

  /** One newline-terminated JSON-RPC message, for stdio; on a listen stream with its subscription id and cursor (`cursorPrefix` + event id). */
  jsonLine(listen?: { subscriptionId: string | number; cursorPrefix: string }): string {
    if (listen !== undefined) {
      const params = this.withListenMeta(listen.subscriptionId, `${listen.cursorPrefix}${this.eventId}`);
      return `${JSON.stringify({ jsonrpc: "2.0", method: this.method, params })}\n`;
    }
    this.line ??= `${JSON.stringify({ jsonrpc: "2.0", method: this.method, params: this.params })}\n`;
    return this.line;
  }

  /**
   * The params as a listen stream carries them: `_meta` last, holding the backend's own `_meta` (if
   * any) followed by the stream's subscription id and cursor, which are the broker's to say.
   */
  private withListenMeta(subscriptionId: string | number, cursor: string): Record<string, unknown> {
    // Copied key by key: a rest-destructure and `{ ...rest, _meta }` took ~0.7 µs (V8 adds a property
    // to a spread's copy on its slow path), a loop ~0.04 µs (micro-benchmark).
    const params: Record<string, unknown> = {};
    for (const key of Object.keys(this.params)) if (key !== "_meta") setOwn(params, key, this.params[key]);
    const passedOn = this.params._meta;
    const _meta: Record<string, unknown> = {};
    if (typeof passedOn === "object" && passedOn !== null && !Array.isArray(passedOn)) {
      for (const [key, value] of Object.entries(passedOn)) if (key !== META.subscriptionId && key !== META.cursor) setOwn(_meta, key, value);
    }
    _meta[META.subscriptionId] = subscriptionId;
    _meta[META.cursor] = cursor;
    params._meta = _meta;
    return params;
  }

  /**
   * The SSE event body for a modern listen stream, in three parts: the same bytes for every stream
   * around the stream's own part (`listenStreamPart`: its subscription id and cursor prefix), after
   * which this notification's event id ends the cursor.
   */
  modernBody(streamPart: Buffer): Buffer[] {
    if (this.modern === undefined) {
      const id = "\u0000SUBSCRIPTION_ID\u0000";
      const cursor = "\u0000CURSOR\u0000";
      const full = encodeEvent({ jsonrpc: "2.0", method: this.method, params: this.withListenMeta(id, `${cursor}${this.eventId}`) }).toString("utf8");
      // The stream's part is the last thing in the params (see `withListenMeta`), whatever the backend's `_meta` holds.
      const idAt = full.lastIndexOf(JSON.stringify(id));
      const cursorEnd = full.lastIndexOf(JSON.stringify(cursor).slice(1, -1)) + JSON.stringify(cursor).length - 2;
      this.modern = { head: Buffer.from(full.slice(0, idAt)), tail: Buffer.from(full.slice(cursorEnd)) };
    }
    return [this.modern.head, streamPart, this.modern.tail];
  }
}

/**
 * A listen stream's own part of each notification (see `modernBody`): its subscription id, then its
 * cursor up to the event id. Kept for the life of the stream, so it has memory of its own: a
 * `Buffer.from` slice of Node's shared 8 KB pool kept its whole slab alive (~0.8 KB per idle
 * listen stream in the bench's heap snapshots).
 */
export function listenStreamPart(subscriptionId: string | number, cursorPrefix: string): Buffer {
  const text = `${JSON.stringify(subscriptionId)},${JSON.stringify(META.cursor)}:${JSON.stringify(cursorPrefix).slice(0, -1)}`;
  const part = Buffer.allocUnsafeSlow(Buffer.byteLength(text));
  part.write(text);
  return part;
}

/** `target[key] = value` as a data property of its own, also for a key such as `__proto__` (JSON can carry one). */
function setOwn(target: Record<string, unknown>, key: string, value: unknown): void {
  if (key === "__proto__") Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
  else target[key] = value;
}
