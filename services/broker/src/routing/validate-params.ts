import { specTypeSchemas } from "@modelcontextprotocol/server";
import { BrokerError, INPUT_REQUIRED_METHODS, isJsonObject, MAX_URI_BYTES, MAX_URI_SLASHES } from "@mcp-broker/shared";
import { LOG_LEVELS, type LogLevel } from "./request-context.js";

type Params = Record<string, unknown>;

const PARAM_SCHEMAS: Record<string, keyof typeof specTypeSchemas> = {
  initialize: "InitializeRequestParams",
  "tools/call": "CallToolRequestParams",
  "prompts/get": "GetPromptRequestParams",
  "resources/read": "ReadResourceRequestParams",
  "resources/subscribe": "SubscribeRequestParams",
  "resources/unsubscribe": "UnsubscribeRequestParams",
  "completion/complete": "CompleteRequestParams",
  "logging/setLevel": "SetLevelRequestParams",
  "tools/list": "PaginatedRequestParams",
  "prompts/list": "PaginatedRequestParams",
  "resources/list": "PaginatedRequestParams",
  "resources/templates/list": "PaginatedRequestParams",
  "subscriptions/listen": "SubscriptionsListenRequestParams",
};

/** Checks `params` against the spec schema of `method`. @throws BrokerError (BAD_PARAMS) naming each bad field. */
export function validateParams(method: string, params: Params): Params {
  const schemaName = Object.hasOwn(PARAM_SCHEMAS, method) ? PARAM_SCHEMAS[method] : undefined;
  if (schemaName === undefined) return params;
  const outcome = specTypeSchemas[schemaName]["~standard"].validate(params);
  if (outcome instanceof Promise) return params;
  if (outcome.issues !== undefined) {
    const detail = outcome.issues.map((i) => `${(i.path ?? []).map((p) => (typeof p === "object" ? String(p.key) : String(p))).join(".") || "params"}: ${i.message}`);
    throw new BrokerError("BAD_PARAMS", `Invalid params for ${method}: ${detail.join("; ")}`, { issues: detail });
  }
  if (method === "logging/setLevel" && !LOG_LEVELS.includes(params.level as LogLevel)) {
    throw new BrokerError("BAD_PARAMS", `Unknown log level '${String(params.level)}'.`);
  }
  for (const [field, uri] of clientUris(method, params)) checkUriLimits(field, uri);
  if (params.inputResponses !== undefined && INPUT_REQUIRED_METHODS.has(method)) checkInputResponses(method, params.inputResponses);
  return params;
}

/** What a client may answer a question of a server with (2026-07-28 `InputResponse`). */
const INPUT_RESPONSE_SCHEMAS = (["CreateMessageResult", "CreateMessageResultWithTools", "ListRootsResult", "ElicitResult"] as const).map((name) => specTypeSchemas[name]["~standard"]);

/**
 * A retry's `inputResponses` (2026-07-28 `InputResponses`): an object whose every value is a
 * sampling, roots or elicitation result. The SDK's params schemas do not know the field, and what
 * is in it goes on to a backend (a modern one gets it as sent).
 * @throws BrokerError (BAD_PARAMS) naming the first bad entry.
 */
function checkInputResponses(method: string, responses: unknown): void {
  if (!isJsonObject(responses)) throw new BrokerError("BAD_PARAMS", `Invalid params for ${method}: inputResponses: an object of answers, keyed as the inputRequests were, was expected.`, { issues: ["inputResponses: not an object"] });
  for (const [key, answer] of Object.entries(responses)) {
    if (INPUT_RESPONSE_SCHEMAS.some((schema) => (schema.validate(answer) as { issues?: unknown }).issues === undefined)) continue;
    throw new BrokerError("BAD_PARAMS", `Invalid params for ${method}: inputResponses.${key}: not a sampling (CreateMessageResult), roots (ListRootsResult) or elicitation (ElicitResult) result.`, {
      issues: [`inputResponses.${key}: not an InputResponse`],
    });
  }
}

/**
 * The resource URIs a valid request names, by field: every way a client URI reaches a catalog
 * lookup, so the limits are checked here once, and never on the path of a backend's updates.
 */
function clientUris(method: string, params: Params): [string, string][] {
  switch (method) {
    case "resources/read":
    case "resources/subscribe":
    case "resources/unsubscribe":
      return [["uri", params.uri as string]];
    case "completion/complete": {
      const ref = params.ref as Params;
      return ref.type === "ref/resource" ? [["ref.uri", ref.uri as string]] : [];
    }
    case "subscriptions/listen": {
      const uris = (params.notifications as { resourceSubscriptions?: string[] }).resourceSubscriptions ?? [];
      return uris.map((uri, i) => [`notifications.resourceSubscriptions.${i}`, uri]);
    }
    default:
      return [];
  }
}

/** @throws BrokerError (BAD_PARAMS) for a URI over MAX_URI_BYTES or MAX_URI_SLASHES: looking it up would cost too much. */
export function checkUriLimits(field: string, uri: string): void {
  const bytes = Buffer.byteLength(uri, "utf8");
  if (bytes > MAX_URI_BYTES) {
    throw new BrokerError("BAD_PARAMS", `URI too long: params.${field} has ${bytes} bytes; the limit is ${MAX_URI_BYTES} bytes (UTF-8).`, { field, maxBytes: MAX_URI_BYTES });
  }
  let slashes = 0;
  for (let i = uri.indexOf("/"); i >= 0 && slashes <= MAX_URI_SLASHES; i = uri.indexOf("/", i + 1)) slashes++;
  if (slashes > MAX_URI_SLASHES) {
    throw new BrokerError("BAD_PARAMS", `URI too long: params.${field} has more than ${MAX_URI_SLASHES} '/' (path segments); the limit is ${MAX_URI_SLASHES}.`, { field, maxSlashes: MAX_URI_SLASHES });
  }
}
