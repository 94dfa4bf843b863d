import {
  Client,
  ProtocolError,
  SdkError,
  SdkErrorCode,
  SdkHttpError,
  STDIO_DEFAULT_MAX_BUFFER_SIZE,
  StreamableHTTPClientTransport,
  specTypeSchemas,
  type McpSubscription,
  type ServerCapabilities,
  type SubscriptionFilter,
  type Transport,
} from "@modelcontextprotocol/client";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/client/stdio";
import { z } from "zod";
import { BrokerError, NOTIFICATION, backoffDelay, isStdioBackend, jsonRpcCode, type BackendConfig, type Clock, type TimerHandle } from "@mcp-broker/shared";
import type { Logger } from "../logger.js";
import { batchStdioWrites, installStdioReadBuffer } from "./stdio-read-buffer.js";
import { INTERACTION_METHODS, InteractionRouter, askClient, type ClientInteraction, type InteractionMethod } from "./client-interaction.js";
import { isConnectionFailure, jsonRpcErrorOf } from "./connection-failure.js";
import { summarizeFailure } from "./failure-summary.js";
import { NotificationStreamWatch } from "./notification-stream-watch.js";
import { updatedEventTap, type UpdatedParams } from "./sse-update-filter.js";
import { BackendHttp, closeAgents, isTooLarge, keepAliveAgents } from "./backend-http.js";
import { passedOnParams } from "./update-params.js";
import { UpstreamListen, type ListenFlags, type ListenGap } from "./upstream-listen.js";

export type BackendState = "connecting" | "connected" | "backoff" | "closed";
/** What `/readyz` and the metrics show: `state`, or `degraded` for a connected backend that stopped answering. */
export type BackendReadiness = BackendState | "degraded";
export type ListKind = "tools" | "prompts" | "resources";
export type BackendEra = "legacy" | "modern";

/** What a connection reports to whoever owns it (the pool). Called synchronously, never awaited. */
export interface BackendListener {
  connected(backend: BackendConnection): void;
  disconnected(backend: BackendConnection, reason: string): void;
  /** `params`: what the backend said besides the URI, to pass on (see `passedOnParams`); undefined when nothing. */
  resourceUpdated(backend: BackendConnection, uri: string, params: Record<string, unknown> | undefined): void;
  /** `gap`: not a notification, a stream that was down (what it announced meanwhile is lost). */
  listChanged(backend: BackendConnection, kind: ListKind, gap?: boolean): void;
  /**
   * Notifications from the backend may have been lost (its notification or listen stream was down
   * for a while): each of `uris` (every URI watched on it when undefined) counts as updated once.
   */
  updatesMissed(backend: BackendConnection, uris?: readonly string[]): void;
  log(backend: BackendConnection, params: Record<string, unknown>): void;
  /**
   * Updates taken in and not yet passed on: while this returns a promise, reading more of an HTTP
   * backend's event streams waits for it (the backend waits on its socket).
   */
  backlog?(): Promise<void> | undefined;
}

export interface BackendRequestOptions {
  signal?: AbortSignal | undefined;
  onprogress?: ((progress: { progress: number; total?: number; message?: string }) => void) | undefined;
  /** The client behind this call, for the backend's sampling, elicitation and roots requests during it (see `InteractionRouter`). */
  interaction?: ClientInteraction | undefined;
  /**
   * A modern backend's InputRequiredResult comes back as it is, for a modern client to fulfil (the
   * caller seals its state). Otherwise the broker asks `interaction` each of its requests and
   * retries, so the caller sees one result; with no `interaction` (a client that cannot be asked)
   * they are answered as such a client would (see `askClient`).
   */
  passInputRequired?: boolean;
}

const MODERN_REVISION = "2026-07-28";
const CONNECT_TIMEOUT_MS = 20_000;
/** How long a shutdown waits for an HTTP backend to acknowledge the end of its session. */
const TERMINATE_TIMEOUT_MS = 2_000;
/** Default health probe timeout (or `timeoutMs`, if shorter): a hung backend shows in `/readyz` within seconds, not after a whole request timeout. */
const HEALTH_TIMEOUT_MS = 5_000;
/** Requests in a row without an answer in time before a connected backend counts as degraded: one may just be a slow tool. */
const DEGRADED_AFTER_TIMEOUTS = 3;
/** Reopen attempts of a legacy backend's notification stream before the connection counts as dropped. */
const NOTIFICATION_STREAM_ATTEMPTS = 5;
const LIST_KINDS: readonly ListKind[] = ["tools", "prompts", "resources"];
/** Rounds of a modern backend's InputRequiredResult the broker answers for a legacy client in one call. */
const MAX_INPUT_ROUNDS = 10;
/**
 * Requests whose legacy-era result is the empty result: sent with the spec's EmptyResult schema
 * named. The SDK's spec-method overload finds a method's result schema by validating `undefined`
 * against it (a failed parse and its error message, on every request: ~6 % of a broker's CPU in a
 * burst of first subscribers); naming one skips that probe. The spec's schema is as strict as the
 * 2025 codec's about fields (anything but `_meta` fails the request, -32003) and laxer only about
 * what `_meta` holds, which the broker does not read from these answers.
 */
