import type { CallToolResult, Client, GetPromptResult, Implementation, ProtocolEra, ReadResourceResult, ServerCapabilities } from "@modelcontextprotocol/client";
import { UriTemplate, type UriTemplateVariables } from "@mcp-broker/shared";
import type { BrokerClientEventMap } from "./broker-client-events.js";
import { resolveOptions, type BrokerClientOptions, type ResolvedOptions } from "./broker-client-options.js";
import { ContentCache, type CachedToolCall, type ContentCacheView } from "./cache/content-cache.js";
import { ConnectionSupervisor, type ConnectionState } from "./connection/connection-supervisor.js";
import { Connection, LIST_KINDS } from "./connection/connection.js";
import { BrokerClientError } from "./errors.js";
import { ListCatalog, type ListReload, type Prompt, type Resource, type ResourceTemplate, type Tool } from "./lists/list-catalog.js";
import { ResourceSubscriptions } from "./subscriptions/resource-subscriptions.js";
import { TypedEventTarget } from "./util/typed-event-target.js";

/**
 * An MCP client for agents and UIs, on top of the SDK v2 `Client`: one-call resource subscriptions
 * in both protocol eras, lists that reload themselves on `list_changed`, a content cache of what
 * was last fetched, and reconnection with re-subscription. Events are dispatched on this object
 * (a standard EventTarget; see `BrokerClientEventMap`).
 *
 * Lifecycle: `connect()` → connected; a dropped connection → reconnecting (backoff) → connected
 * again, lists reloaded and subscriptions restored; `disconnect()` (or a reconnect policy giving
 * up) → disconnected, with subscriptions and caches cleared.
 */
export class BrokerClient extends TypedEventTarget<BrokerClientEventMap> {
  private readonly options: ResolvedOptions;
  private readonly supervisor: ConnectionSupervisor;
  private readonly lists: ListCatalog;
  private readonly subscriptions: ResourceSubscriptions;
  private readonly contents = new ContentCache();

  constructor(options: BrokerClientOptions) {
    super();
    this.options = resolveOptions(options);
    const { clock, random, reconnect, listChangedDebounceMs } = this.options;
    this.lists = new ListCatalog({ clock, debounceMs: listChangedDebounceMs, reloaded: (reload) => this.listReloaded(reload) });
    this.subscriptions = new ResourceSubscriptions((set) => this.emit("resourceSubscriptionsChange", set));
    this.supervisor = new ConnectionSupervisor({
      clock,
      random,
      reconnect,
      create: (onLost) =>
        new Connection(this.options.connection, {
          resourceUpdated: (connection, uri) => this.resourceUpdated(connection, uri),
          listChanged: (connection, kind) => this.lists.changed(connection, kind),
          gap: (connection) => this.notificationsMissed(connection, { lists: true }),
          lost: onLost,
        }),
      establish: (connection, reconnecting) => this.establish(connection, reconnecting),
      stateChanged: ({ state, error, attempt }) => {
        // However the client got there (disconnect(), a failed first connect, reconnecting given up).
        if (state === "disconnected") this.reset();
        this.emit("connectionChange", {
          state,
          era: this.era,
          ...(error !== undefined && { error }),
          ...(attempt !== undefined && { attempt }),
        });
      },
    });
  }

  /** The content cache: what was last fetched per resource, template, prompt and tool. */
  get cache(): ContentCacheView {
    return this.contents;
  }

  get state(): ConnectionState {
    return this.supervisor.state;
  }

  /** The protocol era of the current connection; undefined unless connected. */
  get era(): ProtocolEra | undefined {
    return this.supervisor.current?.era;
  }

  get serverCapabilities(): ServerCapabilities | undefined {
    return this.supervisor.current?.capabilities;
  }

  get serverInfo(): Implementation | undefined {
    return this.supervisor.current?.client.getServerVersion();
  }

