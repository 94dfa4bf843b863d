/**
 * @mcp-broker/client: subscriptions, list auto-reload and content caches for MCP clients, on top
 * of the official SDK v2 client. Works in Node 20+ and in browsers (the library has no Node-only
 * imports; the CLI in cli.ts is separate).
 */
export { BrokerClient } from "./broker-client.js";
export type { BrokerClientEventMap, ResourceContentCause, ResourceContentChange, ResourceUpdateReason, ToolCallResultChange } from "./broker-client-events.js";
export { DEFAULT_CLIENT_INFO, DEFAULT_LIST_CHANGED_DEBOUNCE_MS, DEFAULT_RECONNECT, type BrokerClientOptions, type ReconnectOptions } from "./broker-client-options.js";
export type { EraOption } from "./connection/connection.js";
export type { ConnectionState, ReconnectPolicy } from "./connection/connection-supervisor.js";
export type { CachedPrompt, CachedResource, CachedTemplateResource, CachedToolCall, ContentCacheView, TemplateReadResult } from "./cache/content-cache.js";
export { BrokerClientError, CLIENT_ERROR_CATALOG, type BrokerClientErrorCode } from "./errors.js";
export type { Prompt, Resource, ResourceTemplate, Tool } from "./lists/list-catalog.js";
export { convertPromptArguments, type JsonValue } from "./prompt-arguments.js";
export type { RequestMetadata } from "./request-metadata.js";
export { TypedEventTarget, type TypedEventListener } from "./util/typed-event-target.js";
export { UriTemplateError, type Clock, type TimerHandle, type UriTemplateVariables } from "@mcp-broker/shared";
