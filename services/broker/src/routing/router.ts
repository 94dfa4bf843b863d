import { createHash } from "node:crypto";
import { ProtocolError, ProtocolErrorCode, ResourceNotFoundError } from "@modelcontextprotocol/client";
import { BrokerError, INPUT_REQUIRED_METHODS, META, NOTIFICATION, isJsonObject, splitPrefixedName } from "@mcp-broker/shared";
import { BROKER_TOOLS_ID, type Catalog, type CatalogKind } from "../catalog/catalog.js";
import type { MetaTools } from "./meta-tools.js";
import type { HeldTool } from "@mcp-broker/member";
import type { BackendConnection } from "@mcp-broker/member";
import type { BackendPool } from "@mcp-broker/member";
import { levelAtLeast, type LogLevel, type RequestContext } from "./request-context.js";
import type { HeldCalls, RequestStateSeal } from "./held-calls.js";
import { supportOf } from "../session/client-requests.js";

type Params = Record<string, unknown>;
type Result = Record<string, unknown>;

const LIST_FIELD: Record<CatalogKind, string> = {
  tools: "tools",
  prompts: "prompts",
  resources: "resources",
  resourceTemplates: "resourceTemplates",
};

/**
 * Serves the aggregated catalog and forwards calls to the owning backend, translating names and
 * URIs both ways. Knows nothing about transports or sessions.
 */
export class Router {
  /**
   * Requests in flight per backend, each marked `shared` once a call of another principal has
   * overlapped it: backend log messages carry no request id, so they go to a caller only when
   * nobody else could have caused them.
   */
  private readonly inflight = new Map<string, Map<RequestContext, { shared: boolean }>>();

  /** The most verbose level any legacy client asked for. */
  private backendLogLevel: LogLevel | undefined;

  constructor(
    private readonly catalog: Catalog,
    private readonly pool: BackendPool,
    private readonly options: {
      pageSize: number;
      heldTool?: (name: string) => HeldTool | undefined;
      metaTools?: MetaTools;
      /** A modern client's questions from legacy backends, and the sealing of every requestState it is handed. */
      interaction?: { held: HeldCalls; seal: RequestStateSeal };
      /** Whether a backend's list of `kind` has been loaded since it connected (see `CatalogService.listed`). */
      listed?: (backendId: string, kind: CatalogKind) => boolean;
    },
  ) {}

  /**
   * One page of an aggregated list. The cursor names the last item served and the next one, so a
   * list that changes between pages neither repeats nor skips the items that stayed (the client
   * gets list_changed for the rest); if both are gone, the page continues at the same position.
   */
  list(kind: CatalogKind, params: Params | undefined): Result {
    const items = this.catalog.list(kind);
    const cursor = decodeCursor(params?.cursor, kind);
    let start = 0;
    if (cursor !== undefined) {
      const indexOf = (key: string) => {
        const item = this.catalog.get(kind, key);
        return item === undefined ? -1 : items.indexOf(item);
      };
      const after = indexOf(cursor.after);
      const next = after >= 0 ? -1 : indexOf(cursor.next);
      start = after >= 0 ? after + 1 : next >= 0 ? next : cursor.offset;
    }
    const pageItems = items.slice(start, start + this.options.pageSize);
    const last = pageItems.at(-1);
    const upcoming = items[start + pageItems.length];
    return {
      [LIST_FIELD[kind]]: pageItems.map((item) => item.exposed),
      ...(upcoming !== undefined && last !== undefined && { nextCursor: encodeCursor(kind, last.exposedKey, upcoming.exposedKey, start + pageItems.length) }),
    };
  }

  async callTool(params: Params, ctx: RequestContext): Promise<Result> {
    const name = requireString(params, "name");
    const item = this.catalog.get("tools", name);
    if (item === undefined) {
      const held = this.options.heldTool?.(name);
      if (held !== undefined) {
        throw new BrokerError("TOOL_HELD", `Tool '${name}' is held: its definition changed (or it appeared) after backend '${held.backendId}' was pinned; an operator has to pin it before it can be called.`, { backend: held.backendId, name, hash: held.hash });
      }
      throw this.unavailable(splitPrefixedName(name)?.backendId, "tools") ?? new BrokerError("UNKNOWN_TOOL", `Unknown tool '${name}'. Call tools/list for the available tools.`, { name });
    }
    if (item.backendId === BROKER_TOOLS_ID && this.options.metaTools !== undefined) return this.options.metaTools.call(item.key, params.arguments);
    const result = await this.forward(item.backendId, "tools/call", { ...params, name: item.key }, ctx);
    return this.catalog.exposeResult(item.backendId, result);
  }

