import { ProtocolError, type CallToolResult, type Client, type GetPromptResult, type Implementation, type ProtocolEra, type ReadResourceResult, type ServerCapabilities } from "@modelcontextprotocol/client";
import { UriTemplate, type UriTemplateVariables } from "@mcp-broker/shared";
import type { BrokerClientEventMap, ResourceContentChange, ResourceContentOutcome, ResourceUpdateReason, ToolCallResultChange } from "./broker-client-events.js";
import { resolveOptions, type BrokerClientOptions, type ResolvedOptions } from "./broker-client-options.js";
import { ContentCache, frozenCopy, recorded, resourceEntry, templateEntry, type CachedPrompt, type CachedToolCall, type ContentCacheView, type TemplateReadResult } from "./cache/content-cache.js";
import type { FetchTicket, LatestEntryMap } from "./cache/latest-entry-map.js";
import { ConnectionSupervisor, type ConnectionState } from "./connection/connection-supervisor.js";
import { Connection, LIST_KINDS } from "./connection/connection.js";
import { BrokerClientError } from "./errors.js";
import { ListCatalog, type ListReload, type Prompt, type Resource, type ResourceTemplate, type Tool } from "./lists/list-catalog.js";
import { convertPromptArguments, type JsonValue } from "./prompt-arguments.js";
import { mergeMetadata, withMetadata, type RequestMetadata } from "./request-metadata.js";
import { ResourceSubscriptions } from "./subscriptions/resource-subscriptions.js";
import { RetryTimer } from "./util/retry-timer.js";
import { TypedEventTarget } from "./util/typed-event-target.js";

/**
 * An MCP client for agents and UIs, on top of the SDK v2 `Client`: one-call resource subscriptions
 * in both protocol eras, lists that reload themselves on `list_changed`, a content cache of what
 * was last fetched, and reconnection with re-subscription. Events are dispatched on this object
 * (a standard EventTarget; see `BrokerClientEventMap`).
 *
 * Lifecycle: `connect()` → connected; a dropped connection → reconnecting (backoff) → connected
 * again, subscriptions restored and lists reloaded; `disconnect()` (or a reconnect policy giving
 * up) → disconnected, with subscriptions and caches cleared. Calls go to the connection in
 * service, or to the one being set up once it is open (so the listeners of the events fired
 * during the set-up can use the client).
 */
export class BrokerClient extends TypedEventTarget<BrokerClientEventMap> {
  private readonly options: ResolvedOptions;
  private readonly supervisor: ConnectionSupervisor;
  private readonly lists: ListCatalog;
  private readonly subscriptions: ResourceSubscriptions;
  private readonly contents = new ContentCache();
  /** Retries pending subscriptions with backoff, for servers that never announce a list change. */
  private readonly pendingRetry: RetryTimer;

