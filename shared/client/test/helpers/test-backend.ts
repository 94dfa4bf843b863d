import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Readable } from "node:stream";
import { InMemoryTransport, StreamableHTTPClientTransport, type JSONRPCMessage, type Transport } from "@modelcontextprotocol/client";
import {
  createMcpHandler,
  InMemoryServerEventBus,
  ProtocolError,
  ProtocolErrorCode,
  ResourceNotFoundError,
  Server,
  type CallToolResult,
  type McpHttpHandler,
  type ProtocolEra,
  type SubscriptionFilter,
} from "@modelcontextprotocol/server";

export interface BackendTool {
  name: string;
  description?: string;
  /** What the tool does; its text result. Throwing gives a JSON-RPC error. */
  run: (args: Record<string, unknown>) => CallToolResult;
}

type ListKind = "tools" | "prompts" | "resources";

/** Methods the test server's own handlers answer (and record in `received`). */
const HANDLER_METHODS = new Set(["tools/list", "tools/call", "prompts/list", "prompts/get", "resources/list", "resources/templates/list", "resources/read", "resources/subscribe", "resources/unsubscribe"]);

/** Promises that resolve once a condition holds, checked whenever something changed. */
class Waiters {
  private readonly waiting: { ready: () => boolean; resolve: () => void }[] = [];

  /** Resolves once `ready()` holds (at once if it does now); checked at each `check()`. */
  until(ready: () => boolean): Promise<void> {
    if (ready()) return Promise.resolve();
    return new Promise((resolve) => this.waiting.push({ ready, resolve }));
  }

  check(): void {
    for (const waiter of [...this.waiting]) {
      if (!waiter.ready()) continue;
      this.waiting.splice(this.waiting.indexOf(waiter), 1);
      waiter.resolve();
    }
  }
}

/**
 * A small MCP server for unit tests, built on the SDK's own `Server` (real protocol handling,
 * both eras), whose state a test changes directly:
 *
 * - legacy: one `Server` per connection over an in-memory transport pair; `resources/subscribe`
 *   is remembered per connection and `updated()` notifies only subscribers;
 * - modern: the SDK's `createMcpHandler` behind an in-process fetch (Streamable HTTP, no
 *   socket); `subscriptions/listen` streams are fed by its event bus. `serveHttp()` also puts it
 *   on a real port (for spawned processes).
 *
 * Observation without sleeping: `received` records every request method a handler saw, in
 * arrival order (`whenReceived` awaits a count); `wire` records every message method that
 * reached the server (pings and handshakes included); `delivered(method)` resolves once a
 * message of that method reached the client and its handlers ran.
 */
export class TestBackend {
  tools = new Map<string, BackendTool>();
  prompts = new Map<string, { description?: string }>();
  /** Listed resources and their text. */
  texts = new Map<string, string>();
  templates: string[] = [];
  /** Text of a URI that matches a template but is not listed. */
  templateText: (uri: string) => string | undefined = () => undefined;
  /** Methods that answer with an internal error (handler methods, and `subscriptions/listen`). */
  readonly failing = new Set<string>();
  readonly received: string[] = [];
  /** The `_meta` of every request a handler saw, by method, in arrival order (undefined: none sent). */
  readonly metas = new Map<string, unknown[]>();
  readonly wire: string[] = [];
  /** Unknown to the server: refused by `resources/subscribe` (legacy) and by listen (modern, -32602). */
  readonly unknownUris = new Set<string>();
  /** Modern: a listen request with an unknown URI is rejected without naming it in `data.uri`. */
  listenRejectionNamesUri = true;
  /** Modern: accepted by listen but left out of the honored subset. */
  readonly unhonoredUris = new Set<string>();
  /** Modern: the `ttlMs` that list and read results carry (0: not cacheable). */
  cacheTtlMs = 0;
  /** Legacy: `resources/subscribe` sends the URI's update before it answers, as some servers do. */
  updateOnSubscribe = false;
  subscribeCapability = true;
  /** While true, legacy connection attempts fail as if the server were not listening. */
  legacyDown = false;
  /** While true, legacy connections are accepted but never answered (a hung server). */
  legacySilent = false;
  /** Legacy connection attempts so far, failed ones included. */
  legacyAttempts = 0;
  /** The filter of every `subscriptions/listen` request, in order. */
  readonly listenFilters: SubscriptionFilter[] = [];
  /** Transports handed out, in order (the last is the current connection's). */
  readonly transports: Transport[] = [];

  private readonly legacy = new Map<Server, Set<string>>();
  private readonly bus = new InMemoryServerEventBus();
  private handler: McpHttpHandler;
  private modernDown = false;
  private readonly listenCuts = new Set<() => void>();
  /** Per method: requests wait on these, oldest first (see `hold` and `holdNext`). */
  private readonly holds = new Map<string, { once: boolean; released: Promise<void> }[]>();
  private readonly receivedWaiters = new Waiters();
  private readonly deliveries: { method: string; resolve: () => void }[] = [];