  /**
   * The SDK client of the current connection, for what this class does not wrap (completions,
   * logging level, …). It is replaced on each reconnect; undefined unless connected.
   */
  get sdkClient(): Client | undefined {
    return this.supervisor.current?.client;
  }

  /**
   * Connects, negotiates the era and loads every list. Rejects when the server cannot be reached
   * (the first connection is not retried) or when already connecting, connected or reconnecting.
   */
  async connect(): Promise<void> {
    await this.supervisor.connect();
  }

  /** Closes the connection, stops reconnecting, and clears lists, subscriptions and caches. Idempotent. */
  async disconnect(): Promise<void> {
    await this.supervisor.disconnect();
  }

  getTools(): readonly Tool[] {
    return this.lists.tools;
  }

  getResources(): readonly Resource[] {
    return this.lists.resources;
  }

  getResourceTemplates(): readonly ResourceTemplate[] {
    return this.lists.resourceTemplates;
  }

  getPrompts(): readonly Prompt[] {
    return this.lists.prompts;
  }

  /** Reloads every list now (for servers that do not announce changes); change events follow. */
  async reloadLists(): Promise<void> {
    await this.lists.loadAll(this.connected());
  }

  supportsResourceSubscriptions(): boolean {
    return this.supervisor.current?.supportsSubscriptions ?? false;
  }

  getSubscribedResources(): string[] {
    return this.subscriptions.list();
  }

  isSubscribedToResource(uri: string): boolean {
    return this.subscriptions.has(uri);
  }

  /**
   * The subscribed URIs the server refused when they were re-established after a reconnect (e.g.
   * a broker whose backend is still starting). They stay subscribed and are retried after each
   * reload of the resource list; updates flow once the server accepts.
   */
  getPendingResourceSubscriptions(): string[] {
    return this.subscriptions.pending();
  }

  /**
   * Subscribes to updates of `uri` (`resources/subscribe`, or the listen stream's filter). Resolves
   * once the server accepted; subscribing twice is a no-op. Rejects with NOT_CONNECTED,
   * CAPABILITY_MISSING, SUBSCRIPTION_REFUSED or the server's JSON-RPC error.
   */
  async subscribeToResource(uri: string): Promise<void> {
    await this.subscriptions.add(uri, () => {
      const connection = this.connected();
      if (!connection.supportsSubscriptions) {
        throw new BrokerClientError("CAPABILITY_MISSING", "The server does not support resource subscriptions.", { capability: "resources.subscribe" });
      }
      return connection.channel;
    });
  }

  /**
   * Ends the subscription to `uri`; a no-op when not subscribed. While reconnecting, only the set
   * changes (the server forgot it with the connection).
   */
  async unsubscribeFromResource(uri: string): Promise<void> {
    await this.subscriptions.remove(uri, () => {
      const connection = this.supervisor.current;
      return connection?.supportsSubscriptions ? connection.channel : undefined;
    });
  }

  /** Reads `uri` from the server and caches the content under `uri`. */
  async readResource(uri: string): Promise<ReadResourceResult> {
    const connection = this.connected();
    const ticket = this.contents.resources.begin(uri);
    const content = await connection.request((client, options) => client.readResource({ uri }, { ...options, cacheMode: "bypass" }));
    const entry = { uri, content, timestamp: this.options.clock.now() };
    if (this.contents.resources.settle(uri, ticket, entry)) this.emit("resourceContentChange", { source: "resource", uri, entry });
    return content;
  }

  /**
   * Expands `uriTemplate` with `params` (RFC 6570), reads the resulting URI, and caches the content
   * under the template, with the params and the expanded URI.
   */
  async readResourceFromTemplate(uriTemplate: string, params: UriTemplateVariables): Promise<ReadResourceResult> {
    const uri = new UriTemplate(uriTemplate).expand(params);
    const connection = this.connected();
    const ticket = this.contents.templates.begin(uriTemplate);
    const content = await connection.request((client, options) => client.readResource({ uri }, { ...options, cacheMode: "bypass" }));
    const entry = { uriTemplate, params, uri, content, timestamp: this.options.clock.now() };
    if (this.contents.templates.settle(uriTemplate, ticket, entry)) this.emit("resourceContentChange", { source: "template", uri, uriTemplate, entry });
    return content;
  }