const EMPTY_RESULT_METHODS: ReadonlySet<string> = new Set(["ping", "resources/subscribe", "resources/unsubscribe"]);
/**
 * List requests (the catalog's reloads): their result is taken as any object, and the reloader
 * checks each item on its own (see `ListReloader`). With the spec's schema, one malformed tool
 * failed the whole list, so none of the backend's tools were listed and each call got "Unknown tool".
 */
const LIST_METHODS: ReadonlySet<string> = new Set(["tools/list", "prompts/list", "resources/list", "resources/templates/list"]);
const ANY_RESULT = z.looseObject({});

/**
 * One backend MCP server: an SDK v2 client that is kept connected. A drop (process exit, a
 * connection-level request failure, a health probe that fails other than by timing out, a notification stream that cannot be
 * reopened, a listen stream down for a health interval) moves to `backoff` and reconnects with
 * capped exponential delays; the listener hears `disconnected` once per drop and `connected` once
 * per successful connect. A request that fails for any other reason fails alone.
 *
 * A connected backend that stops answering (a health probe without an answer within
 * `healthTimeoutMs`, or `DEGRADED_AFTER_TIMEOUTS` requests in a row without one within `timeoutMs`)
 * is `degraded` (see `readiness`) until it answers anything again. It stays connected: its items
 * stay listed and requests still go to it, since a slow backend may still serve them, and dropping
 * it would only make every client reload its lists twice when it comes back.
 */
export class BackendConnection {
  private stateValue: BackendState = "connecting";
  private client: Client | undefined;
  private attempt = 0;
  private retryTimer: TimerHandle | undefined;
  private healthTimer: TimerHandle | undefined;
  private connectedAt = 0;
  /** Times it connected (the first time included). */
  private connects = 0;
  /** The single upstream `subscriptions/listen` stream of a modern connection. */
  private listen: UpstreamListen | undefined;
  private streamWatch: NotificationStreamWatch | undefined;
  private lastError: string | undefined;
  private inFlight = 0;
  /** Connected, but its last health probe or its last few requests got no answer in time. */
  private degraded = false;
  private timeoutsInARow = 0;
  /** Ties the backend's requests to the client calls they belong to. */
  private readonly interactions = new InteractionRouter();
  /** An HTTP backend's connection pools, kept across reconnects. */
  private readonly agents = keepAliveAgents();

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

  /** `state`, except that a connected backend that stopped answering is `degraded` (`lastFailure` says how). */
  get readiness(): BackendReadiness {
    return this.stateValue === "connected" && this.degraded ? "degraded" : this.stateValue;
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

  /**
   * Requests sent through this connection and not answered yet: clients' and the broker's own
   * (list reloads, subscribes, polls, health probes). Listen streams do not count: they carry only
   * the notification types they asked for, never a log message.
   */
  get requestsInFlight(): number {
    return this.inFlight;
  }

  /** Times it connected again after it had been connected (drops it came back from). */
  get reconnects(): number {
    return Math.max(0, this.connects - 1);
  }

  /** Human-readable reason of the last failure, for `/readyz` and errors: one line, at most `MAX_FAILURE_LENGTH` characters. */
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
    const listen = this.listen;
    this.listen = undefined;
    this.streamWatch?.dispose();
    this.streamWatch = undefined;
    await listen?.dispose();
    // An HTTP backend's session ends with us (DELETE), so it drops its subscriptions for it now
    // instead of when it expires the session; bounded, since the backend may be the thing that is down.
    const transport = client?.transport;
    if (transport instanceof StreamableHTTPClientTransport && transport.sessionId !== undefined) {
      await Promise.race([transport.terminateSession().catch(() => undefined), new Promise((resolve) => setTimeout(resolve, TERMINATE_TIMEOUT_MS).unref())]);
    }
    await client?.close().catch(() => undefined);
    closeAgents(this.agents);
  }