  constructor(readonly name = "test-backend") {
    this.handler = this.createHandler();
  }

  /** Transport factory for legacy (2025-11-25) connections. */
  readonly legacyTransport = (): Transport => {
    this.legacyAttempts++;
    if (this.legacyDown) throw new TypeError("connect ECONNREFUSED (the test server is down)");
    const [client, serverSide] = InMemoryTransport.createLinkedPair();
    this.tap(serverSide, (message) => this.onWire(message));
    this.tap(client, (message) => this.onDelivered(message));
    if (this.legacySilent) {
      serverSide.onmessage = () => undefined;
    } else {
      const server = this.createServer("legacy");
      this.legacy.set(server, new Set());
      server.onclose = () => this.legacy.delete(server);
      void server.connect(serverSide);
    }
    this.transports.push(client);
    return client;
  };

  /** Transport factory for modern (2026-07-28) connections. */
  readonly modernTransport = (): Transport => {
    const transport = new StreamableHTTPClientTransport(new URL("http://127.0.0.1/mcp"), { fetch: (url, init) => this.modernFetch(new Request(url, init)) });
    this.tap(transport, (message) => this.onDelivered(message));
    this.transports.push(transport);
    return transport;
  };

  transportFor(era: ProtocolEra): () => Transport {
    return era === "legacy" ? this.legacyTransport : this.modernTransport;
  }

  /** The URIs each open legacy connection subscribed to. */
  legacySubscriptions(): string[][] {
    return [...this.legacy.values()].map((uris) => [...uris]);
  }

  /**
   * Makes every request of `method` wait until the returned function is called (handler methods,
   * and on the modern transport any method, e.g. `subscriptions/listen` or `notifications/cancelled`).
   */
  hold(method: string): () => void {
    return this.addHold(method, false);
  }

  /** Makes only the next request of `method` wait until the returned function is called. */
  holdNext(method: string): () => void {
    return this.addHold(method, true);
  }

  count(method: string): number {
    return this.received.filter((m) => m === method).length;
  }

  /** Resolves once `count` requests of `method` have been received in all. */
  whenReceived(method: string, count: number): Promise<void> {
    return this.receivedWaiters.until(() => this.count(method) >= count);
  }

  wireCount(method: string): number {
    return this.wire.filter((m) => m === method).length;
  }

  /** Resolves once `count` messages of `method` have reached the server in all. */
  whenWire(method: string, count: number): Promise<void> {
    return this.receivedWaiters.until(() => this.wireCount(method) >= count);
  }

  /**
   * Resolves once the next message of `method` (a notification, typically) reached the client
   * and the client's handlers for it ran. Each message resolves one waiter, oldest first.
   */
  delivered(method: string): Promise<void> {
    return new Promise((resolve) => this.deliveries.push({ method, resolve }));
  }

  listChanged(kind: ListKind): void {
    for (const server of this.legacy.keys()) {
      const sent = kind === "tools" ? server.sendToolListChanged() : kind === "prompts" ? server.sendPromptListChanged() : server.sendResourceListChanged();
      sent.catch(() => undefined);
    }
    this.bus.publish({ kind: `${kind}_list_changed` });
  }

  updated(uri: string): void {
    for (const [server, uris] of this.legacy) if (uris.has(uri)) server.sendResourceUpdated({ uri }).catch(() => undefined);
    this.bus.publish({ kind: "resource_updated", uri });
  }

  /** Ends every legacy connection from the server side, as a crashed server would. */
  async dropLegacyConnections(): Promise<void> {
    await Promise.all([...this.legacy.keys()].map((server) => server.close()));
  }

  /** Ends every open modern listen stream abruptly (the server stays up), as a proxy timeout would. */
  cutListenStreams(): number {
    const cuts = [...this.listenCuts];
    this.listenCuts.clear();
    for (const cut of cuts) cut();
    return cuts.length;
  }

  /** Restarts the modern server: open listen streams end gracefully; `down` until `up()`. */
  async restartModern(): Promise<{ up(): void }> {
    this.modernDown = true;
    await this.handler.close();
    return {
      up: () => {
        this.handler = this.createHandler();
        this.modernDown = false;
      },
    };
  }

