import {
  Client,
  ProtocolError,
  SdkError,
  SdkErrorCode,
  SdkHttpError,
  StreamableHTTPClientTransport,
  type McpSubscription,
  type ServerCapabilities,
  type SubscriptionFilter,
  type Transport,
} from "@modelcontextprotocol/client";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/client/stdio";
import { BrokerError, NOTIFICATION, isStdioBackend, type BackendConfig, type Clock, type TimerHandle } from "@mcp-broker/shared";
import type { Logger } from "../logger.js";
import { backoffDelay } from "./backoff.js";

export type BackendState = "connecting" | "connected" | "backoff" | "closed";
export type ListKind = "tools" | "prompts" | "resources";
export type BackendEra = "legacy" | "modern";

/** What a connection reports to whoever owns it (the pool). Called synchronously, never awaited. */
export interface BackendListener {
  connected(backend: BackendConnection): void;
  disconnected(backend: BackendConnection, reason: string): void;
  resourceUpdated(backend: BackendConnection, uri: string): void;
  listChanged(backend: BackendConnection, kind: ListKind): void;
  log(backend: BackendConnection, params: Record<string, unknown>): void;
}

export interface BackendRequestOptions {
  signal?: AbortSignal | undefined;
  onprogress?: ((progress: { progress: number; total?: number; message?: string }) => void) | undefined;
}

const MODERN_REVISION = "2026-07-28";
const CONNECT_TIMEOUT_MS = 20_000;

/**
 * One backend MCP server: an SDK v2 client that is kept connected. A drop (process exit, failed
 * request, failed health ping) moves to `backoff` and reconnects with capped exponential delays;
 * the listener hears `disconnected` once per drop and `connected` once per successful connect.
 */
export class BackendConnection {
  private stateValue: BackendState = "connecting";
  private client: Client | undefined;
  private attempt = 0;
  private retryTimer: TimerHandle | undefined;
  private healthTimer: TimerHandle | undefined;
  private listen: McpSubscription | undefined;
  private listenFilter: SubscriptionFilter = {};
  private listenAttempt = 0;
  private listenGeneration = 0;
  private listenTimer: TimerHandle | undefined;
  private lastError: string | undefined;

  constructor(
    readonly config: BackendConfig,
    private readonly deps: {
      listener: BackendListener;
      logger: Logger;
      clock: Clock;
      clientInfo: { name: string; version: string };
    },
  ) {}

  get id(): string {
    return this.config.id;
  }

  get state(): BackendState {
    return this.stateValue;
  }

  get era(): BackendEra | undefined {
    return this.client?.getProtocolEra();
  }

  get capabilities(): ServerCapabilities | undefined {
    return this.client?.getServerCapabilities();
  }

  get serverInfo(): { name: string; version: string } | undefined {
    return this.client?.getServerVersion();
  }

  /** Human-readable reason of the last failure, for `/readyz` and errors. */
  get lastFailure(): string | undefined {
    return this.lastError;
  }

  start(): void {
    void this.connect();
  }

  async close(): Promise<void> {
    this.stateValue = "closed";
    this.clearTimers();
    const client = this.client;
    this.client = undefined;
    await this.listen?.close().catch(() => undefined);
    this.listen = undefined;
    await client?.close().catch(() => undefined);
  }

  /**
   * Sends one request to the backend. Backend JSON-RPC errors come back as `ProtocolError`
   * unchanged; a down backend or a timeout becomes a `BrokerError`; a transport failure also
   * starts a reconnect.
   */
  async request(method: string, params: Record<string, unknown> | undefined, options: BackendRequestOptions = {}): Promise<Record<string, unknown>> {
    const client = this.client;
    if (client === undefined || this.stateValue !== "connected") {
      throw new BrokerError("BACKEND_UNAVAILABLE", `Backend '${this.id}' is not connected${this.lastError ? ` (${this.lastError})` : ""}; retry later.`, {
        backend: this.id,
      });
    }
    try {
      const result = await client.request(
        { method: method as "ping", ...(params !== undefined && { params }) },
        {
          timeout: this.config.timeoutMs,
          ...(options.signal !== undefined && { signal: options.signal }),
          ...(options.onprogress !== undefined && { onprogress: options.onprogress, resetTimeoutOnProgress: true }),
        },
      );
      return result;
    } catch (error) {
      throw this.translateError(client, error);
    }
  }

