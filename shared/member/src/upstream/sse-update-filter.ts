import { NOTIFICATION } from "@mcp-broker/shared";
import { messageData, type EventTap } from "./backend-http.js";

/** The params of a backend's `resources/updated`: its URI, and whatever else it said. */
export type UpdatedParams = { readonly uri: string } & Readonly<Record<string, unknown>>;

/**
 * The tap (see `BackendHttp`) that takes `notifications/resources/updated` events (the hot path)
 * out of a backend's event-stream responses and hands their params to `onUpdate` at once, skipping
 * the SDK's web-stream SSE parsing and JSON-RPC schema validation (which cost a broker with an HTTP
 * backend more than twice the CPU of one with a stdio backend, and its tail latency with it).
 * Every other event, and anything that is not a plain `resources/updated` notification, is kept,
 * in order.
 *
 * The SDK does not see the ids of the events taken out, so a resumption may start a little earlier
 * than it could and replay some updates: an extra `updated` is harmless, a missed one is not.
 */
export function updatedEventTap(onUpdate: (params: UpdatedParams) => void): EventTap {
  return (event) => {
    const params = updatedParams(event);
    if (params === undefined) return true;
    onUpdate(params);
    return false;
  };
}

/** The params of an event that is exactly a `resources/updated` notification (data lines, an optional id, comments); otherwise undefined. */
function updatedParams(event: string): UpdatedParams | undefined {
  if (!event.includes(NOTIFICATION.resourceUpdated)) return undefined;
  const data = messageData(event);
  if (data === undefined) return undefined;
  let message: unknown;
  try {
    message = JSON.parse(data);
  } catch {
    return undefined;
  }
  const candidate = message as { jsonrpc?: unknown; method?: unknown; id?: unknown; params?: { uri?: unknown } } | null;
  if (candidate === null || typeof candidate !== "object" || candidate.jsonrpc !== "2.0" || candidate.method !== NOTIFICATION.resourceUpdated || candidate.id !== undefined) return undefined;
  return typeof candidate.params?.uri === "string" ? (candidate.params as UpdatedParams) : undefined;
}