  /** Serves the modern handler (which also answers legacy requests statelessly) on 127.0.0.1. */
  async serveHttp(): Promise<{ url: string; close(): Promise<void> }> {
    const server = createHttpServer((req, res) => void this.serveNode(req, res));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    return {
      url: `http://127.0.0.1:${port}/mcp`,
      close: () =>
        new Promise<void>((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    };
  }

  private async serveNode(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = req.method === "GET" || req.method === "HEAD" ? undefined : (Readable.toWeb(req) as ReadableStream<Uint8Array>);
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) if (typeof value === "string") headers.set(name, value);
    const request = new Request(`http://127.0.0.1${req.url ?? "/"}`, { method: req.method, headers, body, duplex: "half" } as RequestInit);
    const response = await this.handler.fetch(request);
    res.writeHead(response.status, Object.fromEntries(response.headers));
    if (response.body === null) res.end();
    else Readable.fromWeb(response.body as import("node:stream/web").ReadableStream<Uint8Array>).pipe(res);
  }

  private async modernFetch(request: Request): Promise<Response> {
    if (this.modernDown) throw new TypeError("fetch failed (the test server is down)");
    const method = request.method === "POST" ? await methodOf(request) : undefined;
    if (method === undefined) return this.handler.fetch(request);
    this.onWire({ jsonrpc: "2.0", method });
    if (method === "subscriptions/listen") return this.listen(request);
    // Handler methods wait in their handler, once recorded (so a test can see them arrive).
    if (!HANDLER_METHODS.has(method)) await this.waitForHolds(method, request.signal);
    return this.handler.fetch(request);
  }

  private async listen(request: Request): Promise<Response> {
    const body = (await request.clone().json()) as { id: string | number; params: { notifications: SubscriptionFilter } };
    const filter = body.params.notifications;
    this.received.push("subscriptions/listen");
    this.listenFilters.push(filter);
    this.receivedWaiters.check();
    await this.waitForHolds("subscriptions/listen", request.signal);
    const error = (code: number, message: string, data?: unknown): Response => Response.json({ jsonrpc: "2.0", id: body.id, error: { code, message, ...(data !== undefined && { data }) } });
    if (this.failing.has("subscriptions/listen")) return error(ProtocolErrorCode.InternalError, "subscriptions/listen fails on purpose");
    const unknown = filter.resourceSubscriptions?.find((uri) => this.unknownUris.has(uri));
    if (unknown !== undefined) {
      return error(ProtocolErrorCode.InvalidParams, `Unknown resource ${unknown}`, this.listenRejectionNamesUri ? { uri: unknown } : undefined);
    }
    const requested = filter.resourceSubscriptions ?? [];
    const honored = requested.filter((uri) => !this.unhonoredUris.has(uri));
    const forwarded =
      honored.length === requested.length
        ? request
        : new Request(request.url, {
            method: "POST",
            headers: request.headers,
            body: JSON.stringify({ ...body, params: { ...body.params, notifications: { ...filter, resourceSubscriptions: honored } } }),
            signal: request.signal,
          });
    return this.cuttable(await this.handler.fetch(forwarded));
  }

  private addHold(method: string, once: boolean): () => void {
    let release = (): void => undefined;
    const hold = { once, released: new Promise<void>((resolve) => (release = resolve)) };
    this.holds.set(method, [...(this.holds.get(method) ?? []), hold]);
    return () => {
      this.holds.set(method, (this.holds.get(method) ?? []).filter((h) => h !== hold));
      release();
    };
  }

  /** Waits for the holds of `method`; a one-shot hold is used up by this request. */
  private async waitForHolds(method: string, signal?: AbortSignal): Promise<void> {
    const holds = this.holds.get(method) ?? [];
    if (holds.length === 0) return;
    const first = holds[0];
    if (first?.once === true) this.holds.set(method, holds.slice(1));
    const waitFor = first?.once === true ? [first.released] : holds.map((h) => h.released);
    const aborted = new Promise<void>((_, reject) => signal?.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError")), { once: true }));
    aborted.catch(() => undefined);
    await Promise.race([Promise.all(waitFor), aborted]);
  }

  private onWire(message: JSONRPCMessage): void {
    if (!("method" in message)) return;
    this.wire.push(message.method);
    this.receivedWaiters.check();
  }

  private onDelivered(message: JSONRPCMessage): void {
    if (!("method" in message)) return;
    const due = this.deliveries.find((d) => d.method === message.method);
    if (due === undefined) return;
    this.deliveries.splice(this.deliveries.indexOf(due), 1);
    // The SDK runs notification handlers in a microtask queued during onmessage: resolving after
    // onmessage returned lets them run before the awaiting test goes on.
    due.resolve();
  }

  /** Calls `seen` after each message the transport hands to whoever set its `onmessage`. */
  private tap(transport: Transport, seen: (message: JSONRPCMessage) => void): void {
    let handler: Transport["onmessage"];
    Object.defineProperty(transport, "onmessage", {
      configurable: true,
      get: () => (handler === undefined ? undefined : (message: JSONRPCMessage, extra?: unknown) => {
        (handler as (m: JSONRPCMessage, e?: unknown) => void)(message, extra);
        seen(message);
      }),
      set: (next: Transport["onmessage"]) => {
        handler = next;
      },
    });
  }

  private ttl(): { ttlMs?: number; cacheScope?: "private" } {
    return this.cacheTtlMs > 0 ? { ttlMs: this.cacheTtlMs, cacheScope: "private" } : {};
  }

  private createHandler(): McpHttpHandler {
    return createMcpHandler(() => this.createServer("modern"), { bus: this.bus });
  }

  /** Passes a streamed response through a stream the test can end. */
  private cuttable(response: Response): Response {
    if (response.body === null) return response;
    let cut: (() => void) | undefined;
    const relay = new TransformStream<Uint8Array, Uint8Array>({
      start: (controller) => {
        cut = () => controller.terminate();
      },
    });
    if (cut === undefined) return response;
    const end = cut;
    this.listenCuts.add(end);
    response.body
      .pipeTo(relay.writable)
      .catch(() => undefined)
      .finally(() => this.listenCuts.delete(end));
    return new Response(relay.readable, { status: response.status, statusText: response.statusText, headers: response.headers });
  }

  private createServer(era: ProtocolEra): Server {
    const server = new Server(
      { name: this.name, version: "1.0.0" },
      {
        capabilities: {
          tools: { listChanged: true },
          prompts: { listChanged: true },
          resources: { listChanged: true, ...(this.subscribeCapability && { subscribe: true }) },
        },
      },
    );
    const record = async (method: string, params?: { _meta?: unknown }): Promise<void> => {
      this.received.push(method);
      this.metas.set(method, [...(this.metas.get(method) ?? []), params?._meta]);
      this.receivedWaiters.check();
      await this.waitForHolds(method);
      if (this.failing.has(method)) throw new ProtocolError(ProtocolErrorCode.InternalError, `${method} fails on purpose`);
    };
    server.setRequestHandler("tools/list", async ({ params }) => {
      await record("tools/list", params);
      return { tools: [...this.tools.values()].map(({ name, description }) => ({ name, description, inputSchema: { type: "object" as const } })), ...this.ttl() };
    });
    server.setRequestHandler("tools/call", async ({ params }) => {
      await record("tools/call", params);
      const tool = this.tools.get(params.name);
      if (tool === undefined) throw new ProtocolError(ProtocolErrorCode.InvalidParams, `Unknown tool ${params.name}`);
      return tool.run(params.arguments ?? {});
    });
    server.setRequestHandler("prompts/list", async ({ params }) => {
      await record("prompts/list", params);
      return { prompts: [...this.prompts].map(([name, { description }]) => ({ name, description })) };
    });
    server.setRequestHandler("prompts/get", async ({ params }) => {
      await record("prompts/get", params);
      if (!this.prompts.has(params.name)) throw new ProtocolError(ProtocolErrorCode.InvalidParams, `Unknown prompt ${params.name}`);
      return { messages: [{ role: "user" as const, content: { type: "text" as const, text: `${params.name} ${JSON.stringify(params.arguments ?? {})}` } }] };
    });
    server.setRequestHandler("resources/list", async ({ params }) => {
      await record("resources/list", params);
      return { resources: [...this.texts.keys()].map((uri) => ({ uri, name: uri })) };
    });
    server.setRequestHandler("resources/templates/list", async ({ params }) => {
      await record("resources/templates/list", params);
      return { resourceTemplates: this.templates.map((uriTemplate) => ({ uriTemplate, name: uriTemplate })) };
    });
    server.setRequestHandler("resources/read", async ({ params }) => {
      await record("resources/read", params);
      const { uri } = params;
      const text = this.texts.get(uri) ?? this.templateText(uri);
      if (text === undefined) throw new ResourceNotFoundError(uri);
      return { contents: [{ uri, mimeType: "text/plain", text }], ...this.ttl() };
    });
    if (era === "legacy") {
      server.setRequestHandler("resources/subscribe", async ({ params: { uri } }) => {
        await record("resources/subscribe");
        if (this.unknownUris.has(uri)) throw new ResourceNotFoundError(uri);
        this.legacy.get(server)?.add(uri);
        if (this.updateOnSubscribe) await server.sendResourceUpdated({ uri });
        return {};
      });
      server.setRequestHandler("resources/unsubscribe", async ({ params: { uri } }) => {
        await record("resources/unsubscribe");
        this.legacy.get(server)?.delete(uri);
        return {};
      });
    }
    return server;
  }
}

async function methodOf(request: Request): Promise<string | undefined> {
  const header = request.headers.get("mcp-method");
  if (header !== null) return header;
  try {
    const body = (await request.clone().json()) as { method?: unknown };
    return typeof body.method === "string" ? body.method : undefined;
  } catch {
    return undefined;
  }
}