  constructor(options: BrokerClientOptions) {
    super();
    this.options = resolveOptions(options);
    const { clock, random, reconnect, listChangedDebounceMs, defaultMetadata } = this.options;
    this.lists = new ListCatalog({ clock, debounceMs: listChangedDebounceMs, metadata: defaultMetadata, reloaded: (reload) => this.listReloaded(reload) });
    this.subscriptions = new ResourceSubscriptions((set) => this.emit("resourceSubscriptionsChange", set));
    this.pendingRetry = new RetryTimer({
      clock,
      random,
      policy: this.options.pendingRetry,
      task: async () => {
        await this.retryPendingSubscriptions();
        return this.subscriptions.pending().length === 0;
      },
      failed: (error) => this.emit("error", { operation: "retry pending subscriptions", error }),
    });
    this.supervisor = new ConnectionSupervisor({
      clock,
      random,
      reconnect,
      create: (onLost) =>
        new Connection(this.options.connection, {
          resourceUpdated: (connection, uri) => this.resourceUpdated(connection, uri, "notification"),
          listChanged: (connection, kind) => this.lists.changed(connection, kind),
          subscriptionsRefused: (connection, refused) => this.subscriptionsDropped(connection, refused),
          gap: (connection) => this.notificationsMissed(connection, { lists: true }),
          // List changes and updates are not heard meanwhile: say why (it is asked again after a backoff).
          streamRefused: (_connection, error) => this.emit("error", { operation: "listen", error }),
          lost: onLost,
        }),
      establish: (connection, reconnecting) => this.establish(connection, reconnecting),
      stateChanged: ({ state, error, attempt }) => {
        // A new connection restarts the retries once its subscriptions are restored.
        if (state !== "connected") this.pendingRetry.stop();
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

  /** The content cache: what was last fetched per resource, template, prompt and tool (read and clear only). */
  get cache(): ContentCacheView {
    return this.contents.view;
  }

  get state(): ConnectionState {
    return this.supervisor.state;
  }

  /** The protocol era of the connection calls go to; undefined while there is none. */
  get era(): ProtocolEra | undefined {
    return this.supervisor.usable?.era;
  }

  get serverCapabilities(): ServerCapabilities | undefined {
    return this.supervisor.usable?.capabilities;
  }

  get serverInfo(): Implementation | undefined {
    return this.supervisor.usable?.client.getServerVersion();
  }

  /** InspectorClient's name for `state`; `reconnecting` is this client's, where InspectorClient has `error`. */
  getStatus(): ConnectionState {
    return this.state;
  }

  /** InspectorClient's name for `serverCapabilities`. */
  getCapabilities(): ServerCapabilities | undefined {
    return this.serverCapabilities;
  }

  /** InspectorClient's name for `serverInfo`. */
  getServerInfo(): Implementation | undefined {
    return this.serverInfo;
  }

  /**
   * The SDK client of the connection calls go to, for what this class does not wrap
   * (completions, logging level, …). It is replaced on each reconnect; undefined while there is
   * no connection.
   */
  get sdkClient(): Client | undefined {
    return this.supervisor.usable?.client;
  }

  /**
   * Connects, negotiates the era, opens the subscription channel and loads every list. Rejects
   * when the server cannot be reached (the first connection is not retried), with CONNECT_ABORTED
   * when `disconnect()` is called first, and with ALREADY_CONNECTED unless disconnected.
   */
  async connect(): Promise<void> {
    await this.supervisor.connect();
  }

  /**
   * Closes the connection (also one still being opened), stops reconnecting, and clears lists,
   * subscriptions and caches. Idempotent.
   */
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

  /**
   * InspectorClient's list clears: each empties its list until the next load (a `list_changed`,
   * `reloadLists()` or a reconnect) and fires the list's change event; cached content stays.
   */
  clearTools(): void {
    this.lists.forget("tools");
    this.emit("toolsChange", { tools: this.lists.tools });
  }

  clearResources(): void {
    this.lists.forget("resources");
    this.emit("resourcesChange", { resources: this.lists.resources });
  }

  /** Until the next load, `readResourceFromTemplate` finds no template (TEMPLATE_NOT_FOUND), as in InspectorClient. */
  clearResourceTemplates(): void {
    this.lists.forget("resourceTemplates");
    this.emit("resourceTemplatesChange", { resourceTemplates: this.lists.resourceTemplates });
  }

  clearPrompts(): void {
    this.lists.forget("prompts");
    this.emit("promptsChange", { prompts: this.lists.prompts });
  }

  /** Reloads every list now (for servers that do not announce changes); change events follow. */
  async reloadLists(): Promise<void> {
    await this.lists.loadAll(this.connected());
  }

  supportsResourceSubscriptions(): boolean {
    return this.supervisor.usable?.supportsSubscriptions ?? false;
  }

  getSubscribedResources(): string[] {
    return this.subscriptions.list();
  }

  isSubscribedToResource(uri: string): boolean {
    return this.subscriptions.has(uri);
  }

  /**
   * The subscribed URIs the server refused when they were re-established after a reconnect (e.g.
   * a broker whose backend is still starting), or later no longer honored on a modern listen
   * stream (reopened, or replaced for another URI). They stay subscribed and are retried with
   * backoff and after each reload of the resource list; updates flow once the server accepts.
   */
  getPendingResourceSubscriptions(): string[] {
    return this.subscriptions.pending();
  }

  /**
   * Subscribes to updates of `uri` (`resources/subscribe`, or the listen stream's filter). Resolves
   * once the server accepted; subscribing twice is a no-op. Updates the server sends before its
   * answer are delivered. Rejects with NOT_CONNECTED, CAPABILITY_MISSING, SUBSCRIPTION_REFUSED or
   * the server's JSON-RPC error.
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
   * Ends the subscription to `uri`; a no-op when not subscribed. While no connection is usable
   * (waiting to reconnect), only the set changes: the server forgot it with the connection.
   */
  async unsubscribeFromResource(uri: string): Promise<void> {
    await this.subscriptions.remove(uri, () => {
      const connection = this.supervisor.usable;
      return connection?.supportsSubscriptions === true ? connection.channel : undefined;
    });
  }

  /**
   * Reads `uri` from the server and caches the content under `uri`. `metadata` is sent as the
   * request's `_meta`, merged over the client's `defaultMetadata`.
   */
  async readResource(uri: string, metadata?: Record<string, string>): Promise<ReadResourceResult> {
    const connection = this.connected();
    const sent = this.metadata(metadata);
    const { resources } = this.contents;
    const ticket = resources.begin(uri);
    let content: ReadResourceResult;
    try {
      content = await readFromServer(connection, uri, sent);
    } catch (error) {
      this.fetchFailed(resources, uri, ticket, error, () => this.contentChanged({ cause: "read", source: "resource", uri, entry: null, error }));
      throw error;
    }
    const entry = resourceEntry(uri, frozenCopy(content), this.timestamp(), sent);
    if (resources.settle(uri, ticket, entry)) this.contentChanged({ cause: "read", source: "resource", uri, entry });
    return content;
  }

  /**
   * Expands `uriTemplate`, one the server lists, with `params` (RFC 6570), reads the resulting
   * URI, and caches the content under the template, with the params and the expanded URI.
   * `metadata` as for `readResource`. Throws TEMPLATE_NOT_FOUND for a template the server does
   * not list (with InspectorClient's message), as InspectorClient does.
   */
  async readResourceFromTemplate(uriTemplate: string, params: UriTemplateVariables, metadata?: Record<string, string>): Promise<TemplateReadResult> {
    const connection = this.connected();
    if (!this.lists.resourceTemplates.some((template) => template.uriTemplate === uriTemplate)) {
      throw new BrokerClientError("TEMPLATE_NOT_FOUND", `Resource template with uriTemplate "${uriTemplate}" not found`, { uriTemplate });
    }
    const uri = new UriTemplate(uriTemplate).expand(params);
    const sent = this.metadata(metadata);
    const cachedParams = frozenCopy(params);
    const { templates } = this.contents;
    const ticket = templates.begin(uriTemplate);
    let content: ReadResourceResult;
    try {
      content = await readFromServer(connection, uri, sent);
    } catch (error) {
      this.fetchFailed(templates, uriTemplate, ticket, error, () => this.contentChanged({ cause: "read", source: "template", uri, uriTemplate, entry: null, error }));
      throw error;
    }
    const entry = templateEntry(uriTemplate, cachedParams, uri, frozenCopy(content), this.timestamp(), sent);
    if (templates.settle(uriTemplate, ticket, entry)) this.contentChanged({ cause: "read", source: "template", uri, uriTemplate, entry });
    return { ...content, uri, uriTemplate, expandedUri: uri, params, result: content, timestamp: this.timestamp(), ...(sent !== undefined && { metadata: sent }) };
  }

  /**
   * Gets prompt `name` and caches the result under `name`. `params` may be any JSON values: they are
   * sent as strings, converted as InspectorClient converts them (`convertPromptArguments`), and
   * cached as sent. `metadata` as for `readResource`.
   */
  async getPrompt(name: string, params: Readonly<Record<string, JsonValue>> = {}, metadata?: Record<string, string>): Promise<GetPromptResult> {
    const connection = this.connected();
    const sent = this.metadata(metadata);
    const args = convertPromptArguments(params);
    const cachedParams = frozenCopy(args);
    const { prompts } = this.contents;
    const ticket = prompts.begin(name);
    let result: GetPromptResult;
    try {
      result = await connection.request((client, options) => client.getPrompt(withMetadata({ name, arguments: args }, sent), options));
    } catch (error) {
      this.fetchFailed(prompts, name, ticket, error, () => this.emit("promptContentChange", { name, entry: null, content: null, timestamp: this.timestamp(), error }));
      throw error;
    }
    const entry: CachedPrompt = { name, params: cachedParams, result: frozenCopy(result), timestamp: this.timestamp(), ...recorded(sent) };
    if (prompts.settle(name, ticket, entry)) this.emit("promptContentChange", { name, entry, content: entry, timestamp: entry.timestamp });
    return result;
  }

  /**
   * Calls tool `name` with `params` and caches the outcome under `name`: the result, or (with
   * `success: false`) what the call threw or the result of a tool that reported `isError`. Like
   * the SDK, resolves with an `isError` result and rejects with what the call threw.
   *
   * The request's `_meta` is InspectorClient's merge: the client's `defaultMetadata`, then
   * `generalMetadata`, then `toolSpecificMetadata`, a later key winning.
   */
  async callTool(
    name: string,
    params: Record<string, unknown> = {},
    generalMetadata?: Record<string, string>,
    toolSpecificMetadata?: Record<string, string>,
  ): Promise<CallToolResult> {
    const connection = this.connected();
    const sent = this.metadata(generalMetadata, toolSpecificMetadata);
    const base = { name, toolName: name, params: frozenCopy(params), ...recorded(sent) };
    const ticket = this.contents.toolCalls.begin(name);
    try {
      const result = await connection.request((client, options) => client.callTool(withMetadata({ name, arguments: params }, sent), options));
      const cached = frozenCopy(result);
      this.storeToolCall(
        name,
        ticket,
        result.isError === true
          ? { ...base, timestamp: this.timestamp(), success: false, error: toolError(name, result), result: cached }
          : { ...base, timestamp: this.timestamp(), success: true, result: cached },
      );
      return result;
    } catch (error) {
      this.storeToolCall(name, ticket, { ...base, timestamp: this.timestamp(), success: false, error });
      throw error;
    }
  }

  /** Forgets the cached result of prompt `name` (as `cache.clearPrompt`); a fetch of it under way no longer counts. */
  clearPromptContent(name: string): void {
    this.contents.clearPrompt(name);
  }

  /** Forgets the cached result of every prompt; the other caches stay. */
  clearAllPromptContent(): void {
    this.contents.clearAllPrompts();
  }

  private storeToolCall(name: string, ticket: FetchTicket, entry: CachedToolCall): void {
    if (this.contents.toolCalls.settle(name, ticket, entry)) this.emit("toolCallResultChange", toolCallResultChange(entry));
  }

  /**
   * Announces a resource or template entry's outcome with InspectorClient's fields (`content`,
   * `timestamp`), and a template entry's new content also as `resourceTemplateContentChange`.
   */
  private contentChanged(outcome: ResourceContentOutcome): void {
    const timestamp = outcome.entry?.timestamp ?? this.timestamp();
    // The spread keeps `source` and `entry` paired; TypeScript cannot follow that through a union.
    this.emit("resourceContentChange", { ...outcome, content: outcome.entry, timestamp } as ResourceContentChange);
    if (outcome.source === "template" && outcome.entry !== null) {
      const { uriTemplate, params } = outcome.entry;
      this.emit("resourceTemplateContentChange", { uriTemplate, content: outcome.entry, params, timestamp });
    }
  }

  /**
   * The cache rule for a read or prompt fetch that failed. The server answered with an error (the
   * resource is gone, bad params): that is the newest outcome, so the entry is dropped, and
   * `announce` runs if there was one. No answer (connection lost, timed out): the fetch counts
   * for nothing and the entry stays as it was. Either way the fetch is settled.
   */
  private fetchFailed<T>(map: LatestEntryMap<T>, key: string, ticket: FetchTicket, error: unknown, announce: () => void): void {
    if (!(error instanceof ProtocolError)) {
      map.abandon(key, ticket);
      return;
    }
    const had = map.get(key) !== null;
    if (map.settle(key, ticket, null) && had) announce();
  }

  private connected(): Connection {
    const connection = this.supervisor.usable;
    if (connection === undefined) {
      const state = this.supervisor.state;
      throw new BrokerClientError("NOT_CONNECTED", `The client is ${state}; ${state === "disconnected" ? "call connect() first" : "wait for the connection to come up"}.`);
    }
    return connection;
  }

  /** The `_meta` of a request: the client's default metadata with the call's merged over it. */
  private metadata(...call: readonly (Record<string, string> | undefined)[]): RequestMetadata | undefined {
    return mergeMetadata(this.options.defaultMetadata, ...call);
  }

  /** When a fetch's outcome arrived, from the injected clock; a new Date per entry (a Date can be set). */
  private timestamp(): Date {
    return new Date(this.options.clock.now());
  }

  /**
   * Brings a new connection into service. Its list changes count from the start; the
   * subscriptions are restored first, which on a modern connection opens the listen stream that
   * also carries the list changes, and only then are the lists loaded: a change announced before
   * the acknowledgement is in what loads, one announced after it reloads the list again.
   */
  private async establish(connection: Connection, reconnecting: boolean): Promise<void> {
    this.lists.attach(connection);
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
    this.reportRefused(connection, refused);
    // A listener may have called disconnect() (or the connection dropped): nothing more to set up.
    if (!this.serving(connection)) return;
    await this.lists.loadAll(connection);
    // A listen stream the server resumed exactly was sent what changed while the client was away.
    if (reconnecting && connection.channel.resumedExactly !== true) this.notificationsMissed(connection, { lists: false });
  }

  /** Whether `connection` is still the one calls go to (not replaced, closed or lost). */
  private serving(connection: Connection): boolean {
    return this.supervisor.usable === connection;
  }

  /**
   * Reports subscriptions the server refused (now pending), and why, and restarts the retries;
   * stops as soon as `connection` is out of service (a listener may disconnect).
   */
  private reportRefused(connection: Connection, refused: ReadonlyMap<string, unknown>): void {
    for (const [uri, error] of refused) {
      if (!this.serving(connection)) return;
      this.emit("error", { operation: `resubscribe ${uri}`, error });
    }
    if (refused.size > 0 && this.serving(connection)) this.pendingRetry.start();
  }

  /** The listen stream of `connection` left out URIs the server no longer honors: they wait as pending. */
  private subscriptionsDropped(connection: Connection, refused: ReadonlyMap<string, unknown>): void {
    const marked = this.subscriptions.markPending(connection.channel, [...refused.keys()]);
    this.reportRefused(connection, new Map(marked.map((uri) => [uri, refused.get(uri)])));
  }

  /** The server may know URIs it refused before (after a reload of the resource list, or a retry delay). */
  private async retryPendingSubscriptions(): Promise<void> {
    const connection = this.supervisor.usable;
    if (connection === undefined || !connection.supportsSubscriptions || this.subscriptions.pending().length === 0) return;
    const { activated } = await this.subscriptions.retryPending(connection.channel);
    // Updates sent before the server accepted were not delivered.
    for (const uri of activated) this.resourceUpdated(connection, uri, "resync");
  }

  /**
   * Notifications may have been sent while the client could not hear them: every subscribed
   * resource is reported as updated once (an extra update is harmless, a missed one is not), and
   * with `lists` every list is reloaded (debounced) too.
   */
  private notificationsMissed(connection: Connection, { lists }: { lists: boolean }): void {
    if (lists) for (const kind of LIST_KINDS) this.lists.changed(connection, kind);
    for (const uri of this.subscriptions.active()) this.resourceUpdated(connection, uri, "resync");
  }

  /**
   * An update of `uri` (a subscribed URI or a sub-resource of one). Where its content is cached
   * (the direct entry, and every template entry that expanded to it) it is re-read once and the
   * update is reported as the entries' new content; otherwise it is reported as `resourceUpdated`
   * at once. The re-reads are begun here, as the update is handled, so that a later fetch or clear
   * of an entry voids its re-read.
   */
  private resourceUpdated(connection: Connection, uri: string, reason: ResourceUpdateReason): void {
    if (!this.subscriptions.covers(uri)) return;
    const { resources, templates } = this.contents;
    const direct = resources.get(uri) === null ? undefined : resources.begin(uri);
    const viaTemplates = this.contents.templatesExpandingTo(uri).map(({ uriTemplate }) => ({ uriTemplate, ticket: templates.begin(uriTemplate) }));
    if (direct === undefined && viaTemplates.length === 0) this.emit("resourceUpdated", { uri, reason });
    else void this.reread(connection, uri, reason, direct, viaTemplates);
  }

  /**
   * Re-reads cached `uri` after an update and announces each entry's outcome (`cause: "update"`).
   * An update is never swallowed: when no entry is announced — the read got no answer, or every
   * entry was cleared or refetched meanwhile — it is reported as `resourceUpdated` instead (if
   * `uri` is still subscribed), and a read without an answer also as an `error`.
   */
  private async reread(
    connection: Connection,
    uri: string,
    reason: ResourceUpdateReason,
    direct: FetchTicket | undefined,
    viaTemplates: readonly { uriTemplate: string; ticket: FetchTicket }[],
  ): Promise<void> {
    const { resources, templates } = this.contents;
    const cause = { cause: "update", reason } as const;
    let announced = false;
    const announce = (outcome: ResourceContentOutcome): void => {
      announced = true;
      this.contentChanged(outcome);
    };
    // A re-read of the client's own sends the default metadata only.
    const sent = this.metadata();
    const read = await readFromServer(connection, uri, sent).then(
      (content) => ({ content }),
      (error: unknown) => ({ error }),
    );
    if ("content" in read) {
      const frozen = frozenCopy(read.content);
      if (direct !== undefined) {
        const entry = resourceEntry(uri, frozen, this.timestamp(), sent);
        if (resources.settle(uri, direct, entry)) announce({ ...cause, source: "resource", uri, entry });
      }
      for (const { uriTemplate, ticket } of viaTemplates) {
        const previous = templates.get(uriTemplate);
        if (previous === null) {
          templates.abandon(uriTemplate, ticket);
          continue;
        }
        const entry = templateEntry(uriTemplate, previous.params, uri, frozen, this.timestamp(), sent);
        if (templates.settle(uriTemplate, ticket, entry)) announce({ ...cause, source: "template", uri, uriTemplate, entry });
      }
    } else {
      const { error } = read;
      if (direct !== undefined) this.fetchFailed(resources, uri, direct, error, () => announce({ ...cause, source: "resource", uri, entry: null, error }));
      for (const { uriTemplate, ticket } of viaTemplates) {
        this.fetchFailed(templates, uriTemplate, ticket, error, () => announce({ ...cause, source: "template", uri, uriTemplate, entry: null, error }));
      }
    }
    if (!announced && this.subscriptions.covers(uri)) this.emit("resourceUpdated", { uri, reason });
    // Without an answer the entries stay as they were (maybe stale); a reconnect re-reads them.
    if ("error" in read && !(read.error instanceof ProtocolError)) this.emit("error", { operation: `re-read ${uri}`, error: read.error });
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

  /** Back to a blank state: no lists, no subscriptions, no cached content (retries are stopped by the caller). */
  private reset(): void {
    this.lists.clear();
    this.subscriptions.clear();
    this.contents.clearAll();
  }
}

/** Reads `uri` past the SDK's response cache: every fetch goes to the server (the cache here is for display). */
function readFromServer(connection: Connection, uri: string, metadata: RequestMetadata | undefined): Promise<ReadResourceResult> {
  return connection.request((client, options) => client.readResource(withMetadata({ uri }, metadata), { ...options, cacheMode: "bypass" }));
}

/** The event of a tool call's outcome: the entry, and the same outcome as InspectorClient's flat payload. */
function toolCallResultChange(entry: CachedToolCall): ToolCallResultChange {
  const { name, toolName, params, timestamp, success, metadata } = entry;
  return {
    name,
    entry,
    toolName,
    params,
    result: entry.result ?? null,
    timestamp,
    success,
    ...(!entry.success && { error: entry.error instanceof Error ? entry.error.message : String(entry.error) }),
    ...(metadata !== undefined && { metadata }),
  };
}

function toolError(name: string, result: CallToolResult): BrokerClientError {
  const text = result.content
    .flatMap((block) => (block.type === "text" ? [block.text] : []))
    .join("\n");
  return new BrokerClientError("TOOL_ERROR", `Tool ${name} reported an error${text === "" ? "" : `: ${text}`}`, { tool: name });
}
