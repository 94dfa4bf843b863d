import { META, NOTIFICATION, LIST_CHANGED_METHOD, type ListName } from "@mcp-broker/shared";
import { formatEventId, type EventId } from "./event-ids.js";
import { encodeEvent } from "./sse-event.js";

/**
 * One notification on its way to many streams, encoded at most once per era: legacy streams all
 * get the same frame, event id included, in one write; modern streams get the same bytes around
 * their own subscription id.
 */
export class PreparedNotification {
  private legacy: Buffer | undefined;
  private modern: { head: Buffer; tail: Buffer } | undefined;
  private line: string | undefined;

  private constructor(
    private readonly method: string,
    private readonly params: Record<string, unknown>,
    /** Its place in the cluster's order (see `EventId`); legacy streams carry it as the SSE event id. */
    readonly id: EventId,
  ) {}

  /** `id`: the update's (see `EventClock`); a replay passes the id it had when first sent. */
  static resourceUpdated(uri: string, id: EventId): PreparedNotification {
    return new PreparedNotification(NOTIFICATION.resourceUpdated, { uri }, id);
  }

  /** The SSE event id legacy streams carry. */
  get eventId(): string {
    return formatEventId(this.id);
  }

  /** The URI of a `resources/updated`; undefined for any other notification. */
  updatedUri(): string | undefined {
    return this.method === NOTIFICATION.resourceUpdated ? (this.params.uri as string) : undefined;
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
    this.legacy ??= encodeEvent({ jsonrpc: "2.0", method: this.method, params: this.params }, this.eventId);
    return this.legacy;
  }

  /** One newline-terminated JSON-RPC message, for stdio; on a listen stream with its subscription id and cursor (`cursorPrefix` + event id). */
  jsonLine(listen?: { subscriptionId: string | number; cursorPrefix: string }): string {
    if (listen !== undefined) {
      const _meta = { [META.subscriptionId]: listen.subscriptionId, [META.cursor]: `${listen.cursorPrefix}${this.eventId}` };
      return `${JSON.stringify({ jsonrpc: "2.0", method: this.method, params: { ...this.params, _meta } })}\n`;
    }
    this.line ??= `${JSON.stringify({ jsonrpc: "2.0", method: this.method, params: this.params })}\n`;
    return this.line;
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
      const full = encodeEvent({ jsonrpc: "2.0", method: this.method, params: { ...this.params, _meta: { [META.subscriptionId]: id, [META.cursor]: `${cursor}${this.eventId}` } } }).toString("utf8");
      const [head = "", rest = ""] = full.split(JSON.stringify(id));
      const [, tail = ""] = rest.split(JSON.stringify(cursor).slice(1, -1));
      this.modern = { head: Buffer.from(head), tail: Buffer.from(tail) };
    }
    return [this.modern.head, streamPart, this.modern.tail];
  }
}

/** A listen stream's own part of each notification (see `modernBody`): its subscription id, then its cursor up to the event id. */
export function listenStreamPart(subscriptionId: string | number, cursorPrefix: string): Buffer {
  return Buffer.from(`${JSON.stringify(subscriptionId)},${JSON.stringify(META.cursor)}:${JSON.stringify(cursorPrefix).slice(0, -1)}`);
}