  /**
   * Sends one request to the backend. Backend JSON-RPC errors come back as `ProtocolError`
   * unchanged; a down backend, a timeout or an unusable answer becomes a `BrokerError`; only a
   * connection-level failure (see `isConnectionFailure`) also starts a reconnect.
   */
  async request(method: string, params: Record<string, unknown> | undefined, options: BackendRequestOptions = {}): Promise<Record<string, unknown>> {
    const client = this.client;
    if (client === undefined || this.stateValue !== "connected") throw this.unavailable();
    const { interaction } = options;
    const emptyResult = EMPTY_RESULT_METHODS.has(method) && client.getProtocolEra() === "legacy";
    // A call that asks its client (a modern backend's InputRequiredResult, below) is bounded as a
    // whole, questions and retries included: each round got the whole `timeoutMs` before.
    const deadline = this.deps.clock.now() + this.config.timeoutMs;
    const left = (): number => {
      const ms = deadline - this.deps.clock.now();
      if (ms <= 0) throw new BrokerError("BACKEND_TIMEOUT", `Backend '${this.id}' did not finish the call within ${this.config.timeoutMs} ms (its questions to the client included).`, { backend: this.id, timeoutMs: this.config.timeoutMs });
      return ms;
    };
    const send = (sent: Record<string, unknown> | undefined, headers: Record<string, string>, timeout = this.config.timeoutMs) => {
      const request = { method: method as "ping", ...(sent !== undefined && { params: sent }) };
      const requestOptions = {
        timeout,
        headers,
        ...(options.signal !== undefined && { signal: options.signal }),
        ...(options.onprogress !== undefined && { onprogress: options.onprogress, resetTimeoutOnProgress: true }),
        // A modern backend's InputRequiredResult comes back as it is (see below).
        allowInputRequired: true,
      };
      const schema = emptyResult ? specTypeSchemas.EmptyResult : LIST_METHODS.has(method) ? ANY_RESULT : undefined;
      return (schema !== undefined ? client.request(request, schema, requestOptions) : client.request(request, requestOptions)) as Promise<Record<string, unknown>>;
    };
    try {
      const result = await this.counted(() =>
        this.interactions.run(interaction, this.config.timeoutMs, async (headers) => {
          let answer = await send(params, headers);
          // A modern backend asks by answering InputRequiredResult: unless the caller takes it as
          // it is (a modern client, `passInputRequired`), each embedded request is asked of the
          // client (or answered as one that cannot be asked would), and the call is retried with
          // the answers, so the caller sees one result. Its unsealed state never reaches a client.
          for (let round = 1; options.passInputRequired !== true && answer.resultType === "input_required"; round++) {
            if (round > MAX_INPUT_ROUNDS) {
              throw new BrokerError("BACKEND_INVALID_RESPONSE", `Backend '${this.id}' asked for input more than ${MAX_INPUT_ROUNDS} times in one call.`, { backend: this.id, reason: "too-many-input-rounds" });
            }
            const inputResponses = await this.fulfil(interaction, answer.inputRequests, options.signal, left);
            const { inputResponses: _previous, requestState: _state, ...rest } = params ?? {};
            answer = await send({ ...rest, inputResponses, ...(typeof answer.requestState === "string" && { requestState: answer.requestState }) }, headers, left());
          }
          return answer;
        }),
      );
      this.answered(client);
      return result;
    } catch (error) {
      // Cancelled by the caller (the client's `notifications/cancelled`, or its connection closed):
      // says nothing of the backend. The SDK rejects it as a timeout, which three times in a row
      // marked the backend degraded (any client could take it out of a load balancer's rotation).
      if (options.signal?.aborted === true) throw cancelled(options.signal);
      throw this.translateError(client, error);
    }
  }

