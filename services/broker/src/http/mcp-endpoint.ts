import type { IncomingMessage, ServerResponse } from "node:http";
import { classifyInboundRequest, isJsonContentType, ProtocolErrorCode, UnsupportedProtocolVersionError } from "@modelcontextprotocol/server";
import {
  BrokerError,
  LEGACY_PROTOCOL_VERSIONS,
  META,
  MODERN_PROTOCOL_VERSION,
  NOTIFICATION,
  isJsonObject,
  within,
  type Clock,
  type ProtocolEra,
} from "@mcp-broker/shared";
import type { Logger } from "@mcp-broker/member";
import type { Dispatcher, JsonRpcRequest, JsonRpcResponse } from "../routing/dispatcher.js";
import { LOG_LEVELS, type LogLevel, type RequestContext } from "../routing/request-context.js";
import { nestsTooDeep, TOO_DEEP_MESSAGE, topLevelId } from "../routing/message-depth.js";
import { validateParams } from "../routing/validate-params.js";
import { HAND_OFF_RETRY_MS, type LegacySession, type NotificationWriter } from "../session/legacy-session.js";
import { acknowledgement, parseListenRequest, wantsListChanges, type ListenRequest } from "../session/listen-request.js";
import { listenStreamPart, type PreparedNotification } from "../fanout/prepared-notification.js";
import { resumeOrder } from "../fanout/event-ids.js";
import type { SessionHost } from "../session/session-host.js";
import type { EdgeSecurity } from "./edge-security.js";
import { checkModernRequest } from "./modern-headers.js";
import { isPlainLegacyRequest, PLAIN_LEGACY_ROUTE } from "./plain-legacy-request.js";
import { encodeEvent } from "../fanout/sse-event.js";
import { KeepAlive, onConnectionGone, SseStream } from "./sse-stream.js";
import { connectionHeader } from "./h2c.js";

const SESSION_HEADER = "mcp-session-id";
/** What a browser page on a `server.corsOrigins` origin may send and read. */
const CORS_ALLOWED = "authorization, content-type, accept, last-event-id, mcp-session-id, mcp-protocol-version, mcp-method, mcp-name";
const CORS_EXPOSED = "mcp-session-id, www-authenticate";
/** The spread of the SSE `retry` streams open with (see `reconnectDelayMs`). */
const RECONNECT_MIN_MS = 500;
const RECONNECT_SPREAD_MS = 1_000;

export interface McpEndpointOptions {
  maxBodyBytes: number;
  keepAliveMs: number;
  serverInfo: { name: string; version: string };
}

/**
 * Streamable HTTP at one path, both protocol eras. Legacy: sessions (initialize, Mcp-Session-Id,
 * standalone GET stream, DELETE, 404 for unknown sessions). Modern: stateless requests validated
 * by the SDK's inbound classification, and `subscriptions/listen` streams served here.
 */
export class McpEndpoint {
  /** Open listen streams, by the id of their listen request (for the final result on shutdown). */
  private readonly listenStreams = new Map<SseStream, string | number>();
  private readonly keepAlive: KeepAlive;
  /** POSTs being handled (a listen counts until its stream is open): what a stop lets finish (`drain`). */
  private inFlight = 0;
  private drained: (() => void) | undefined;

