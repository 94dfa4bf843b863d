import type { Agent, ClientRequest, IncomingMessage } from "node:http";
import type { ClientHttp2Stream } from "node:http2";
import { LEGACY_PROTOCOL_VERSIONS, META, MODERN_PROTOCOL_VERSION, NOTIFICATION } from "@mcp-broker/shared";
import type { H2Pool } from "./h2-client.js";
import { drain, fetchText, openStream, type HttpCall, type HttpResponse } from "./http-client.js";
import type { TargetKind } from "./generator-api.js";
import { SseParser } from "./sse-parser.js";

const LEGACY_VERSION = LEGACY_PROTOCOL_VERSIONS[0];
const CLIENT_INFO = { name: "mcp-broker-bench", version: "1.0.0" };
const ENVELOPE = { [META.protocolVersion]: MODERN_PROTOCOL_VERSION, [META.clientCapabilities]: {}, [META.clientInfo]: CLIENT_INFO };
const JSON_AND_SSE = "application/json, text/event-stream";

export interface Agents {
  /** Keep-alive pool for request/response POSTs. */
  requests: Agent;
  /** One socket per long-lived stream. */
  streams: Agent;
  /** HTTP/2 connections, for sessions opened over HTTP/2 (`ClientSession.http2`). */
  h2?: H2Pool;
}

/** `work`'s failure, saying which step of opening a session it was (a bare "socket hang up" does not). */
async function during<T>(step: string, work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (error) {
    const message = (error as Error).message;
    throw message.startsWith(`${step}:`) ? error : new Error(`${step}: ${message}`, { cause: error });
  }
}

/**
 * One client session driven by hand over raw HTTP (no SDK, so thousands fit in one process).
 * - legacy: POST initialize → Mcp-Session-Id, POST notifications/initialized, GET the standalone
 *   SSE stream, POST resources/subscribe.
 * - modern: one POST subscriptions/listen (MCP-Protocol-Version 2026-07-28, Mcp-Method, `_meta`
 *   envelope) whose SSE response is the stream; open once the acknowledgement arrives.
 * - raw: GET /sse?key=K on the baseline server.
 * - raw-listen: the modern listen request, POSTed to the baseline server's listen route (its `url`).
 * Every `data:` line of the stream goes to `onData`.
 */
export class ClientSession {
  sessionId: string | undefined;
  /** The id of the last event its stream carried (what a reconnecting client sends as Last-Event-ID). */
  lastEventId: string | undefined;
  /** What it subscribed to (broker form). */
  uris: string[] = [];
  /**
   * With `trackIds`, what arrived per resource key: update seqs of the current step, and when the
   * last notification for the resource itself came (a resumption that could only say "it changed"; 0: none).
   */
  heard: Map<number, { seqs: Set<number>; lastBare: number }> | undefined;
  /** Where its stream connects from (a loopback alias), when set. */
  localAddress: string | undefined;
  /** Speaks HTTP/2 (without TLS): its requests and its stream are streams of the generator's shared connections. */
  http2 = false;
  private req: ClientRequest | undefined;
  private h2stream: ClientHttp2Stream | undefined;
  private res: IncomingMessage | undefined;
  private nextId = 0;
  private acknowledged: (() => void) | undefined;

  constructor(
    readonly kind: TargetKind,
    public url: URL,
    private readonly agents: Agents,
    private readonly onData: (session: ClientSession, data: string) => void,
    /** Keep `lastEventId` (costs a string per event: only where a scenario re-attaches). */
    private readonly trackIds = false,
  ) {
    if (trackIds) this.heard = new Map();
  }

  /** `uri`: one URI, several separated by spaces, or "" for none. `stream` false: a legacy session opens no GET stream. */
  async open(uri: string, toolsListChanged: boolean, stream = true): Promise<void> {
    this.uris = uri === "" ? [] : uri.split(" ");
    if (this.kind === "raw") {
      await this.attachStream(new URL(`/sse?key=${encodeURIComponent(uri)}`, this.url), { method: "GET", headers: { accept: "text/event-stream" } });
      return;
    }
    if (this.kind === "legacy") {
      const init = await during("initialize", this.request("initialize", { protocolVersion: LEGACY_VERSION, capabilities: {}, clientInfo: CLIENT_INFO }));
      const id = init.headers["mcp-session-id"];
      if (init.status !== 200 || typeof id !== "string") throw new Error(`initialize: HTTP ${init.status} ${init.body.slice(0, 200)}`);
      this.sessionId = id;
      const initialized = await during("notifications/initialized", this.post({ jsonrpc: "2.0", method: NOTIFICATION.initialized }));
      if (initialized.status !== 202) throw new Error(`notifications/initialized: HTTP ${initialized.status}`);
      if (stream) await during("GET stream", this.attachStream(this.url, { method: "GET", headers: { accept: "text/event-stream", ...this.legacyHeaders() } }));
      for (const one of this.uris) await during("resources/subscribe", this.call("resources/subscribe", { uri: one }));
      return;
    }
    const notifications = { ...(uri !== "" && { resourceSubscriptions: this.uris }), ...(toolsListChanged && { toolsListChanged: true }) };
    const body = JSON.stringify({ jsonrpc: "2.0", id: `listen-${++this.nextId}`, method: "subscriptions/listen", params: { notifications, _meta: ENVELOPE } });
    const ack = new Promise<void>((resolve) => (this.acknowledged = resolve));
    await this.attachStream(this.url, { method: "POST", headers: { ...this.modernHeaders("subscriptions/listen"), "content-type": "application/json" }, body });
    await ack;
  }