  /** Asks the client each request of a modern backend's `inputRequests`; their answers by key. */
  private async fulfil(interaction: ClientInteraction | undefined, inputRequests: unknown, signal: AbortSignal | undefined, left: () => number): Promise<Record<string, unknown>> {
    const answers: Record<string, unknown> = {};
    // Absent: the backend only passed its requestState back (a retry with nothing to answer).
    if (inputRequests === undefined) return answers;
    const malformed = (problem: string, reason = "malformed-input-request") =>
      new BrokerError("BACKEND_INVALID_RESPONSE", `Backend '${this.id}' asked for input the broker cannot pass on: ${problem}.`, { backend: this.id, reason });
    if (typeof inputRequests !== "object" || inputRequests === null || Array.isArray(inputRequests)) throw malformed("inputRequests is not an object of requests");
    for (const [key, request] of Object.entries(inputRequests as Record<string, unknown>)) {
      if (typeof request !== "object" || request === null || Array.isArray(request)) throw malformed(`request '${key}' is not an object`);
      const { method, params } = request as { method?: unknown; params?: unknown };
      if (!(INTERACTION_METHODS as readonly unknown[]).includes(method)) throw malformed(`request '${key}' is ${typeof method === "string" ? method : "without a method"}, not ${INTERACTION_METHODS.join(", ")}`, "unsupported-input-request");
      if (params !== undefined && (typeof params !== "object" || params === null || Array.isArray(params))) throw malformed(`the params of request '${key}' are not an object`);
      answers[key] = await askClient(interaction, method as InteractionMethod, (params ?? {}) as Record<string, unknown>, signal ?? new AbortController().signal, left());
    }
    return answers;
  }

  /** Runs one request to the backend, counted in `requestsInFlight` from now until it settles. */
  private async counted<T>(send: () => Promise<T>): Promise<T> {
    this.inFlight++;
    try {
      return await send();
    } finally {
      this.inFlight--;
    }
  }

  /**
   * Adds `uri` to the filter of this modern backend's single `subscriptions/listen` stream.
   * Resolves once an open stream's acknowledgement honors it; rejects with a `BrokerError` when the
   * backend refuses it or the connection ends.
   */
  /** Modern backends: the resource URIs of each open upstream listen stream (empty otherwise). */
  listenStreams(): string[][] {
    return this.listen?.openStreams() ?? [];
  }

  watchListen(uri: string): Promise<void> {
    if (this.listen === undefined || this.stateValue !== "connected") return Promise.reject(this.unavailable());
    return this.listen.add(uri);
  }

  /** Takes `uri` out of the listen filter (changes are coalesced into one reopen). */
  unwatchListen(uri: string): void {
    this.listen?.remove(uri);
  }

  private async connect(): Promise<void> {
    if (this.stateValue === "closed") return;
    this.stateValue = "connecting";
    const { logger } = this.deps;
    this.interactions.reset();
    const client = new Client(this.deps.clientInfo, {
      // What the broker passes on to the client behind each call (see `InteractionRouter`).
      capabilities: { sampling: {}, elicitation: { form: {}, url: {} }, roots: {} },
      versionNegotiation: {
        mode: this.config.era === "auto" ? "auto" : this.config.era === "modern" ? { pin: MODERN_REVISION } : "legacy",
      },
    });
    const watch = isStdioBackend(this.config) ? undefined : new NotificationStreamWatch({ clock: this.deps.clock, maxAttempts: NOTIFICATION_STREAM_ATTEMPTS });
    this.installHandlers(client, watch);
    let transport: Transport;
    try {
      transport = this.createTransport(watch, (params) => this.takeUpdate(client, params));
    } catch (error) {
      watch?.dispose();
      this.fail(client, `cannot create transport: ${(error as Error).message}`);
      return;
    }
    try {
      await client.connect(transport, { timeout: Math.min(this.config.timeoutMs, CONNECT_TIMEOUT_MS) });
    } catch (error) {
      watch?.dispose();
      this.fail(client, `connect failed: ${describe(error)}`);
      return;
    }
    if ((this.stateValue as BackendState) === "closed") {
      watch?.dispose();
      await client.close().catch(() => undefined);
      return;
    }
    client.onclose = () => this.drop(client, "connection closed");
    this.fastPathUpdates(client, transport);
    this.client = client;
    this.stateValue = "connected";
    this.connects++;
    this.connectedAt = this.deps.clock.now();
    this.lastError = undefined;
    this.degraded = false;
    this.timeoutsInARow = 0;
    logger.info({ backend: this.id, era: client.getProtocolEra(), server: client.getServerVersion() }, "backend connected");
    // Stdio backends too: a child that exits closes the connection, but a hung one (stopped, deadlocked) only shows here.
    this.scheduleHealthCheck(client);
    if (client.getProtocolEra() === "modern") {
      this.listen = this.createListen(client);
      this.listen.start();
    }
    this.deps.listener.connected(this);
    // Last: a stream lost already (its first GET failed during connect) drops at once, after `connected`.
    if (this.client !== client) {
      watch?.dispose();
      return;
    }
    this.streamWatch = watch;
    watch?.onLost((reason) => this.drop(client, reason));
    // The SDK reopened the stream by itself after a drop: nothing it missed is re-sent.
    watch?.onReopened(() => {
      this.deps.logger.info({ backend: this.id }, "backend notification stream reopened; reloading lists and re-notifying watched resources");
      this.catchUp(client, { lists: true });
    });
  }