  /** Gets prompt `name` with `params` and caches the result under `name`. */
  async getPrompt(name: string, params: Record<string, string> = {}): Promise<GetPromptResult> {
    const connection = this.connected();
    const ticket = this.contents.prompts.begin(name);
    const result = await connection.request((client, options) => client.getPrompt({ name, arguments: params }, options));
    const entry = { name, params, result, timestamp: this.options.clock.now() };
    if (this.contents.prompts.settle(name, ticket, entry)) this.emit("promptContentChange", { name, entry });
    return result;
  }

  /**
   * Calls tool `name` with `params` and caches the outcome under `name`: the result, or (with
   * `success: false`) what the call threw or the result of a tool that reported `isError`. Like
   * the SDK, resolves with an `isError` result and rejects with what the call threw.
   */
  async callTool(name: string, params: Record<string, unknown> = {}): Promise<CallToolResult> {
    const connection = this.connected();
    const ticket = this.contents.toolCalls.begin(name);
    const timestamp = (): number => this.options.clock.now();
    let entry: CachedToolCall;
    try {
      const result = await connection.request((client, options) => client.callTool({ name, arguments: params }, options));
      entry =
        result.isError === true
          ? { name, params, timestamp: timestamp(), success: false, error: toolError(name, result), result }
          : { name, params, timestamp: timestamp(), success: true, result };
      this.storeToolCall(name, ticket, entry);
      return result;
    } catch (error) {
      this.storeToolCall(name, ticket, { name, params, timestamp: timestamp(), success: false, error });
      throw error;
    }
  }

  private storeToolCall(name: string, ticket: number, entry: CachedToolCall): void {
    if (this.contents.toolCalls.settle(name, ticket, entry)) this.emit("toolCallResultChange", { name, entry });
  }

  private connected(): Connection {
    const connection = this.supervisor.current;
    if (connection === undefined) {
      const state = this.supervisor.state;
      throw new BrokerClientError("NOT_CONNECTED", `The client is ${state}; ${state === "reconnecting" ? "wait for the connection to come back" : "call connect() first"}.`);
    }
    return connection;
  }

  /** Brings a new connection into service: lists first, then the subscriptions. */
  private async establish(connection: Connection, reconnecting: boolean): Promise<void> {
    await this.lists.loadAll(connection);
    if (reconnecting && !this.options.resubscribeOnReconnect) this.subscriptions.clear();
    if (!connection.supportsSubscriptions) {
      for (const uri of this.subscriptions.list()) {
        this.emit("error", {
          operation: `resubscribe ${uri}`,
          error: new BrokerClientError("CAPABILITY_MISSING", "The server no longer supports resource subscriptions.", { capability: "resources.subscribe" }),
        });
      }
      this.subscriptions.clear();
    }
    const refused = await this.subscriptions.restore(connection.channel);
    for (const [uri, error] of refused) this.emit("error", { operation: `resubscribe ${uri}`, error });
    if (reconnecting) this.notificationsMissed(connection, { lists: false });
  }

  /** After a reload of the resource list the server may know URIs it refused before. */
  private async retryPendingSubscriptions(): Promise<void> {
    const connection = this.supervisor.current;
    if (connection === undefined || !connection.supportsSubscriptions || this.subscriptions.pending().length === 0) return;
    const { activated } = await this.subscriptions.retryPending(connection.channel);
    // Updates sent before the server accepted were not delivered.
    for (const uri of activated) this.resourceUpdated(connection, uri);
  }