  async getPrompt(params: Params, ctx: RequestContext): Promise<Result> {
    const name = requireString(params, "name");
    const item = this.catalog.get("prompts", name);
    if (item === undefined) {
      throw this.unavailable(splitPrefixedName(name)?.backendId, "prompts") ?? new BrokerError("UNKNOWN_PROMPT", `Unknown prompt '${name}'. Call prompts/list for the available prompts.`, { name });
    }
    const result = await this.forward(item.backendId, "prompts/get", { ...params, name: item.key }, ctx);
    return this.catalog.exposeResult(item.backendId, result);
  }

  async readResource(params: Params, ctx: RequestContext): Promise<Result> {
    const uri = requireString(params, "uri");
    const target = this.catalog.resolveResource(uri);
    if (target === undefined) throw unknownResource(uri);
    let result: Result;
    try {
      result = await this.forward(target.backendId, "resources/read", { ...params, uri: target.uri }, ctx);
    } catch (error) {
      // The backend's "not found" (whichever shape its SDK used) in the client's era, with our URI.
      if (isResourceNotFound(error, target.uri)) throw unknownResource(uri);
      throw error;
    }
    return this.catalog.exposeResult(target.backendId, result);
  }

  /**
   * The backend resource a client may subscribe to: a listed resource, a template match or a
   * sub-resource of a listed one.
   * @throws BrokerError UNKNOWN_RESOURCE, or BACKEND_UNAVAILABLE when it names a backend that is down.
   */
  subscriptionTarget(uri: string): { backendId: string; uri: string } {
    const resolved = this.catalog.resolveResource(uri);
    if (resolved === undefined || resolved.match === "prefix") throw this.unavailable(resolved?.backendId, "resources") ?? unknownResource(uri);
    return { backendId: resolved.backendId, uri: resolved.uri };
  }

  /** A name or URI with a configured backend's prefix that is missing because that backend is down. */
  /**
   * Why a name or URI of a prefixed backend is not in the catalog, when the backend is the reason:
   * it is not connected, or its list of that kind has not loaded (a list the backend cannot serve
   * left every item of it "unknown" though the backend was there); undefined when the backend's
   * list is there and the item is not in it.
   */
  private unavailable(backendId: string | undefined, kind: CatalogKind): BrokerError | undefined {
    const backend = backendId === undefined ? undefined : this.pool.all().find((b) => b.id === backendId);
    if (backend === undefined || !backend.config.prefix) return undefined;
    if (backend.state === "connected") {
      if (this.options.listed?.(backend.id, kind) !== false) return undefined;
      return new BrokerError("BACKEND_UNAVAILABLE", `Backend '${backend.id}' is connected, but its ${kind} list has not loaded yet (see the broker's log); retry later.`, { backend: backend.id });
    }
    return new BrokerError("BACKEND_UNAVAILABLE", `Backend '${backend.id}' is not connected${backend.lastFailure ? ` (${backend.lastFailure})` : ""}; retry later.`, {
      backend: backend.id,
    });
  }

  async complete(params: Params, ctx: RequestContext): Promise<Result> {
    const ref = params.ref as Params | undefined;
    if (ref === undefined || typeof ref !== "object") throw new BrokerError("BAD_PARAMS", "completion/complete needs params.ref.");
    if (ref.type === "ref/prompt") {
      const name = requireString(ref, "name");
      const item = this.catalog.get("prompts", name);
      if (item === undefined) throw this.unavailable(splitPrefixedName(name)?.backendId, "prompts") ?? new BrokerError("UNKNOWN_PROMPT", `Unknown prompt '${name}'.`, { name });
      return this.forward(item.backendId, "completion/complete", { ...params, ref: { ...ref, name: item.key } }, ctx);
    }
    if (ref.type === "ref/resource") {
      const uri = requireString(ref, "uri");
      const template = this.catalog.get("resourceTemplates", uri);
      const target = template !== undefined ? { backendId: template.backendId, uri: template.key } : this.catalog.resolveResource(uri);
      if (target === undefined) throw unknownResource(uri);
      return this.forward(target.backendId, "completion/complete", { ...params, ref: { ...ref, uri: target.uri } }, ctx);
    }
    throw new BrokerError("BAD_PARAMS", `Unknown completion reference type '${String(ref.type)}'.`);
  }