  private createListen(client: Client): UpstreamListen {
    const caps = client.getServerCapabilities() ?? {};
    const flags: ListenFlags = {};
    if (caps.tools?.listChanged) flags.toolsListChanged = true;
    if (caps.prompts?.listChanged) flags.promptsListChanged = true;
    if (caps.resources?.listChanged) flags.resourcesListChanged = true;
    return new UpstreamListen({
      backendId: this.id,
      open: (filter) => this.openListen(client, filter),
      flags,
      clock: this.deps.clock,
      logger: this.deps.logger,
      policy: this.config.reconnect,
      onGap: (gap) => this.catchUp(client, gap),
    });
  }

  private async openListen(client: Client, filter: SubscriptionFilter): Promise<McpSubscription> {
    try {
      const subscription = await client.listen(filter, { timeout: this.config.timeoutMs });
      this.answered(client);
      return subscription;
    } catch (error) {
      throw this.translateError(client, error);
    }
  }

  /**
   * A notification stream (legacy GET stream, modern listen stream) was down and is open again:
   * what the backend sent meanwhile is gone, and it may even have restarted with other lists. So with
   * `lists` every list it offers is reloaded (the catalog announces real changes only), and the URIs
   * the gap covered (`undefined`: every watched one) count as updated once.
   */
  private catchUp(client: Client, gap: { readonly lists: boolean; readonly uris?: ListenGap["uris"] | undefined }): void {
    if (this.client !== client) return;
    if (gap.lists) {
      const caps = client.getServerCapabilities() ?? {};
      for (const kind of LIST_KINDS) if (caps[kind] !== undefined) this.deps.listener.listChanged(this, kind, true);
    }
    if (gap.uris === undefined || gap.uris.length > 0) this.deps.listener.updatesMissed(this, gap.uris);
  }

  /**
   * The one intake of a backend's `resources/updated` (the hot path): whichever way it came, it is
   * handed on here, once, while `client` is still this connection's. The ways, fastest first:
   * - HTTP backends: taken off the event-stream bytes (`updateFilteringFetch`), before the SDK's
   *   web-stream SSE parsing and schema validation;
   * - every transport: taken off `transport.onmessage` (`fastPathUpdates`), before the SDK's
   *   dispatch; stdio lines of this method reach it unvalidated (`StdioReadBuffer`);
   * - anything else (a modern backend's listen stream): the SDK's notification handler.
   * Each way is a measured saving (see the bench); they all end in this method.
   */
  private takeUpdate(client: Client, params: UpdatedParams): void {
    if (this.client === client) this.deps.listener.resourceUpdated(this, params.uri, passedOnParams(params));
  }

  /**
   * Takes `resources/updated` off the transport before the SDK's dispatch (its type guards,
   * response-cache eviction — the broker never reads through that cache — and a promise per
   * notification). Everything else, and anything malformed, goes on to the SDK.
   *
   * A response that comes in the same turn as a progress notification goes on to the SDK a
   * microtask later: the SDK hands a notification to its handler a microtask after it arrives, but
   * settles a response at once, dropping the request's progress handler, so progress that came in
   * one read with its request's result was lost (server-everything's long-running operation over
   * stdio lost its last in 8 of 10 calls).
   */
  private fastPathUpdates(client: Client, transport: Transport): void {
    const sdk = transport.onmessage;
    if (sdk === undefined) return;
    let progressed = false;
    transport.onmessage = (message, extra) => {
      const candidate = message as { method?: unknown; id?: unknown; params?: { uri?: unknown } };
      if (candidate.method === NOTIFICATION.resourceUpdated && candidate.id === undefined && typeof candidate.params?.uri === "string") {
        this.takeUpdate(client, candidate.params as UpdatedParams);
        return;
      }
      if (candidate.method === "notifications/progress" && !progressed) {
        progressed = true;
        sdk.call(transport, message, extra);
        // Queued after the SDK's handler of this notification: a response of this turn waits behind both.
        queueMicrotask(() => (progressed = false));
        return;
      }
      if (progressed && candidate.method === undefined) {
        queueMicrotask(() => sdk.call(transport, message, extra));
        return;
      }
      sdk.call(transport, message, extra);
    };
  }