  constructor(
    private readonly deps: {
      dispatcher: Dispatcher;
      host: SessionHost;
      security: EdgeSecurity;
      clock: Clock;
      logger: Logger;
      options: McpEndpointOptions;
    },
  ) {
    this.keepAlive = new KeepAlive(deps.clock, deps.options.keepAliveMs);
  }

  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const corsOrigin = this.deps.security.corsOrigin(req);
    if (corsOrigin !== undefined) {
      res.setHeader("access-control-allow-origin", corsOrigin);
      res.setHeader("access-control-expose-headers", CORS_EXPOSED);
      res.setHeader("vary", "Origin");
      if (req.method === "OPTIONS") {
        // A preflight carries no credentials: it is answered for a CORS origin, nothing else.
        req.resume();
        res.writeHead(204, { "access-control-allow-methods": "GET, POST, DELETE", "access-control-allow-headers": CORS_ALLOWED, "access-control-max-age": "600" }).end();
        return;
      }
    }
    const verdict = this.deps.security.check(req);
    if (!verdict.ok) {
      sendJson(res, verdict.status, { jsonrpc: "2.0", id: null, error: { code: -32600, message: verdict.message } }, verdict.headers);
      req.resume();
      return;
    }
    // (A POST is checked once its body is read, so that the answer carries the request's id.)
    const unsupported = req.method === "POST" ? undefined : unsupportedVersionHeader(header(req, "mcp-protocol-version"));
    if (unsupported !== undefined) {
      req.resume();
      sendJson(res, 400, rpcError(null, unsupported.code, unsupported.message, unsupported.data));
      return;
    }
    switch (req.method) {
      case "POST":
        this.inFlight++;
        try {
          return await this.post(req, res, verdict.principal);
        } finally {
          if (--this.inFlight === 0) this.drained?.();
        }
      case "GET":
        return this.get(req, res, verdict.principal);
      case "DELETE":
        return this.delete(req, res, verdict.principal);
      default:
        req.resume();
        sendJson(res, 405, rpcError(null, -32600, `Method ${req.method ?? "?"} not allowed; use POST, GET or DELETE.`), { allow: "GET, POST, DELETE" });
    }
  }

  /**
   * Graceful shutdown: resolves once no POST is being handled (tool calls in flight have their
   * answers), or after `timeoutMs`, whichever comes first.
   */
  async drain(timeoutMs: number): Promise<void> {
    if (this.inFlight === 0) return;
    await within(new Promise<void>((resolve) => (this.drained = resolve)), timeoutMs, undefined);
    this.drained = undefined;
  }

  /** Graceful shutdown: every listen stream gets its listen result, then ends. */
  closeStreams(): void {
    for (const [stream, id] of this.listenStreams) {
      stream.write(encodeEvent(this.deps.dispatcher.listenResult(id)));
      stream.close();
    }
    this.listenStreams.clear();
    this.keepAlive.close();
  }

  private async post(req: IncomingMessage, res: ServerResponse, principal: string): Promise<void> {
    if (!acceptsPostAnswer(req.headers.accept)) {
      req.resume();
      sendJson(res, 406, rpcError(null, -32600, "Not Acceptable: Accept must list application/json and text/event-stream (the answer is one or the other)."));
      return;
    }
    if (!isJsonContentType(req.headers["content-type"] ?? "")) {
      req.resume();
      sendJson(res, 415, rpcError(null, -32600, "Content-Type must be application/json."));
      return;
    }
    const body = await readBody(req, this.deps.options.maxBodyBytes);
    if (body === "too-large") {
      sendJson(res, 413, rpcError(null, -32600, `Request body exceeds ${this.deps.options.maxBodyBytes} bytes.`), connectionHeader(req, "close"));
      return;
    }
    if (body === "aborted") return;
    if (nestsTooDeep(body)) {
      sendJson(res, 400, rpcError(topLevelId(body), -32600, TOO_DEEP_MESSAGE));
      return;
    }
    let message: unknown;
    try {
      message = JSON.parse(body.toString("utf8"));
    } catch {
      sendJson(res, 400, rpcError(null, -32700, "Parse error: the body is not valid JSON."));
      return;
    }
    const headers = { protocolVersion: header(req, "mcp-protocol-version"), mcpMethod: header(req, "mcp-method"), mcpName: header(req, "mcp-name") };
    // A revision neither era speaks: the SDK's classifier takes any version it does not know for a
    // later modern one, and told a legacy request it lacked the modern envelope.
    // Outside a legacy session and its initialize, only the modern revision can be used from here (as server/discover says).
    const modernOnly = header(req, "mcp-session-id") === undefined && (message as { method?: unknown } | null)?.method !== "initialize";
    const unsupported = unsupportedVersionHeader(headers.protocolVersion, modernOnly);
    if (unsupported !== undefined) {
      sendJson(res, 400, rpcError(idOf(message), unsupported.code, unsupported.message, unsupported.data));
      return;
    }
    const route = isPlainLegacyRequest(message, headers.protocolVersion)
      ? PLAIN_LEGACY_ROUTE
      : classifyInboundRequest({
          httpMethod: "POST",
          protocolVersionHeader: headers.protocolVersion,
          mcpMethodHeader: headers.mcpMethod,
          mcpNameHeader: headers.mcpName,
          body: message,
        });
    const id = idOf(message);
    if (route.kind === "reject") {
      sendJson(res, route.httpStatus, rpcError(id, route.code, route.message, route.data));
      return;
    }
    if (route.kind === "modern") {
      if (route.messageKind === "notification") {
        res.writeHead(202).end();
        return;
      }
      const rejection = checkModernRequest(headers, route.classification.revision, route.message.method, route.message.params);
      if (rejection !== undefined) {
        sendJson(res, rejection.status, rpcError(id, rejection.code, rejection.message, rejection.data));
        return;
      }
      if (route.message.method === "subscriptions/listen") {
        this.listen(req, res, route.message, principal);
        return;
      }
      // Method resolution comes before dispatch, and the 2026-07-28 transport answers a method the server does not have 404.
      const unknown = this.deps.dispatcher.unknownMethod(route.message.method, "modern");
      if (unknown !== undefined) {
        sendJson(res, 404, this.deps.dispatcher.errorResponse(id, unknown, "modern"));
        return;
      }
      await this.respond(req, res, route.message, { era: "modern", principal, session: undefined });
      return;
    }
    await this.legacyPost(req, res, message, principal);
  }

  private async legacyPost(req: IncomingMessage, res: ServerResponse, message: unknown, principal: string): Promise<void> {
    if (Array.isArray(message)) {
      sendJson(res, 400, rpcError(null, -32600, "JSON-RPC batches are not supported; send one message per request."));
      return;
    }
    if (!isJsonObject(message) || message.jsonrpc !== "2.0") {
      sendJson(res, 400, rpcError(idOf(message), -32600, "Invalid Request: expected a JSON-RPC 2.0 message."));
      return;
    }
    if (typeof message.method !== "string") {
      if (!("result" in message) && !("error" in message)) {
        sendJson(res, 400, rpcError(idOf(message), -32600, "Invalid Request: a message without a method must be a response (result or error)."));
        return;
      }
      // The client's answer to a request the broker passed on to it from a backend (see
      // ClientRequests), in its session as any request (400 without one, 404 for one that is gone).
      // A client behind a round-robin load balancer may POST it to another member than the one that asked.
      const sessionId = header(req, SESSION_HEADER);
      if (sessionId === undefined) {
        sendJson(res, 400, rpcError(null, -32600, "Bad Request: Mcp-Session-Id header is required; send initialize first."));
        return;
      }
      if (!(await this.deps.host.answerQuestion(sessionId, principal, message))) {
        sendJson(res, 404, rpcError(null, -32001, "Session not found: it ended or never existed; send initialize again."));
        return;
      }
      res.writeHead(202).end();
      return;
    }
    const isRequest = message.id !== undefined && message.id !== null;
    if (isRequest && !(typeof message.id === "string" || typeof message.id === "number")) {
      sendJson(res, 400, rpcError(null, -32600, "Invalid Request: id must be a string or a number."));
      return;
    }
    if (message.method === "initialize") {
      if (!isRequest) {
        sendJson(res, 400, rpcError(null, -32600, "initialize must be a request."));
        return;
      }
      let session: LegacySession;
      try {
        // Bad params get their error without costing a session slot.
        const params = isJsonObject(message.params) ? message.params : {};
        validateParams("initialize", params);
        session = await this.deps.host.createLegacySession(principal, {
          protocolVersion: this.deps.dispatcher.negotiatedVersion(params),
          clientInfo: params.clientInfo,
          capabilities: params.capabilities,
        });
      } catch (error) {
        sendJson(res, 200, this.deps.dispatcher.errorResponse(message.id as string | number, error, "legacy"));
        return;
      }
      await this.respond(req, res, message as unknown as JsonRpcRequest, { era: "legacy", principal, session }, { [SESSION_HEADER]: session.id });
      // The client went away before it had the answer (it gave up connecting): nobody knows the
      // session's id, so nobody would end it; it would hold a slot of the principal's session
      // limit until it idled out.
      if (!res.writableEnded) await this.deps.host.endLegacySession(session, "its client went away before the initialize answer");
      return;
    }
    const session = await this.sessionFor(req, res, principal, idOf(message));
    if (session === undefined) return;
    session.touch();
    if (!isRequest) {
      if (message.method === NOTIFICATION.cancelled && isJsonObject(message.params)) {
        const requestId = message.params.requestId;
        if (typeof requestId === "string" || typeof requestId === "number") session.cancelRequest(requestId);
      }
      res.writeHead(202).end();
      return;
    }
    await this.respond(req, res, message as unknown as JsonRpcRequest, { era: "legacy", principal, session }, { [SESSION_HEADER]: session.id });
  }

  private async get(req: IncomingMessage, res: ServerResponse, principal: string): Promise<void> {
    req.resume();
    if (!(req.headers.accept ?? "").includes("text/event-stream")) {
      sendJson(res, 406, rpcError(null, -32600, "Not Acceptable: the GET stream needs Accept: text/event-stream."));
      return;
    }
    const session = await this.sessionFor(req, res, principal, null);
    if (session === undefined || res.destroyed) return;
    session.touch();
    const stream = new SseStream(res, { keepAlive: this.keepAlive, headers: { [SESSION_HEADER]: session.id }, retryMs: reconnectDelayMs() });
    void session.attachStream(new LegacyStreamWriter(stream), header(req, "last-event-id"));
  }

  private async delete(req: IncomingMessage, res: ServerResponse, principal: string): Promise<void> {
    req.resume();
    const session = await this.sessionFor(req, res, principal, null);
    if (session === undefined) return;
    await this.deps.host.endLegacySession(session, "client DELETE");
    res.writeHead(200).end();
  }

  /**
   * The caller's session, held here or adopted from another member, or an error response already
   * sent (400 no header, 404 unknown or not theirs, -32004 when the cluster cannot be asked, and
   * when another member adopted it at the same moment -32000 with data.moved, or for a GET a stream
   * that ends at once with an SSE retry).
   */
  private async sessionFor(req: IncomingMessage, res: ServerResponse, principal: string, id: string | number | null): Promise<LegacySession | undefined> {
    const sessionId = header(req, SESSION_HEADER);
    if (sessionId === undefined) {
      sendJson(res, 400, rpcError(id, -32600, "Bad Request: Mcp-Session-Id header is required; send initialize first."));
      return undefined;
    }
    let session = this.deps.host.legacySession(sessionId, principal);
    // A stream on a stale copy (the message that another member took the session was lost) would
    // hear nothing: a GET checks the record first (one read per stream, not per request).
    if (session !== undefined && req.method === "GET" && !(await this.deps.host.stillHeld(session))) session = undefined;
    if (session === undefined) {
      try {
        session = await this.deps.host.adoptLegacySession(sessionId, principal);
      } catch (error) {
        // Another member adopted it at the same moment: the client asks again and reaches it
        // (a GET stream ends with an SSE retry, a request gets -32000 with data.moved).
        if (isMoved(error) && req.method === "GET") {
          new SseStream(res, { headers: { [SESSION_HEADER]: sessionId } }).close(HAND_OFF_RETRY_MS);
          return undefined;
        }
        if (isMoved(error) && req.method === "POST") {
          sendJson(res, 200, this.deps.dispatcher.errorResponse(id, error, "legacy"));
          return undefined;
        }
        sendJson(res, 503, this.deps.dispatcher.errorResponse(id, error, "legacy"));
        return undefined;
      }
    }
    if (session === undefined) {
      sendJson(res, 404, rpcError(id, -32001, "Session not found: it ended or never existed; send initialize again."));
      return undefined;
    }
    return session;
  }

  /**
   * Runs one request. The answer is plain JSON unless the handler sends a related notification
   * (progress, log) first, in which case the response becomes an SSE stream carrying those and
   * then the result.
   */
  private async respond(
    req: IncomingMessage,
    res: ServerResponse,
    request: JsonRpcRequest,
    who: { era: ProtocolEra; principal: string; session: LegacySession | undefined },
    headers: Record<string, string> = {},
  ): Promise<void> {
    const abort = new AbortController();
    // Legacy: a dropped connection is not a cancellation (`notifications/cancelled` is). A modern
    // request has no session to cancel it through: there, closing its connection cancels it.
    if (who.era === "modern") {
      res.on("close", () => {
        if (!res.writableFinished) abort.abort();
      });
    }
    const meta = isJsonObject(request.params?._meta) ? request.params._meta : {};
    const token = meta.progressToken;
    const modernLevel = meta[META.logLevel];
    let sse: SseStream | undefined;
    let gone: AbortSignal | undefined;
    const session = who.era === "legacy" ? who.session : undefined;
    const ctx: RequestContext = {
      era: who.era,
      principal: who.principal,
      sessionId: who.session?.id,
      // Read on demand: Node makes a controller's signal when it is first read, and most requests
      // (subscribe, list reads) never pass one on; making one for each cost ~2 % of a broker's CPU.
      get signal() {
        return abort.signal;
      },
      progressToken: typeof token === "string" || typeof token === "number" ? token : undefined,
      logLevel: who.era === "modern" ? (LOG_LEVELS.includes(modernLevel as LogLevel) ? (modernLevel as LogLevel) : undefined) : who.session?.logLevel,
      notify: (method, params) => {
        // A client that takes only JSON gets its answer as JSON, without the call's notifications (progress, logs).
        if (res.writableEnded || (sse === undefined && !acceptsEventStream(req.headers.accept))) return;
        sse ??= new SseStream(res, { keepAlive: this.keepAlive, headers });
        sse.write(encodeEvent({ jsonrpc: "2.0", method, params }));
      },
      // A client that takes only JSON on this call has no stream to be asked on: it cannot be asked
      // (the backend hears -32601 at once, as from a client without the capability), rather than a
      // question it cannot read, on a stream it did not accept, waited for until the backend's timeout.
      interaction: session === undefined || !acceptsEventStream(req.headers.accept) ? undefined : {
        principal: session.principal,
        supports: session.supports,
        ask: (method, params, signal) => {
          // The call's stream carries the request; a client that goes away mid-question cannot answer it.
          gone ??= closedSignal(res);
          return session.askClient(
            (message) => {
              if (res.writableEnded || res.destroyed) return false;
              sse ??= new SseStream(res, { keepAlive: this.keepAlive, headers });
              return sse.write(encodeEvent(message));
            },
            method,
            params,
            AbortSignal.any([signal, abort.signal, gone]),
          );
        },
      },
    };
    const untrack = who.session?.trackRequest(request.id, abort);
    let response: JsonRpcResponse;
    try {
      response = await this.deps.dispatcher.handle(request, ctx, who.session);
    } finally {
      untrack?.();
    }
    if (sse !== undefined) {
      sse.write(encodeEvent(response));
      sse.close();
    } else if (!res.writableEnded && !res.destroyed) {
      // A modern request needing a capability its client did not declare (a backend's -32021, passed
      // on) is answered 400, as the 2026-07-28 schema has it; every other error is in-band (200).
      const missingCapability = who.era === "modern" && "error" in response && response.error.code === Number(ProtocolErrorCode.MissingRequiredClientCapability);
      sendJson(res, missingCapability ? 400 : 200, response, headers);
    }
  }

  private listen(req: IncomingMessage, res: ServerResponse, message: JsonRpcRequest, principal: string): void {
    if (!acceptsEventStream(req.headers.accept)) {
      sendJson(res, 406, rpcError(message.id, -32600, "Not Acceptable: subscriptions/listen answers with an event stream; Accept must list text/event-stream."));
      return;
    }
    let request: ListenRequest;
    try {
      request = parseListenRequest(message.params);
    } catch (error) {
      sendJson(res, 200, this.deps.dispatcher.errorResponse(message.id, error, "modern"));
      return;
    }
    // Only the id outlives this call: the parsed request (its _meta envelope included) is not
    // kept for the life of the stream.
    const id = message.id;
    const streamPart = listenStreamPart(id, this.deps.host.cursorPrefix(principal));
    let stream: SseStream | undefined;
    /** Held notifications: until the acknowledgement (nothing may precede it), and while a resumption is read. */
    let backlog: PreparedNotification[] | undefined = [];
    let resuming = false;
    const flush = (): void => {
      for (const notification of backlog ?? []) stream?.writeParts(notification.modernBody(streamPart));
      backlog = undefined;
    };
    const handle = this.deps.host.openListen(
      principal,
      request.flags,
      request.uris ?? [],
      () => ({
        principal,
        flags: request.flags,
        wants: wantsListChanges(request.flags),
        deliver: (notification: PreparedNotification) => {
          if (backlog !== undefined) backlog.push(notification);
          else stream?.writeParts(notification.modernBody(streamPart));
        },
        hold: () => {
          resuming = true;
          backlog ??= [];
        },
        release: (told, late) => {
          resuming = false;
          const held = backlog ?? [];
          backlog = undefined;
          for (const notification of resumeOrder(told, held, late)) stream?.writeParts(notification.modernBody(streamPart));
        },
        end: () => stream?.close(),
        fail: (error) => {
          stream?.write(encodeEvent(this.deps.dispatcher.errorResponse(id, error, "modern")));
          stream?.close();
        },
      }),
      (outcome) => {
        if (res.destroyed) return;
        if (outcome.type === "listen.rejected") {
          sendJson(res, 200, this.deps.dispatcher.errorResponse(id, outcome.error, "modern"));
          return;
        }
        const opened = new SseStream(res, { keepAlive: this.keepAlive, retryMs: reconnectDelayMs() });
        stream = opened;
        opened.write(encodeEvent(acknowledgement(id, request, outcome)));
        if (!resuming) flush();
        this.listenStreams.set(opened, id);
        opened.onClose(() => this.listenStreams.delete(opened));
      },
      request.cursor,
    );
    onConnectionGone(res, () => handle.close());
    req.on("close", () => {
      if (res.writableEnded) handle.close();
    });
  }
}