  /**
   * Legacy `logging/setLevel`. A backend has one level for all of the broker's clients, so it is
   * set to the most verbose level any client asked for; each client's own level filters what it
   * gets (see `relayLog`). One client asking for less never silences another.
   */
  async setLogLevel(level: LogLevel, ctx: RequestContext): Promise<Result> {
    if (this.backendLogLevel === undefined || !levelAtLeast(level, this.backendLogLevel)) this.backendLogLevel = level;
    const targets = this.pool.all().filter((b) => b.state === "connected" && b.era === "legacy" && b.capabilities?.logging !== undefined);
    await Promise.allSettled(targets.map((b) => this.forward(b.id, "logging/setLevel", { level: this.backendLogLevel }, ctx)));
    return {};
  }

  /** A backend (re)connected with a fresh session: it gets the log level clients asked for again. */
  backendConnected(backend: BackendConnection): void {
    const level = this.backendLogLevel;
    if (level === undefined || backend.era !== "legacy" || backend.capabilities?.logging === undefined) return;
    void backend.request("logging/setLevel", { level }).catch(() => undefined); // best effort: logs are not state
  }

  /**
   * A backend log message. It reaches the one client with a request in flight on that backend (if
   * it asked for that level), and only if no call of another principal overlapped that request and
   * that request is the backend's only one in flight: MCP log messages carry no request id, so with
   * several callers, one that shared the backend with another principal, or a request of the
   * broker's own running beside it (a poll, a subscribe, a list reload, a health probe, made on
   * behalf of anyone), the message is not forwarded rather than risk the wrong recipient.
   */
  relayLog(backendId: string, params: Params): void {
    const callers = this.inflight.get(backendId);
    if (callers?.size !== 1) return;
    const [only] = callers;
    if (only === undefined || only[1].shared) return;
    if (this.pool.get(backendId).requestsInFlight !== 1) return;
    const ctx = only[0];
    if (ctx.logLevel !== undefined && levelAtLeast(params.level, ctx.logLevel)) {
      ctx.notify(NOTIFICATION.message, { ...params, logger: typeof params.logger === "string" ? `${backendId}/${params.logger}` : backendId });
    }
  }

  /** A backend error that names a URI names it in the broker's form. */
  private exposeError(backendId: string, error: unknown): unknown {
    if (!(error instanceof ProtocolError)) return error;
    const data = error.data as Params | undefined;
    if (typeof data?.uri !== "string") return error;
    return new ProtocolError(error.code, error.message, { ...data, uri: this.catalog.exposeUri(backendId, data.uri) });
  }