  /**
   * The error response that stands for an answer over the size limit (stdio or HTTP): what any
   * unusable answer gets (see `translateError`), -32003, and the backend stays connected.
   */
  private oversizedAnswer(what: string, bytes: number): { code: number; message: string; data: Record<string, unknown> } {
    return { code: jsonRpcCode("BACKEND_INVALID_RESPONSE", "legacy"), message: `Backend '${this.id}' gave an unusable answer: ${what}`, data: { backend: this.id, reason: "too-large", bytes } };
  }

  /** `onUpdate` hears the `resources/updated` an HTTP backend sends, taken off its event streams (see `updateFilteringFetch`). */
  private createTransport(watch: NotificationStreamWatch | undefined, onUpdate: (params: UpdatedParams) => void): Transport {
    const config = this.config;
    if (isStdioBackend(config)) {
      const transport = new StdioClientTransport({
        command: config.command,
        args: config.args,
        env: { ...getDefaultEnvironment(), ...config.env },
        ...(config.cwd !== undefined && { cwd: config.cwd }),
        stderr: "pipe",
      });
      const limit = STDIO_DEFAULT_MAX_BUFFER_SIZE;
      const installed = installStdioReadBuffer(transport, {
        maxLineBytes: limit,
        oversized: ({ bytes }) => this.oversizedAnswer(`${bytes} bytes on one line, over the ${limit}-byte limit of a stdio message`, bytes),
        onOversized: ({ bytes, answers }) =>
          this.deps.logger.warn({ backend: this.id, bytes, limit, ...(answers !== undefined && { answers }) }, answers === undefined ? "skipped a stdio message over the size limit" : "skipped an answer over the size limit; its request fails with -32003"),
      });
      if (!installed) {
        this.deps.logger.debug({ backend: this.id }, "SDK stdio transport without the expected reader: updates take the SDK's validation");
      }
      batchStdioWrites(transport);
      transport.stderr?.on("data", (chunk: Buffer) => {
        for (const line of chunk.toString("utf8").split("\n")) {
          if (line.trim() !== "") this.deps.logger.debug({ backend: this.id, stderr: line }, "backend stderr");
        }
      });
      return transport;
    }
    const updates = updatedEventTap(onUpdate);
    const limit = STDIO_DEFAULT_MAX_BUFFER_SIZE;
    const http = new BackendHttp({
      agents: this.agents,
      backlog: () => this.deps.listener.backlog?.(),
      maxMessageBytes: limit,
      oversized: (bytes) => this.oversizedAnswer(`a message of more than ${bytes} bytes, over the ${limit}-byte limit`, bytes),
      onOversized: (bytes, id) =>
        this.deps.logger.warn({ backend: this.id, bytes, limit, ...(id !== undefined && { answers: id }) }, id === undefined ? "dropped a message over the size limit (the stream is opened again)" : "dropped an answer over the size limit; its request fails with -32003"),
      prepare: (init) => {
        const call = this.interactions.prepare(init);
        const ties = call.tap;
        return {
          init: call.init,
          tap:
            ties === undefined
              ? updates
              : (event) => {
                  ties(event);
                  return updates(event);
                },
        };
      },
    });
    return new StreamableHTTPClientTransport(new URL(config.url), {
      requestInit: { headers: config.headers },
      reconnectionOptions: {
        initialReconnectionDelay: config.reconnect.initialDelayMs,
        maxReconnectionDelay: config.reconnect.maxDelayMs,
        reconnectionDelayGrowFactor: config.reconnect.multiplier,
        // The watch gives up first and says so; the SDK's own limit is only a backstop.
        maxRetries: NOTIFICATION_STREAM_ATTEMPTS + 1,
      },
      ...(watch !== undefined && { reconnectionScheduler: watch.scheduler }),
      fetch: watch?.wrap(http.fetch) ?? http.fetch,
    });
  }

  private installHandlers(client: Client, watch: NotificationStreamWatch | undefined): void {
    const { listener } = this.deps;
    client.setNotificationHandler(NOTIFICATION.resourceUpdated, (n) => this.takeUpdate(client, n.params));
    client.setNotificationHandler(NOTIFICATION.toolsListChanged, () => {
      if (this.client === client) listener.listChanged(this, "tools");
    });
    client.setNotificationHandler(NOTIFICATION.promptsListChanged, () => {
      if (this.client === client) listener.listChanged(this, "prompts");
    });
    client.setNotificationHandler(NOTIFICATION.resourcesListChanged, () => {
      if (this.client === client) listener.listChanged(this, "resources");
    });
    for (const method of INTERACTION_METHODS) {
      client.setRequestHandler(method, (request, ctx) =>
        this.interactions.handle(method, ctx.mcpReq.id, (request.params ?? {}) as Record<string, unknown>, ctx.mcpReq.signal, this.config.timeoutMs) as never,
      );
    }
    client.setNotificationHandler(NOTIFICATION.message, (n) => {
      if (this.client === client) listener.log(this, n.params);
    });
    client.onerror = (error) => {
      this.deps.logger.debug({ backend: this.id, err: error.message }, "backend transport error");
      watch?.observe(error);
    };
  }