  /**
   * Notifications may have been sent while the client could not hear them: every subscribed
   * resource is reported as updated once (an extra update is harmless, a missed one is not), and
   * with `lists` every list is reloaded (debounced) too.
   */
  private notificationsMissed(connection: Connection, { lists }: { lists: boolean }): void {
    if (lists) for (const kind of LIST_KINDS) this.lists.changed(connection, kind);
    for (const uri of this.subscriptions.active()) this.resourceUpdated(connection, uri);
  }

  /**
   * `resources/updated`: re-read the content where it is cached (once, for the direct entry and
   * every template entry that expanded to this URI), otherwise tell the user.
   */
  private resourceUpdated(connection: Connection, uri: string): void {
    if (!this.subscriptions.covers(uri)) return;
    const templates = this.contents.templatesExpandingTo(uri);
    const cachedDirectly = this.contents.resources.get(uri) !== null;
    if (!cachedDirectly && templates.length === 0) {
      this.emit("resourceUpdated", { uri });
      return;
    }
    void this.reread(connection, uri, cachedDirectly, templates.map((entry) => entry.uriTemplate));
  }

  private async reread(connection: Connection, uri: string, direct: boolean, uriTemplates: readonly string[]): Promise<void> {
    const { resources, templates } = this.contents;
    const directTicket = direct ? resources.begin(uri) : undefined;
    const templateTickets = uriTemplates.map((uriTemplate) => ({ uriTemplate, ticket: templates.begin(uriTemplate) }));
    let outcome: { content: ReadResourceResult } | { error: unknown };
    try {
      outcome = { content: await connection.request((client, options) => client.readResource({ uri }, { ...options, cacheMode: "bypass" })) };
    } catch (error) {
      outcome = { error };
    }
    const timestamp = this.options.clock.now();
    // A failed re-read drops the entry: showing content that may be gone would mislead.
    const failure = "error" in outcome ? { error: outcome.error } : {};
    if (directTicket !== undefined) {
      const entry = "content" in outcome ? { uri, content: outcome.content, timestamp } : null;
      if (resources.settle(uri, directTicket, entry)) this.emit("resourceContentChange", { source: "resource", uri, entry, ...failure });
    }
    for (const { uriTemplate, ticket } of templateTickets) {
      const previous = templates.get(uriTemplate);
      const entry = "content" in outcome && previous !== null ? { ...previous, content: outcome.content, timestamp } : null;
      if (templates.settle(uriTemplate, ticket, entry)) this.emit("resourceContentChange", { source: "template", uri, uriTemplate, entry, ...failure });
    }
  }

  private listReloaded(reload: ListReload): void {
    switch (reload.kind) {
      case "tools":
        if (reload.failure === undefined) this.contents.retainTools(reload.tools);
        this.emit("toolsChange", { tools: reload.tools, ...reload.failure });
        return;
      case "prompts":
        if (reload.failure === undefined) this.contents.retainPrompts(reload.prompts);
        this.emit("promptsChange", { prompts: reload.prompts, ...reload.failure });
        return;
      case "resources": {
        const { resources, resourceTemplates, resourcesFailure, resourceTemplatesFailure } = reload;
        if (resourcesFailure === undefined && resourceTemplatesFailure === undefined) {
          this.contents.retainResources(resources, resourceTemplates);
          this.retryPendingSubscriptions().catch((error: unknown) => this.emit("error", { operation: "retry pending subscriptions", error }));
        }
        this.emit("resourcesChange", { resources, ...resourcesFailure });
        this.emit("resourceTemplatesChange", { resourceTemplates, ...resourceTemplatesFailure });
        return;
      }
    }
  }

  /** Back to a blank state: no lists, no subscriptions, no cached content. */
  private reset(): void {
    this.lists.clear();
    this.subscriptions.clear();
    this.contents.clearAll();
  }
}

function toolError(name: string, result: CallToolResult): BrokerClientError {
  const text = result.content
    .flatMap((block) => (block.type === "text" ? [block.text] : []))
    .join("\n");
  return new BrokerClientError("TOOL_ERROR", `Tool ${name} reported an error${text === "" ? "" : `: ${text}`}`, { tool: name });
}