  /** A JSON-RPC request on this session (raw: POST /rpc); resolves with the HTTP response. */
  request(method: string, params: Record<string, unknown>): Promise<HttpResponse> {
    const id = ++this.nextId;
    if (this.kind === "modern") {
      const body = JSON.stringify({ jsonrpc: "2.0", id, method, params: { ...params, _meta: ENVELOPE } });
      return this.fetch(this.url, { method: "POST", headers: { ...this.modernHeaders(method), "content-type": "application/json" }, body });
    }
    return this.post({ jsonrpc: "2.0", id, method, params });
  }

  /** A request that must succeed with a JSON-RPC result. */
  async call(method: string, params: Record<string, unknown>): Promise<string> {
    const response = await this.request(method, params);
    if (response.status !== 200 || !response.body.includes('"result"')) throw new Error(`${method}: HTTP ${response.status} ${response.body.slice(0, 200)}`);
    return response.body;
  }

  close(): void {
    this.res?.destroy();
    this.req?.destroy();
    this.h2stream?.close();
  }

  /**
   * A legacy client whose stream broke re-attaches to its session (at `url`, which may be another
   * broker instance): GET with Last-Event-ID, as the Streamable HTTP transport resumes. Resolves
   * once the new stream is open.
   */
  async reattach(url: URL): Promise<void> {
    if (this.kind !== "legacy") throw new Error("only legacy sessions re-attach");
    this.close();
    this.url = url;
    const headers = { accept: "text/event-stream", ...this.legacyHeaders(), ...(this.lastEventId !== undefined && { "last-event-id": this.lastEventId }) };
    await during("GET stream (re-attach)", this.attachStream(this.url, { method: "GET", headers }));
  }

  /** A client whose broker lost its session (a restart) starts over at `url`: initialize, its stream, and every subscription again. */
  async reinitialize(url: URL): Promise<void> {
    this.close();
    this.url = url;
    this.sessionId = undefined;
    this.lastEventId = undefined;
    await this.open(this.uris.join(" "), false);
  }

  /** Ends the session as a client leaving does: a legacy session is deleted (DELETE), then the stream closed. */
  async end(): Promise<void> {
    if (this.kind === "legacy" && this.sessionId !== undefined) {
      const response = await this.fetch(this.url, { method: "DELETE", headers: this.legacyHeaders() });
      if (response.status >= 300) throw new Error(`DELETE session: HTTP ${response.status} ${response.body.slice(0, 200)}`);
    }
    this.close();
  }

  /** Called by the stream reader for the modern acknowledgement. */
  markAcknowledged(): void {
    this.acknowledged?.();
    this.acknowledged = undefined;
  }

  private post(message: Record<string, unknown>): Promise<HttpResponse> {
    // A raw session opened on the server's root POSTs to /rpc; one made for a route, there.
    const target = this.kind === "raw" && this.url.pathname === "/" ? new URL("/rpc", this.url) : this.url;
    const headers = { "content-type": "application/json", accept: JSON_AND_SSE, ...(this.kind === "legacy" ? this.legacyHeaders() : {}) };
    return this.fetch(target, { method: "POST", headers, body: JSON.stringify(message) });
  }

  private fetch(url: URL, call: HttpCall): Promise<HttpResponse> {
    return this.http2 ? this.h2().fetchText(url, call) : fetchText(this.agents.requests, url, call);
  }

  private h2(): H2Pool {
    if (this.agents.h2 === undefined) throw new Error("an HTTP/2 session needs the generator's HTTP/2 connections");
    return this.agents.h2;
  }

  private legacyHeaders(): Record<string, string> {
    return this.sessionId === undefined ? {} : { "mcp-session-id": this.sessionId, "mcp-protocol-version": LEGACY_VERSION };
  }

  private modernHeaders(method: string): Record<string, string> {
    return { accept: JSON_AND_SSE, "mcp-protocol-version": MODERN_PROTOCOL_VERSION, "mcp-method": method };
  }

  private async attachStream(url: URL, call: Parameters<typeof openStream>[2]): Promise<void> {
    if (this.http2) {
      const { status, headers, stream } = await this.h2().openStream(url, call);
      if (status !== 200 || !(headers["content-type"] ?? "").startsWith("text/event-stream")) {
        stream.close();
        throw new Error(`${call.method} stream: HTTP ${status}`);
      }
      this.h2stream = stream;
      this.readEvents(stream);
      return;
    }
    const { req, res } = await openStream(this.agents.streams, url, this.localAddress === undefined ? call : { ...call, localAddress: this.localAddress });
    if (res.statusCode !== 200 || !(res.headers["content-type"] ?? "").startsWith("text/event-stream")) {
      const body = await drain(res);
      throw new Error(`${call.method} stream: HTTP ${res.statusCode ?? 0} ${body.slice(0, 200)}`);
    }
    this.req = req;
    this.res = res;
    this.readEvents(res);
    req.on("error", () => undefined);
  }

  /** Every `data:` line of the stream's body goes to `onData`. */
  private readEvents(body: NodeJS.ReadableStream): void {
    const parser = new SseParser((data) => this.onData(this, data), this.trackIds ? (id) => (this.lastEventId = id) : undefined);
    body.on("data", (chunk: Buffer) => parser.push(chunk.toString("latin1")));
    body.on("error", () => undefined);
  }
}