  private fail(client: Client, reason: string): void {
    void client.close().catch(() => undefined);
    if (this.stateValue === "closed") return;
    this.deps.logger.warn({ backend: this.id, reason: this.noteFailure(reason), attempt: this.attempt }, "backend unavailable");
    this.scheduleReconnect();
  }

  /** The live client went away: tell the listener once, then reconnect. */
  private drop(client: Client, fullReason: string): void {
    if (this.client !== client || this.stateValue === "closed") return;
    const reason = this.noteFailure(fullReason);
    this.client = undefined;
    void this.listen?.dispose();
    this.listen = undefined;
    this.streamWatch?.dispose();
    this.streamWatch = undefined;
    this.clearTimers();
    void client.close().catch(() => undefined);
    // Only a connection that outlived the longest backoff delay starts the backoff over: one that
    // drops right after connecting (e.g. its notification stream cannot open) keeps backing off.
    if (this.deps.clock.now() - this.connectedAt >= this.config.reconnect.maxDelayMs) this.attempt = 0;
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

  /**
   * Probes the backend every `healthIntervalMs`. No answer within the health timeout degrades it and
   * it is probed again (the next answer restores it); any other failure drops the connection.
   */
  private scheduleHealthCheck(client: Client): void {
    this.healthTimer = this.deps.clock.setTimeout(() => {
      this.healthTimer = undefined;
      if (this.client !== client) return;
      const timeout = this.config.healthTimeoutMs ?? Math.min(HEALTH_TIMEOUT_MS, this.config.timeoutMs);
      // The modern era has no ping; server/discover is its cheap liveness probe.
      const probe = this.counted(() => (client.getProtocolEra() === "modern" ? client.discover({ timeout }) : client.ping({ timeout })));
      probe.then(
        () => this.afterHealthProbe(client),
        (error: unknown) => {
          if (isTimeout(error)) {
            this.degrade(client, `health check got no answer within ${timeout} ms`);
            if (this.client === client) this.scheduleHealthCheck(client);
          } else if (isConnectionFailure(error, client.getProtocolEra()) || client.transport === undefined) {
            this.drop(client, `health check failed: ${describe(error)}`);
          } else {
            // Any answer, an error or a result the SDK would not take included, shows it is alive.
            this.afterHealthProbe(client);
          }
        },
      );
    }, this.config.healthIntervalMs);
    this.healthTimer.unref?.();
  }

  /** The backend answered (anything, an error included): it is not hung. */
  private answered(client: Client): void {
    if (this.client !== client) return;
    this.timeoutsInARow = 0;
    if (!this.degraded) return;
    this.degraded = false;
    this.lastError = undefined;
    this.deps.logger.info({ backend: this.id }, "backend answers again: no longer degraded");
  }

  /** A request got no answer within `timeoutMs`: one may be a slow tool, a few in a row are a hung backend. */
  private timedOut(client: Client): void {
    if (this.client !== client) return;
    this.timeoutsInARow++;
    if (this.timeoutsInARow >= DEGRADED_AFTER_TIMEOUTS) this.degrade(client, `${this.timeoutsInARow} requests in a row got no answer within ${this.config.timeoutMs} ms`);
  }

  private degrade(client: Client, reason: string): void {
    if (this.client !== client || this.stateValue !== "connected") return;
    this.noteFailure(reason);
    if (this.degraded) return;
    this.degraded = true;
    this.deps.logger.warn({ backend: this.id, reason }, "backend degraded: connected but not answering");
  }

  /**
   * The backend answers, but a modern backend is only useful with its listen stream: one down for a
   * whole health interval (and not being reopened right now) drops the connection, since the
   * reconnect reloads lists and re-subscribes; one down for less is retried now instead of after
   * its backoff delay.
   */
  private afterHealthProbe(client: Client): void {
    if (this.client !== client) return;
    this.answered(client);
    const listen = this.listen;
    const down = listen?.downFor(this.deps.clock.now()) ?? 0;
    if (down >= this.config.healthIntervalMs && listen?.opening !== true) {
      this.drop(client, `the subscriptions/listen stream has been down for ${down} ms`);
      return;
    }
    if (down > 0) listen?.retryNow();
    this.scheduleHealthCheck(client);
  }

  private translateError(client: Client, received: unknown): Error {
    // A modern backend's JSON-RPC error under a 4xx status (404: method not found) is its answer.
    const error = (client.getProtocolEra() === "modern" ? jsonRpcErrorOf(received) : undefined) ?? received;
    if (error instanceof ProtocolError) {
      this.answered(client);
      return error;
    }
    if (error instanceof BrokerError) return error;
    if (isAbort(error)) return error as Error;
    if (isTimeout(error)) {
      this.timedOut(client);
      return new BrokerError("BACKEND_TIMEOUT", `Backend '${this.id}' did not answer within ${this.config.timeoutMs} ms.`, {
        backend: this.id,
        timeoutMs: this.config.timeoutMs,
      });
    }
    if (error instanceof SdkError && (error.code === SdkErrorCode.CapabilityNotSupported || error.code === SdkErrorCode.MethodNotSupportedByProtocolVersion)) {
      return new BrokerError("CAPABILITY_MISSING", `Backend '${this.id}' does not support this: ${error.message}`, { backend: this.id });
    }
    // One line of at most 300 characters, as `lastFailure`: an HTTP error's whole body (an HTML
    // page of megabytes) went into the log and the client's message on every call. In full at debug.
    const full = describe(error);
    const reason = summarizeFailure(full);
    if (reason !== full) this.deps.logger.debug({ backend: this.id, err: full }, "backend request failure in full");
    // The client lost its transport under us (`Not connected`): as connection-level as it gets.
    if (isConnectionFailure(error, client.getProtocolEra()) || client.transport === undefined) {
      this.drop(client, `request failed: ${full}`);
      return new BrokerError("BACKEND_UNAVAILABLE", `Backend '${this.id}' failed: ${reason}; retry later.`, { backend: this.id }, { cause: error });
    }
    // One unusable answer (malformed result, `input_required`, an HTTP error on one POST, a body over the size limit): this request fails, the connection stays.
    this.answered(client);
    const code = error instanceof SdkError ? error.code : isTooLarge(error) ? "too-large" : undefined;
    this.deps.logger.warn({ backend: this.id, code, err: reason }, "backend request failed");
    return new BrokerError(
      "BACKEND_INVALID_RESPONSE",
      `Backend '${this.id}' gave an unusable answer: ${reason}`,
      { backend: this.id, ...(code !== undefined && { reason: code }) },
      { cause: error },
    );
  }

  /**
   * Records why the backend is not ready, as `lastFailure` shows it (see `summarizeFailure`; the
   * full text goes to the debug log) and returns that.
   */
  private noteFailure(reason: string): string {
    const summary = summarizeFailure(reason);
    if (summary !== reason) this.deps.logger.debug({ backend: this.id, reason }, "backend failure in full");
    this.lastError = summary;
    return summary;
  }

  private unavailable(): BrokerError {
    return new BrokerError("BACKEND_UNAVAILABLE", `Backend '${this.id}' is not connected${this.lastError ? ` (${this.lastError})` : ""}; retry later.`, {
      backend: this.id,
    });
  }

  private clearTimers(): void {
    for (const timer of [this.retryTimer, this.healthTimer]) {
      if (timer !== undefined) this.deps.clock.clearTimeout(timer);
    }
    this.retryTimer = this.healthTimer = undefined;
  }
}

function isTimeout(error: unknown): boolean {
  return error instanceof SdkError && error.code === SdkErrorCode.RequestTimeout;
}

/** The error of a request its caller aborted: an AbortError (answered -32800, Request cancelled). */
function cancelled(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  if (reason instanceof Error && reason.name === "AbortError") return reason;
  return new DOMException(reason instanceof Error ? reason.message : typeof reason === "string" ? reason : "The request was cancelled", "AbortError");
}

function isAbort(error: unknown): boolean {
  return error instanceof Error && error.name === "AbortError";
}

function describe(error: unknown): string {
  if (error instanceof SdkHttpError) return `${error.message}`;
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    // The SDK often repeats its cause's message in its own (e.g. a version negotiation probe's validation error).
    return cause instanceof Error && !error.message.includes(cause.message) ? `${error.message} (${cause.message})` : error.message;
  }
  return String(error);
}