/** A legacy session's standalone stream: its notifications as pre-encoded legacy frames. */
class LegacyStreamWriter implements NotificationWriter {
  constructor(private readonly stream: SseStream) {}

  get closed(): boolean {
    return this.stream.closed;
  }

  write(notification: PreparedNotification): void {
    this.stream.write(notification.legacyFrame(), notification.legacyChunk());
  }

  onClose(listener: () => void): void {
    this.stream.onClose(listener);
  }

  close(retryMs?: number): void {
    this.stream.close(retryMs);
  }

  prime(eventId: string): void {
    this.stream.write(Buffer.from(`id: ${eventId}\ndata: \n\n`));
  }
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** What a POST is answered with: JSON, or an SSE stream when the request sends notifications first. */
const POST_ANSWER_TYPES = ["application/json", "text/event-stream", "application/*", "text/*", "*/*"];

/** Accept header values that passed `acceptsPostAnswer`, as sent (at most 64): a client sends the same one with every request (its parse was ~1.2 % of a broker's CPU in the subscribe bench's phases). */
const acceptedHeaders = new Set<string>();

/**
 * Whether a POST's Accept header leaves the broker something to answer with: one of the two types
 * or a wildcard covering one (a range weighted `q=0` is a refusal, not an offer), or no Accept at
 * all, which HTTP reads as anything (many simple clients send none). The spec has clients list
 * both; the SDK v2 server's legacy transport refuses anything less, absent included, and its
 * modern handler checks nothing.
 */
function acceptsPostAnswer(accept: string | undefined): boolean {
  if (accept === undefined || acceptedHeaders.has(accept)) return true;
  if (accept.trim() === "") return true;
  const accepted = acceptsOneOf(accept, POST_ANSWER_TYPES);
  if (accepted && acceptedHeaders.size < 64) acceptedHeaders.add(accept);
  return accepted;
}

/** Whether `accept` takes an event stream (no Accept, or an empty one, takes anything). */
function acceptsEventStream(accept: string | undefined): boolean {
  return accept === undefined || accept.trim() === "" || acceptsOneOf(accept, EVENT_STREAM_TYPES);
}

const EVENT_STREAM_TYPES = ["text/event-stream", "text/*", "*/*"];

/** Whether a media range of `accept` is one of `types`, not refused with q=0. */
function acceptsOneOf(accept: string, types: readonly string[]): boolean {
  return accept.split(",").some((range) => {
    const [type = "", ...params] = range.split(";").map((part) => part.trim().toLowerCase());
    return types.includes(type) && !params.some((param) => /^q=0(?:\.0{0,3})?$/.test(param));
  });
}

function idOf(message: unknown): string | number | null {
  if (!isJsonObject(message)) return null;
  return typeof message.id === "string" || typeof message.id === "number" ? message.id : null;
}

export function rpcError(id: string | number | null, code: number, message: string, data?: unknown): JsonRpcResponse {
  return { jsonrpc: "2.0", id, error: { code, message, ...(data !== undefined && { data }) } };
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  const payload = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(payload), ...headers });
  res.end(payload);
}