  /**
   * A modern client's request that may need its input (see `HeldCalls`). Its `requestState` is the
   * broker's, sealed: either a held call of a legacy backend, resumed with the client's
   * `inputResponses`, or a modern backend's own state, passed back to the backend it came from. A
   * legacy backend's call is held while it asks the client something; a modern backend's
   * InputRequiredResult goes to the client with its state sealed.
   */
  private async forwardModern(
    backend: BackendConnection,
    method: string,
    forwarded: Params,
    params: Params,
    ctx: RequestContext,
    interaction: { held: HeldCalls; seal: RequestStateSeal },
    onprogress: ((progress: { progress: number; total?: number; message?: string }) => void) | undefined,
  ): Promise<Result> {
    const { requestState, inputResponses, ...plain } = forwarded;
    const call = callOf(backend.id, method, plain);
    const opened = requestState === undefined ? undefined : interaction.seal.open(requestState, ctx.principal);
    if (opened !== undefined && (opened.b !== call.b || opened.m !== call.m || opened.n !== call.n)) {
      throw new BrokerError("BAD_PARAMS", "requestState belongs to another call (another backend, method, tool, prompt or resource): call again without it.");
    }
    if (typeof opened?.h === "string") return interaction.held.resume(opened, inputResponses, ctx.signal, backend.config.timeoutMs + HELD_ROUND_SLACK_MS);
    if (backend.era === "legacy") {
      const meta = isJsonObject(params._meta) ? params._meta : {};
      return interaction.held.begin(ctx.principal, supportOf(meta[META.clientCapabilities]), call, ctx.signal, (asking, signal) =>
        backend.request(method, plain, { signal, interaction: asking, onprogress }),
      );
    }
    const upstream = { ...plain, ...(inputResponses !== undefined && { inputResponses }), ...(typeof opened?.s === "string" && { requestState: opened.s }) };
    const result = await backend.request(method, upstream, { signal: ctx.signal, onprogress, passInputRequired: true });
    if (result.resultType !== "input_required") return result;
    return { ...result, requestState: interaction.seal.seal({ ...call, p: ctx.principal, ...(typeof result.requestState === "string" && { s: result.requestState }) }) };
  }

  private async forward(backendId: string, method: string, params: Params, ctx: RequestContext): Promise<Result> {
    const backend: BackendConnection = this.pool.get(backendId);
    const callers = this.inflight.get(backendId) ?? new Map<RequestContext, { shared: boolean }>();
    this.inflight.set(backendId, callers);
    const mine = { shared: false };
    for (const [other, state] of callers) {
      if (other.principal !== ctx.principal) state.shared = mine.shared = true;
    }
    callers.set(ctx, mine);
    const progressToken = ctx.progressToken;
    try {
      const forwarded = stripMeta(params);
      const meta = backend.era === "modern" ? modernMeta(params, ctx) : undefined;
      if (meta !== undefined) forwarded._meta = meta;
      const onprogress = progressToken === undefined ? undefined : (progress: { progress: number; total?: number; message?: string }) => ctx.notify(NOTIFICATION.progress, { progressToken, ...progress });
      const interaction = this.options.interaction;
      if (ctx.era === "modern" && interaction !== undefined && INPUT_REQUIRED_METHODS.has(method)) {
        return backendOwnFieldsRemoved(await this.forwardModern(backend, method, forwarded, params, ctx, interaction, onprogress));
      }
      // `requestState` and `inputResponses` are the modern path's, and reach a backend only from it,
      // the state as the broker sealed it: a legacy client's would reach a modern backend as a
      // state it never handed to that principal.
      const { requestState: _state, inputResponses: _responses, ...plain } = forwarded;
      return backendOwnFieldsRemoved(await backend.request(method, plain, { signal: ctx.signal, interaction: ctx.interaction, onprogress }));
    } catch (error) {
      throw this.exposeError(backendId, error);
    } finally {
      callers.delete(ctx);
      if (callers.size === 0) this.inflight.delete(backendId);
    }
  }
}

/** Beyond the backend's timeout, how long a retry waits for the member holding its call. */
const HELD_ROUND_SLACK_MS = 5_000;

/**
 * A backend's answer that it has no resource `requested` (its own URI), in any SDK's shape: -32002
 * (the spec's code, older SDK builds), -32602 whose data is exactly `{ uri }` (SDK v2's
 * ResourceNotFoundError, on every revision), or SDK v1's (see `isSdkV1NotFound`).
 */
function isResourceNotFound(error: unknown, requested: string): boolean {
  if (error instanceof ResourceNotFoundError) return true;
  if (!(error instanceof ProtocolError)) return false;
  if (error.code === Number(ProtocolErrorCode.ResourceNotFound)) return true;
  const data = error.data as Params | undefined;
  if (error.code !== Number(ProtocolErrorCode.InvalidParams)) return false;
  return data === undefined ? isSdkV1NotFound(error.message, requested) : typeof data.uri === "string" && Object.keys(data).length === 1;
}

