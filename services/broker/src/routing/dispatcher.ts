import { ProtocolError } from "@modelcontextprotocol/server";
import {
  INPUT_REQUIRED_METHODS,
  BrokerError,
  LEGACY_PROTOCOL_VERSIONS,
  META,
  MODERN_PROTOCOL_VERSION,
  jsonRpcCode, wireCode,
  type ProtocolEra,
} from "@mcp-broker/shared";
import type { CatalogKind } from "../catalog/catalog.js";
import type { Logger } from "@mcp-broker/member";
import type { LogLevel, RequestContext } from "./request-context.js";
import type { Router } from "./router.js";
import { validateParams } from "./validate-params.js";

type Params = Record<string, unknown>;
type Result = Record<string, unknown>;

export interface JsonRpcRequest {
  jsonrpc: "2.0";
  id: string | number;
  method: string;
  params?: Params;
}

export interface JsonRpcError {
  code: number;
  message: string;
  data?: unknown;
}

export type JsonRpcResponse =
  | { jsonrpc: "2.0"; id: string | number | null; result: Result }
  | { jsonrpc: "2.0"; id: string | number | null; error: JsonRpcError };

/** What a legacy session offers the dispatcher (subscriptions and the session log level). */
export interface LegacySessionPort {
  subscribe(uri: string): Promise<void>;
  unsubscribe(uri: string): Promise<void>;
  setLogLevel(level: LogLevel): void;
}

export const BROKER_CAPABILITIES = {
  tools: { listChanged: true },
  prompts: { listChanged: true },
  resources: { subscribe: true, listChanged: true },
  completions: {},
  logging: {},
} as const;

/** Results that the 2026-07-28 revision marks cacheable (`ttlMs` and `cacheScope` required). */
const CACHEABLE = new Set(["tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read", "server/discover"]);

const LIST_KINDS: Record<string, CatalogKind> = {
  "tools/list": "tools",
  "prompts/list": "prompts",
  "resources/list": "resources",
  "resources/templates/list": "resourceTemplates",
};


/** Methods that exist only in one era (the 2026-07-28 schema has no ping either). */
const LEGACY_ONLY = new Set(["initialize", "ping", "resources/subscribe", "resources/unsubscribe", "logging/setLevel"]);
const MODERN_ONLY = new Set(["server/discover"]);
/** Every method `execute` serves, in one era or the other (`subscriptions/listen` is the edge's). */
const SERVED = new Set([...Object.keys(LIST_KINDS), ...LEGACY_ONLY, ...MODERN_ONLY, "tools/call", "prompts/get", "resources/read", "completion/complete"]);

export interface DispatcherOptions {
  serverInfo: { name: string; version: string };
  instructions?: string;
  /** `private` when results depend on who asks (API keys configured). */
  cacheScope: "public" | "private";
}

/**
 * Turns one JSON-RPC request into one JSON-RPC response, for either era. Params are validated
 * against the SDK's spec schemas; local errors become wire errors here and only here.
 */
export class Dispatcher {
  constructor(
    private readonly router: Router,
    private readonly logger: Logger,
    private readonly options: DispatcherOptions,
  ) {}

  /** The legacy protocol revision `initialize` with these params negotiates. */
  negotiatedVersion(params: Params | undefined): string {
    const requested = params?.protocolVersion;
    return typeof requested === "string" && (LEGACY_PROTOCOL_VERSIONS as readonly string[]).includes(requested) ? requested : LEGACY_PROTOCOL_VERSIONS[0];
  }

  /** Legacy `initialize` result; the edge creates the session around it. */
  initializeResult(params: Params | undefined): Result {
    const protocolVersion = this.negotiatedVersion(params);
    return {
      protocolVersion,
      capabilities: BROKER_CAPABILITIES,
      serverInfo: this.options.serverInfo,
      ...(this.options.instructions !== undefined && { instructions: this.options.instructions }),
    };
  }

  async handle(request: JsonRpcRequest, ctx: RequestContext, session?: LegacySessionPort): Promise<JsonRpcResponse> {
    try {
      const result = await this.execute(request, ctx, session);
      return { jsonrpc: "2.0", id: request.id, result: this.encodeResult(request.method, result, ctx.era) };
    } catch (error) {
      return { jsonrpc: "2.0", id: request.id, error: this.toWireError(error, ctx.era, request.method) };
    }
  }

  /** The answer to a `subscriptions/listen` the broker ends gracefully (it stops, or the stream must be reopened): its result. */
  listenResult(id: string | number): JsonRpcResponse {
    return { jsonrpc: "2.0", id, result: { resultType: "complete", _meta: { [META.subscriptionId]: id, [META.serverInfo]: this.options.serverInfo } } };
  }