/** After a body is read: a late error on the request is ignored, as before (one function for all). */
const ignoreError = (): void => undefined;

/**
 * Reads a request body up to `limit` bytes. Once it has an outcome its listeners come off the
 * request: a `subscriptions/listen` request lives as long as its stream, and they held the body
 * and this promise (about 1.4 KB per idle listen).
 */
function readBody(req: IncomingMessage, limit: number): Promise<Buffer | "too-large" | "aborted"> {
  return new Promise((resolve) => {
    // Its client left before it was read (held while the broker started): its events are over.
    if (req.destroyed) {
      resolve("aborted");
      return;
    }
    const declared = Number(req.headers["content-length"]);
    if (Number.isFinite(declared) && declared > limit) {
      req.resume();
      resolve("too-large");
      return;
    }
    let chunks: Buffer[] = [];
    let size = 0;
    const finish = (outcome: Buffer | "too-large" | "aborted"): void => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onAborted);
      req.off("aborted", onAborted);
      req.off("close", onAborted);
      req.on("error", ignoreError);
      chunks = [];
      resolve(outcome);
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > limit) {
        req.resume();
        finish("too-large");
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = (): void => finish(Buffer.concat(chunks));
    const onAborted = (): void => finish("aborted");
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onAborted);
    req.on("aborted", onAborted);
    // Closed before its end: gone, however it went.
    req.on("close", onAborted);
  });
}