/**
 * SDK v1's McpServer answers a read of a resource it does not have with -32602, no data, and the
 * message `MCP error -32602: Resource <uri> not found`, <uri> being the request's URI parsed as a
 * WHATWG URL. Nothing else tells it from any other invalid-params error, so this is the one place
 * that reads a message (a backend's, never ours): compared for equality with the messages made
 * from the URI this very request asked for, as sent and as URL-serialised, never searched.
 */
function isSdkV1NotFound(message: string, requested: string): boolean {
  const forms = URL.canParse(requested) ? [requested, new URL(requested).href] : [requested];
  return forms.some((uri) => message === `MCP error ${ProtocolErrorCode.InvalidParams}: Resource ${uri} not found`);
}

/**
 * What describes the backend's own hop is not passed on: its serverInfo (the broker answers the
 * client, and says so itself) and its cache hints (the broker sets its own, see Dispatcher).
 */
function backendOwnFieldsRemoved(result: Result): Result {
  const { ttlMs: _ttl, cacheScope: _scope, ...rest } = result;
  const meta = rest._meta as Params | undefined;
  if (meta === undefined || !(META.serverInfo in meta)) return rest;
  const { [META.serverInfo]: _backendInfo, ...otherMeta } = meta;
  if (Object.keys(otherMeta).length === 0) delete rest._meta;
  else rest._meta = otherMeta;
  return rest;
}

/**
 * What a modern backend is told of the client per request: its log level (legacy backends got
 * logging/setLevel), and a modern client's declared capabilities, so that the backend asks it only
 * for what it can answer and refuses with -32021 otherwise (the SDK client would declare the
 * broker's own, which can relay anything). Undefined when there is nothing to tell.
 */
function modernMeta(params: Params, ctx: RequestContext): Params | undefined {
  const declared = ctx.era === "modern" && isJsonObject(params._meta) ? params._meta[META.clientCapabilities] : undefined;
  if (ctx.logLevel === undefined && declared === undefined) return undefined;
  const meta: Params = {};
  if (ctx.logLevel !== undefined) meta[META.logLevel] = ctx.logLevel;
  if (declared !== undefined) meta[META.clientCapabilities] = declared;
  return meta;
}

/** The client's `_meta` (progress token, envelope) is the broker's, not the backend's. */
function stripMeta(params: Params): Params {
  const { _meta: _ignored, ...rest } = params;
  return rest;
}

function requireString(params: Params, field: string): string {
  const value = params[field];
  if (typeof value !== "string" || value === "") throw new BrokerError("BAD_PARAMS", `params.${field} must be a non-empty string.`, { field });
  return value;
}

export function unknownResource(uri: string): BrokerError {
  return new BrokerError("UNKNOWN_RESOURCE", `Unknown resource '${uri}'. Call resources/list or resources/templates/list for what is available.`, { uri });
}

/** The cursor names the last item served and the next one, with the position as a last resort. */
function encodeCursor(kind: CatalogKind, after: string, next: string, offset: number): string {
  return Buffer.from(JSON.stringify({ k: kind, a: after, n: next, o: offset })).toString("base64url");
}

function decodeCursor(cursor: unknown, kind: CatalogKind): { after: string; next: string; offset: number } | undefined {
  if (cursor === undefined) return undefined;
  if (typeof cursor === "string") {
    try {
      const value = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8")) as { k?: unknown; a?: unknown; n?: unknown; o?: unknown };
      const { k, a, n, o } = value;
      if (k === kind && typeof a === "string" && typeof n === "string" && typeof o === "number" && Number.isInteger(o) && o >= 0) {
        return { after: a, next: n, offset: o };
      }
    } catch {
      // fall through to the error below
    }
  }
  throw new BrokerError("BAD_PARAMS", "Invalid cursor: pass back a nextCursor from the same list, unchanged.");
}

/**
 * What a sealed `requestState` was handed out for, and must come back with: the backend, the
 * method and the tool, prompt or resource (a digest: a URI may be long). A held call's state
 * retried with another tool would otherwise get the held call's answer.
 */
function callOf(backendId: string, method: string, params: Params): { b: string; m: string; n: string } {
  const name = typeof params.name === "string" ? params.name : typeof params.uri === "string" ? params.uri : "";
  return { b: backendId, m: method, n: createHash("sha256").update(name).digest("base64url").slice(0, 22) };
}