  /**
   * The filter of this backend's single `subscriptions/listen` stream (modern backends only).
   * Reopened whenever the filter changes or the stream drops.
   */
  setListenFilter(filter: SubscriptionFilter): void {
    this.listenFilter = filter;
    if (this.era === "modern" && this.stateValue === "connected") void this.reopenListen();
  }

  private async connect(): Promise<void> {
    if (this.stateValue === "closed") return;
    this.stateValue = "connecting";
    const { logger } = this.deps;
    const client = new Client(this.deps.clientInfo, {
      capabilities: {},
      versionNegotiation: {
        mode: this.config.era === "auto" ? "auto" : this.config.era === "modern" ? { pin: MODERN_REVISION } : "legacy",
      },
    });
    this.installHandlers(client);
    let transport: Transport;
    try {
      transport = this.createTransport();
    } catch (error) {
      this.fail(client, `cannot create transport: ${(error as Error).message}`);
      return;
    }
    try {
      await client.connect(transport, { timeout: Math.min(this.config.timeoutMs, CONNECT_TIMEOUT_MS) });
    } catch (error) {
      this.fail(client, `connect failed: ${describe(error)}`);
      return;
    }
    if ((this.stateValue as BackendState) === "closed") {
      await client.close().catch(() => undefined);
      return;
    }
    client.onclose = () => this.drop(client, "connection closed");
    this.client = client;
    this.stateValue = "connected";
    this.attempt = 0;
    this.lastError = undefined;
    logger.info({ backend: this.id, era: client.getProtocolEra(), server: client.getServerVersion() }, "backend connected");
    if (!isStdioBackend(this.config)) this.scheduleHealthCheck(client);
    if (client.getProtocolEra() === "modern") void this.reopenListen();
    this.deps.listener.connected(this);
  }

  private createTransport(): Transport {
    const config = this.config;
    if (isStdioBackend(config)) {
      const transport = new StdioClientTransport({
        command: config.command,
        args: config.args,
        env: { ...getDefaultEnvironment(), ...config.env },
        ...(config.cwd !== undefined && { cwd: config.cwd }),
        stderr: "pipe",
      });
      transport.stderr?.on("data", (chunk: Buffer) => {
        for (const line of chunk.toString("utf8").split("\n")) {
          if (line.trim() !== "") this.deps.logger.debug({ backend: this.id, stderr: line }, "backend stderr");
        }
      });
      return transport;
    }
    return new StreamableHTTPClientTransport(new URL(config.url), {
      requestInit: { headers: config.headers },
      reconnectionOptions: { initialReconnectionDelay: 1000, maxReconnectionDelay: 30_000, reconnectionDelayGrowFactor: 2, maxRetries: 2 },
    });
  }

  private installHandlers(client: Client): void {
    const { listener } = this.deps;
    client.setNotificationHandler(NOTIFICATION.resourceUpdated, (n) => {
      if (this.client === client) listener.resourceUpdated(this, n.params.uri);
    });
    client.setNotificationHandler(NOTIFICATION.toolsListChanged, () => {
      if (this.client === client) listener.listChanged(this, "tools");
    });
    client.setNotificationHandler(NOTIFICATION.promptsListChanged, () => {
      if (this.client === client) listener.listChanged(this, "prompts");
    });
    client.setNotificationHandler(NOTIFICATION.resourcesListChanged, () => {
      if (this.client === client) listener.listChanged(this, "resources");
    });
    client.setNotificationHandler(NOTIFICATION.message, (n) => {
      if (this.client === client) listener.log(this, n.params);
    });
    client.onerror = (error) => this.deps.logger.debug({ backend: this.id, err: error.message }, "backend transport error");
  }

  private fail(client: Client, reason: string): void {
    void client.close().catch(() => undefined);
    if (this.stateValue === "closed") return;
    this.lastError = reason;
    this.deps.logger.warn({ backend: this.id, reason, attempt: this.attempt }, "backend unavailable");
    this.scheduleReconnect();
  }

  /** The live client went away: tell the listener once, then reconnect. */
  private drop(client: Client, reason: string): void {
    if (this.client !== client || this.stateValue === "closed") return;
    this.client = undefined;
    this.listen = undefined;
    this.lastError = reason;
    this.clearTimers();
    void client.close().catch(() => undefined);
    this.deps.logger.warn({ backend: this.id, reason }, "backend disconnected");
    this.scheduleReconnect();
    this.deps.listener.disconnected(this, reason);
  }

  private scheduleReconnect(): void {
    this.stateValue = "backoff";
    const delay = backoffDelay(this.config.reconnect, this.attempt++);
    this.retryTimer = this.deps.clock.setTimeout(() => {
      this.retryTimer = undefined;
      void this.connect();
    }, delay);
  }