function isMoved(error: unknown): boolean {
  return error instanceof BrokerError && (error.data as { moved?: unknown } | undefined)?.moved === true;
}

/**
 * The SSE `retry` a long-lived stream opens with: when its broker dies, its client reconnects after
 * this long. Spread over 0.5-1.5 s (the SDK's own default is 1 s for all), so that the clients of
 * an instance that died do not all come back to the survivors in the same instant.
 */
function reconnectDelayMs(): number {
  return RECONNECT_MIN_MS + Math.random() * RECONNECT_SPREAD_MS;
}

/** Aborted once the response closes before it was finished (the client went away). */
function closedSignal(res: ServerResponse): AbortSignal {
  const closed = new AbortController();
  res.once("close", () => {
    if (!res.writableFinished) closed.abort(new Error("the client's connection closed"));
  });
  return closed.signal;
}

/**
 * The SDK's unsupported-version error for an MCP-Protocol-Version header that names no revision
 * this broker speaks, in either era. The revisions it lists are those the client can retry with:
 * `modernOnly` (a request outside a legacy session that is not an initialize) the modern one, as
 * `server/discover` lists; otherwise every revision of both eras.
 */
function unsupportedVersionHeader(version: string | undefined, modernOnly = false): UnsupportedProtocolVersionError | undefined {
  const named = version?.trim();
  if (named === undefined || named === MODERN_PROTOCOL_VERSION || (LEGACY_PROTOCOL_VERSIONS as readonly string[]).includes(named)) return undefined;
  return new UnsupportedProtocolVersionError({ supported: modernOnly ? [MODERN_PROTOCOL_VERSION] : [MODERN_PROTOCOL_VERSION, ...LEGACY_PROTOCOL_VERSIONS], requested: named });
}
