/**
 * The broker's error catalog. Local errors carry a stable string code; the MCP edge is the only
 * place that turns them into JSON-RPC errors (see `jsonRpcCode`). Never branch on a message.
 *
 * The catalog is documented in the README's error table; a unit test fails when the two drift.
 */
export const ERROR_CATALOG = {
  BAD_PARAMS: { jsonRpc: -32602, summary: "The request's params are missing or malformed." },
  UNKNOWN_TOOL: { jsonRpc: -32602, summary: "No tool of that name is in the aggregated list." },
  UNKNOWN_PROMPT: { jsonRpc: -32602, summary: "No prompt of that name is in the aggregated list." },
  UNKNOWN_RESOURCE: {
    jsonRpc: -32002,
    modernJsonRpc: -32602,
    summary: "The URI names no listed resource, template match or sub-resource (data.uri).",
  },
  UNKNOWN_METHOD: { jsonRpc: -32601, summary: "The method is not one the broker serves." },
  BACKEND_UNAVAILABLE: {
    jsonRpc: -32000,
    summary: "The backend that owns the item is not connected right now, or is connected but its list of that kind has not loaded (data.backend); retry later.",
  },
  BACKEND_TIMEOUT: {
    jsonRpc: -32001,
    summary: "The backend did not answer within its configured timeout (data.backend, data.timeoutMs).",
  },
  BACKEND_INVALID_RESPONSE: {
    jsonRpc: -32003,
    summary:
      "The backend's answer to this one request was unusable (malformed or unsupported result; data.backend, data.reason; `too-large`: an answer over 10 MiB, on a stdio backend's one line, or an HTTP backend's body or event, not read on); the backend stays connected.",
  },
  CLUSTER_UNAVAILABLE: {
    jsonRpc: -32004,
    summary: "The cluster's shared state (Redis engine) did not answer or refused (out of memory), so a subscribe or unsubscribe could not be confirmed, a new session (initialize) could not be recorded, or a session held in it could not be adopted (HTTP 503); retry later (retrying is safe).",
  },
  STARTING: {
    jsonRpc: -32005,
    summary: "This broker instance is starting and does not serve yet (server.whileStarting: refuse), or is stopping (HTTP 503 with Retry-After); nothing was done, so retrying is safe, and a load balancer sends the retry to another instance.",
  },
  SUBSCRIPTION_LIMIT: {
    jsonRpc: -32010,
    summary: "A subscription limit was reached (data.limit: session | principal | global, data.max, and the refused data.uri).",
  },
  SESSION_LIMIT: {
    jsonRpc: -32011,
    summary: "The principal holds server.maxSessionsPerPrincipal sessions and listen streams on this instance already (data.max); end one first. Refusing to adopt a session another instance holds, HTTP 503 and nothing done: the session stays with its holder.",
  },
  TOOL_HELD: {
    jsonRpc: -32012,
    summary: "The tool's definition changed, or the tool appeared, after its backend's tools were pinned (toolChanges: hold); it stays hidden until an operator pins its hash (data.backend, data.name, data.hash).",
  },
  CAPABILITY_MISSING: {
    jsonRpc: -32601,
    summary: "The owning backend does not offer this capability (data.backend).",
  },
  INTERNAL: { jsonRpc: -32603, summary: "An unexpected failure inside the broker; see its log." },
} as const satisfies Record<string, { jsonRpc: number; modernJsonRpc?: number; summary: string }>;

export type BrokerErrorCode = keyof typeof ERROR_CATALOG;

export class BrokerError extends Error {
  override readonly name = "BrokerError";
  /** A backend's own JSON-RPC error code, carried as it is where a broker error is expected (see `passedOn`). */
  readonly wire: number | undefined;
  constructor(
    readonly code: BrokerErrorCode,
    message: string,
    readonly data?: Record<string, unknown>,
    options?: { cause?: unknown; wire?: number },
  ) {
    super(message, options);
    this.wire = options?.wire;
  }

  /** A backend's own JSON-RPC error (its code, message and data) where a broker error is expected: clients get it unchanged. */
  static passedOn(error: { code: number; message: string; data?: unknown }): BrokerError {
    const data = typeof error.data === "object" && error.data !== null && !Array.isArray(error.data) ? (error.data as Record<string, unknown>) : undefined;
    return new BrokerError("BACKEND_INVALID_RESPONSE", error.message, data, { cause: error, wire: error.code });
  }
}

export type ProtocolEra = "legacy" | "modern";

/** The JSON-RPC error code `error` goes to clients with in the given era: a backend's own as it is, else the catalog's. */
export function wireCode(error: BrokerError, era: ProtocolEra): number {
  return error.wire ?? jsonRpcCode(error.code, era);
}

/** The JSON-RPC error code a broker error maps to in the given era. */
export function jsonRpcCode(code: BrokerErrorCode, era: ProtocolEra): number {
  const entry: { jsonRpc: number; modernJsonRpc?: number } = ERROR_CATALOG[code];
  return era === "modern" ? (entry.modernJsonRpc ?? entry.jsonRpc) : entry.jsonRpc;
}

/** A configuration problem; `issues` name the file and the field of each problem. */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
  constructor(
    readonly file: string,
    readonly issues: readonly string[],
  ) {
    super(`Invalid configuration in ${file}:\n${issues.map((i) => `  - ${i}`).join("\n")}`);
  }
}