  private scheduleHealthCheck(client: Client): void {
    this.healthTimer = this.deps.clock.setTimeout(() => {
      this.healthTimer = undefined;
      if (this.client !== client) return;
      // The modern era has no ping; server/discover is its cheap liveness probe.
      const probe = client.getProtocolEra() === "modern" ? client.discover({ timeout: this.config.timeoutMs }) : client.ping({ timeout: this.config.timeoutMs });
      probe.then(
        () => this.scheduleHealthCheck(client),
        (error: unknown) => this.drop(client, `health check failed: ${describe(error)}`),
      );
    }, this.config.healthIntervalMs);
    this.healthTimer.unref?.();
  }

  /**
   * Opens the new stream before closing the old one: an overlap may deliver an update twice
   * (harmless), a gap could lose one (not harmless).
   */
  private async reopenListen(): Promise<void> {
    const client = this.client;
    if (client === undefined) return;
    const generation = ++this.listenGeneration;
    const filter = this.effectiveListenFilter();
    let next: McpSubscription | undefined;
    if (Object.keys(filter).length > 0) {
      try {
        next = await client.listen(filter, { timeout: this.config.timeoutMs });
      } catch (error) {
        this.deps.logger.warn({ backend: this.id, err: describe(error) }, "subscriptions/listen failed");
        if (generation === this.listenGeneration && this.client === client) this.scheduleListenRetry(client);
        return;
      }
    }
    if (generation !== this.listenGeneration || this.client !== client) {
      await next?.close().catch(() => undefined);
      return;
    }
    const previous = this.listen;
    this.listen = next;
    this.listenAttempt = 0;
    await previous?.close().catch(() => undefined);
    if (next === undefined) return;
    const opened = next;
    void opened.closed.then((how) => {
      if (how === "remote" && this.listen === opened && this.client === client) this.scheduleListenRetry(client);
    });
  }

  private scheduleListenRetry(client: Client): void {
    if (this.listenTimer !== undefined) return;
    const delay = backoffDelay(this.config.reconnect, this.listenAttempt++);
    this.listenTimer = this.deps.clock.setTimeout(() => {
      this.listenTimer = undefined;
      if (this.client === client) void this.reopenListen();
    }, delay);
  }

  /** List-change flags follow the backend's capabilities; resource URIs follow the wanted set. */
  private effectiveListenFilter(): SubscriptionFilter {
    const caps = this.capabilities ?? {};
    const filter: SubscriptionFilter = {};
    if (caps.tools?.listChanged) filter.toolsListChanged = true;
    if (caps.prompts?.listChanged) filter.promptsListChanged = true;
    if (caps.resources?.listChanged) filter.resourcesListChanged = true;
    const uris = this.listenFilter.resourceSubscriptions ?? [];
    if (caps.resources?.subscribe && uris.length > 0) filter.resourceSubscriptions = [...uris];
    return filter;
  }

  private translateError(client: Client, error: unknown): Error {
    if (error instanceof ProtocolError) return error;
    if (error instanceof SdkError && error.code === SdkErrorCode.RequestTimeout) {
      return new BrokerError("BACKEND_TIMEOUT", `Backend '${this.id}' did not answer within ${this.config.timeoutMs} ms.`, {
        backend: this.id,
        timeoutMs: this.config.timeoutMs,
      });
    }
    if (error instanceof SdkError && error.code === SdkErrorCode.CapabilityNotSupported) {
      return new BrokerError("CAPABILITY_MISSING", `Backend '${this.id}' does not support this: ${error.message}`, { backend: this.id });
    }
    if (isAbort(error)) return error as Error;
    // Anything else is a transport-level failure: the backend is treated as down until reconnected.
    const reason = describe(error);
    this.drop(client, `request failed: ${reason}`);
    return new BrokerError("BACKEND_UNAVAILABLE", `Backend '${this.id}' failed: ${reason}; retry later.`, { backend: this.id }, { cause: error });
  }

  private clearTimers(): void {
    for (const timer of [this.retryTimer, this.healthTimer, this.listenTimer]) {
      if (timer !== undefined) this.deps.clock.clearTimeout(timer);
    }
    this.retryTimer = this.healthTimer = this.listenTimer = undefined;
  }
}

function isAbort(error: unknown): boolean {
  return error instanceof Error && error.name === "AbortError";
}

function describe(error: unknown): string {
  if (error instanceof SdkHttpError) return `${error.message}`;
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
  }
  return String(error);
}
