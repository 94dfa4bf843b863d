/**
 * The one place that spells MCP notification method names. Internal events (a resource was
 * updated, a list changed) are mapped to wire methods here and nowhere else.
 */
export const NOTIFICATION = {
  resourceUpdated: "notifications/resources/updated",
  toolsListChanged: "notifications/tools/list_changed",
  promptsListChanged: "notifications/prompts/list_changed",
  resourcesListChanged: "notifications/resources/list_changed",
  progress: "notifications/progress",
  message: "notifications/message",
  cancelled: "notifications/cancelled",
  initialized: "notifications/initialized",
  subscriptionsAcknowledged: "notifications/subscriptions/acknowledged",
} as const;

export type ListName = "tools" | "prompts" | "resources";

export const LIST_CHANGED_METHOD: Record<ListName, (typeof NOTIFICATION)[keyof typeof NOTIFICATION]> = {
  tools: NOTIFICATION.toolsListChanged,
  prompts: NOTIFICATION.promptsListChanged,
  resources: NOTIFICATION.resourcesListChanged,
};

/** The modern (2026-07-28) `_meta` keys the broker reads or writes. */
export const META = {
  protocolVersion: "io.modelcontextprotocol/protocolVersion",
  clientInfo: "io.modelcontextprotocol/clientInfo",
  clientCapabilities: "io.modelcontextprotocol/clientCapabilities",
  logLevel: "io.modelcontextprotocol/logLevel",
  serverInfo: "io.modelcontextprotocol/serverInfo",
  subscriptionId: "io.modelcontextprotocol/subscriptionId",
  /** The broker's resume cursor on every listen-stream notification, and in a listen request to resume from (an extension). */
  cursor: "io.mcp-broker/cursor",
  /** In a listen acknowledgement: how the broker resumed from the request's cursor (`exact`, `everything`). */
  resumed: "io.mcp-broker/resumed",
  /** In a listen acknowledgement: the URIs left out of the honored filter, each with the JSON-RPC error that refused it (an extension). */
  refused: "io.mcp-broker/refused",
} as const;

export const MODERN_PROTOCOL_VERSION = "2026-07-28";
export const LEGACY_PROTOCOL_VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"] as const;

/** Requests whose result may be an InputRequiredResult (2026-07-28): the backend asks its client something first. */
export const INPUT_REQUIRED_METHODS: ReadonlySet<string> = new Set(["tools/call", "prompts/get", "resources/read"]);

/** A JSON object (not null, not an array), as JSON-RPC messages, params and results are. */
export function isJsonObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