  /** The error response for a request that could not be attributed to a handler. */
  errorResponse(id: string | number | null, error: unknown, era: ProtocolEra): JsonRpcResponse {
    return { jsonrpc: "2.0", id, error: this.toWireError(error, era, undefined) };
  }

  /**
   * The error for a method this broker does not serve in `era`, before any dispatch: on HTTP, a
   * modern request for one is answered 404 (the 2026-07-28 transport's method-not-found status).
   */
  unknownMethod(method: string, era: ProtocolEra): BrokerError | undefined {
    if ((era === "modern" && LEGACY_ONLY.has(method)) || (era === "legacy" && MODERN_ONLY.has(method))) {
      return new BrokerError("UNKNOWN_METHOD", `Method '${method}' does not exist in the ${era} protocol era.`, { method });
    }
    if (!SERVED.has(method)) return new BrokerError("UNKNOWN_METHOD", `Method '${method}' is not served by this broker.`, { method });
    return undefined;
  }

  private async execute(request: JsonRpcRequest, ctx: RequestContext, session: LegacySessionPort | undefined): Promise<Result> {
    const { method } = request;
    const unknown = this.unknownMethod(method, ctx.era);
    if (unknown !== undefined) throw unknown;
    const params = validateParams(method, request.params ?? {});
    const listKind = Object.hasOwn(LIST_KINDS, method) ? LIST_KINDS[method] : undefined;
    if (listKind !== undefined) return this.router.list(listKind, params);
    switch (method) {
      case "ping":
        return {};
      case "initialize":
        return this.initializeResult(params);
      case "server/discover":
        return {
          supportedVersions: [MODERN_PROTOCOL_VERSION],
          capabilities: BROKER_CAPABILITIES,
          ...(this.options.instructions !== undefined && { instructions: this.options.instructions }),
        };
      case "tools/call":
        return this.router.callTool(params, ctx);
      case "prompts/get":
        return this.router.getPrompt(params, ctx);
      case "resources/read":
        return this.router.readResource(params, ctx);
      case "completion/complete":
        return this.router.complete(params, ctx);
      case "logging/setLevel": {
        const level = params.level as LogLevel;
        session?.setLogLevel(level);
        return this.router.setLogLevel(level, ctx);
      }
      case "resources/subscribe":
      case "resources/unsubscribe": {
        if (session === undefined) throw new BrokerError("UNKNOWN_METHOD", `${method} needs a session.`);
        const uri = params.uri as string;
        await (method === "resources/subscribe" ? session.subscribe(uri) : session.unsubscribe(uri));
        return {};
      }
      default:
        throw new BrokerError("UNKNOWN_METHOD", `Method '${method}' is not served by this broker.`, { method });
    }
  }

  private encodeResult(method: string, result: Result, era: ProtocolEra): Result {
    if (era === "legacy") return result;
    // Copies whose new keys are set afterwards: a spread followed by keys it lacks is a slow path of V8 (~2 µs each).
    const meta: Params = { ...(result._meta as Params | undefined) };
    meta[META.serverInfo] = this.options.serverInfo;
    const encoded: Result = { ...result };
    // A backend's InputRequiredResult passes through to a modern client, which answers it itself.
    encoded.resultType = result.resultType === "input_required" && INPUT_REQUIRED_METHODS.has(method) ? "input_required" : "complete";
    encoded._meta = meta;
    if (CACHEABLE.has(method)) {
      // Lists change under list_changed and reads under resources/updated: never serve stale.
      encoded.ttlMs = 0;
      encoded.cacheScope = this.options.cacheScope;
    }
    return encoded;
  }

  private toWireError(error: unknown, era: ProtocolEra, method: string | undefined): JsonRpcError {
    if (error instanceof BrokerError) {
      return { code: wireCode(error, era), message: error.message, ...(error.data !== undefined && { data: error.data }) };
    }
    if (error instanceof ProtocolError) {
      // A backend's own JSON-RPC error, passed through; resource-not-found follows the client's era.
      const code = error.code === -32002 && era === "modern" ? -32602 : error.code;
      return { code, message: error.message, ...(error.data !== undefined && { data: error.data }) };
    }
    if (error instanceof Error && error.name === "AbortError") {
      return { code: -32800, message: "Request cancelled" };
    }
    this.logger.error({ err: error, method }, "unexpected error while handling a request");
    return { code: jsonRpcCode("INTERNAL", era), message: "Internal error in the broker; see its log." };
  }
}
