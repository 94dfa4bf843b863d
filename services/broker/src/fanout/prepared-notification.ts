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

  /** One newline-terminated JSON-RPC message, for stdio. */
  jsonLine(subscriptionId?: string | number): string {
    if (subscriptionId !== undefined) {
      return `${JSON.stringify({ jsonrpc: "2.0", method: this.method, params: { ...this.params, _meta: { [META.subscriptionId]: subscriptionId } } })}\n`;
    }
    this.line ??= `${JSON.stringify({ jsonrpc: "2.0", method: this.method, params: this.params })}\n`;
    return this.line;
  }

  /** The SSE event body for a modern listen stream, tagged with its subscription id (JSON-encoded). */
  modernBody(subscriptionIdJson: string): Buffer[] {
    if (this.modern === undefined) {
      const marker = "\u0000SUBSCRIPTION_ID\u0000";
      const full = encodeEvent({ jsonrpc: "2.0", method: this.method, params: { ...this.params, _meta: { [META.subscriptionId]: marker } } }).toString("utf8");
      const [head = "", tail = ""] = full.split(JSON.stringify(marker));
      this.modern = { head: Buffer.from(head), tail: Buffer.from(tail) };
    }
    return [this.modern.head, Buffer.from(subscriptionIdJson), this.modern.tail];
  }
}
