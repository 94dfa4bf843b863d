import { specTypeSchemas } from "@modelcontextprotocol/server";
import { BrokerError } from "@mcp-broker/shared";
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
  return params;
}
