import { InMemoryTransport, StreamableHTTPClientTransport, type Transport } from "@modelcontextprotocol/client";
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

/**
 * A small MCP server for unit tests, built on the SDK's own `Server` (real protocol handling,
 * both eras), whose state a test changes directly:
 *
 * - legacy: one `Server` per connection over an in-memory transport pair; `resources/subscribe`
 *   is remembered per connection and `updated()` notifies only subscribers;
 * - modern: the SDK's `createMcpHandler` behind an in-process fetch (Streamable HTTP, no
 *   socket); `subscriptions/listen` streams are fed by its event bus.
 *
 * `received` records every request method in arrival order; `failing` makes a method answer
 * with an internal error.
 */
export class TestBackend {
  tools = new Map<string, BackendTool>();
  prompts = new Map<string, { description?: string }>();
  /** Listed resources and their text. */
  texts = new Map<string, string>();
  templates: string[] = [];
  /** Text of a URI that matches a template but is not listed. */
  templateText: (uri: string) => string | undefined = () => undefined;
  readonly failing = new Set<string>();
  readonly received: string[] = [];
  /** Requests of these methods wait until the promise settles (see `hold`). */
  private readonly held = new Map<string, Promise<void>>();
  /** Refused by `resources/subscribe` (legacy) and by listen (modern): unknown to the server. */
  readonly unknownUris = new Set<string>();
  subscribeCapability = true;
  /** While true, legacy connection attempts fail as if the server were not listening. */
  legacyDown = false;
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

  constructor(readonly name = "test-backend") {
    this.handler = this.createHandler();
  }

  /** Transport factory for legacy (2025-11-25) connections. */
  readonly legacyTransport = (): Transport => {
    this.legacyAttempts++;
    if (this.legacyDown) throw new TypeError("connect ECONNREFUSED (the test server is down)");
    const [client, serverSide] = InMemoryTransport.createLinkedPair();
    const server = this.createServer("legacy");
    this.legacy.set(server, new Set());
    server.onclose = () => this.legacy.delete(server);
    void server.connect(serverSide);
    this.transports.push(client);
    return client;
  };

  /** Transport factory for modern (2026-07-28) connections. */
  readonly modernTransport = (): Transport => {
    const transport = new StreamableHTTPClientTransport(new URL("http://127.0.0.1/mcp"), {
      fetch: async (url, init) => {
        if (this.modernDown) throw new TypeError("fetch failed (the test server is down)");
        const request = new Request(url, init);
        if (request.headers.get("mcp-method") !== "subscriptions/listen") return this.handler.fetch(request);
        const body = (await request.clone().json()) as { id: string | number; params: { notifications: SubscriptionFilter } };
        this.received.push("subscriptions/listen");
        this.listenFilters.push(body.params.notifications);
        if (this.failing.has("subscriptions/listen")) {
          return Response.json({ jsonrpc: "2.0", id: body.id, error: { code: ProtocolErrorCode.InternalError, message: "subscriptions/listen fails on purpose" } });
        }
        return this.cuttable(await this.handler.fetch(request));
      },
    });
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

  /** Makes requests of `method` wait until the returned function is called. */
  hold(method: string): () => void {
    let release = (): void => undefined;
    this.held.set(method, new Promise<void>((resolve) => (release = resolve)));
    return () => {
      this.held.delete(method);
      release();
    };
  }

  count(method: string): number {
    return this.received.filter((m) => m === method).length;
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
    const record = async (method: string): Promise<void> => {
      this.received.push(method);
      await this.held.get(method);
      if (this.failing.has(method)) throw new ProtocolError(ProtocolErrorCode.InternalError, `${method} fails on purpose`);
    };
    server.setRequestHandler("tools/list", async () => {
      await record("tools/list");
      return { tools: [...this.tools.values()].map(({ name, description }) => ({ name, description, inputSchema: { type: "object" as const } })) };
    });
    server.setRequestHandler("tools/call", async ({ params }) => {
      await record("tools/call");
      const tool = this.tools.get(params.name);
      if (tool === undefined) throw new ProtocolError(ProtocolErrorCode.InvalidParams, `Unknown tool ${params.name}`);
      return tool.run(params.arguments ?? {});
    });
    server.setRequestHandler("prompts/list", async () => {
      await record("prompts/list");
      return { prompts: [...this.prompts].map(([name, { description }]) => ({ name, description })) };
    });
    server.setRequestHandler("prompts/get", async ({ params }) => {
      await record("prompts/get");
      if (!this.prompts.has(params.name)) throw new ProtocolError(ProtocolErrorCode.InvalidParams, `Unknown prompt ${params.name}`);
      return { messages: [{ role: "user" as const, content: { type: "text" as const, text: `${params.name} ${JSON.stringify(params.arguments ?? {})}` } }] };
    });
    server.setRequestHandler("resources/list", async () => {
      await record("resources/list");
      return { resources: [...this.texts.keys()].map((uri) => ({ uri, name: uri })) };
    });
    server.setRequestHandler("resources/templates/list", async () => {
      await record("resources/templates/list");
      return { resourceTemplates: this.templates.map((uriTemplate) => ({ uriTemplate, name: uriTemplate })) };
    });
    server.setRequestHandler("resources/read", async ({ params: { uri } }) => {
      await record("resources/read");
      const text = this.texts.get(uri) ?? this.templateText(uri);
      if (text === undefined) throw new ResourceNotFoundError(uri);
      return { contents: [{ uri, mimeType: "text/plain", text }] };
    });
    if (era === "legacy") {
      server.setRequestHandler("resources/subscribe", async ({ params: { uri } }) => {
        await record("resources/subscribe");
        if (this.unknownUris.has(uri)) throw new ResourceNotFoundError(uri);
        this.legacy.get(server)?.add(uri);
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
