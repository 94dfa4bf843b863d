import {
  Client,
  ProtocolError,
  StreamableHTTPClientTransport,
  type Implementation,
  type ProtocolEra,
  type RequestOptions,
  type ServerCapabilities,
  type SubscriptionFilter,
  type Transport,
} from "@modelcontextprotocol/client";
import { LIST_CHANGED_METHOD, MODERN_PROTOCOL_VERSION, NOTIFICATION, type BackoffPolicy, type Clock, type ListName, type TimerHandle } from "@mcp-broker/shared";
import { BrokerClientError } from "../errors.js";
import type { ListenCursor } from "./listen-cursor.js";
import { LegacySubscriptionChannel } from "../subscriptions/legacy-subscription-channel.js";
import { ListenStream } from "../subscriptions/listen-stream.js";
import type { SubscriptionChannel } from "../subscriptions/subscription-channel.js";

/** Which era to speak: `auto` lets the SDK probe `server/discover` and fall back to `initialize`. */
export type EraOption = "auto" | "legacy" | "modern";
export const ERAS: readonly EraOption[] = ["auto", "legacy", "modern"];

export const LIST_KINDS: readonly ListName[] = ["tools", "prompts", "resources"];

/** Signals a transport may give its connection. */
export interface TransportHooks {
  /** A stream broke (the transport may be retrying on its own): check that the server is still there. */
  interrupted(): void;
}

export interface ConnectionSettings {
  /** Called once per connection. */
  createTransport(hooks: TransportHooks): Transport;
  /** The listen streams' resume cursor, kept across connections (see `ListenCursor`). */
  cursor?: ListenCursor;
  clientInfo: Implementation;
  era: EraOption;
  requestTimeoutMs: number | undefined;
  /** Probe the server once nothing has been heard from it (answer, notification) for this long; 0 disables. */
  heartbeatIntervalMs: number;
  /** Which `list_changed` notifications to act on (and, on a modern connection, to ask for). */
  listChanged: Readonly<Record<ListName, boolean>>;
  /** Delays between attempts to reopen a dropped listen stream. */
  listenRetry: BackoffPolicy;
  clock: Clock;
  random: () => number;
}

/** What a connection reports. Called synchronously, only while the connection is open. */
export interface ConnectionListener {
  resourceUpdated(connection: Connection, uri: string): void;
  listChanged(connection: Connection, kind: ListName): void;
  /**
   * The server stopped honoring these subscribed URIs outside a call about them (see
   * `SubscriptionChannel`); the values say why.
   */
  subscriptionsRefused(connection: Connection, refused: ReadonlyMap<string, unknown>): void;
  /** Notifications may have been lost (a dropped listen stream was reopened). */
  gap(connection: Connection): void;
  /** The server refused the listen stream itself; it is asked again after a backoff (see `ListenStream`). */
  streamRefused(connection: Connection, error: unknown): void;
  /** The connection dropped; at most once, and never after `close()`. */
  lost(connection: Connection, error: BrokerClientError): void;
}

type Phase = "new" | "opening" | "open" | "lost" | "closed";

/** How long a graceful close waits for the server to end a legacy session. */
const END_SESSION_TIMEOUT_MS = 2_000;

/**
 * One connection to the server: one SDK client over one transport, and what lives and dies with
 * it — the subscription channel of its era and the liveness checks.
 *
 * Liveness: a request that fails without a JSON-RPC error, a transport error, a broken stream, a
 * dropped listen stream and the heartbeat each start a probe (`ping`, or `server/discover` on a
 * modern connection); a probe that fails without a JSON-RPC error (refused, timed out, legacy
 * session gone with 404) marks the connection lost. So does the transport closing. The heartbeat
 * probes only after `heartbeatIntervalMs` without hearing from the server: any answer (a JSON-RPC
 * error included) or notification shows it is alive and postpones the probe.
 */
export class Connection {
  readonly client: Client;
  private phase: Phase = "new";
  private transport: Transport | undefined;
  private channelValue: SubscriptionChannel | undefined;
  private listChangedFlags: Readonly<Record<ListName, boolean>> = { tools: false, prompts: false, resources: false };
  private heartbeat: TimerHandle | undefined;
  private probe: Promise<void> | undefined;
  /** When the server was last heard from (clock time). */
  private lastHeard = 0;
  /** Once `open` started: settles when its connect has, and what a close meanwhile left to it is done. */
  private opening: Promise<void> | undefined;
  /** While `open` waits for its connect: ends that wait at once (a close). */
  private closedWhileOpening: (() => void) | undefined;

  constructor(
    private readonly settings: ConnectionSettings,
    private readonly listener: ConnectionListener,
  ) {
    this.client = new Client(settings.clientInfo, {
      capabilities: {},
      versionNegotiation: { mode: settings.era === "modern" ? { pin: MODERN_PROTOCOL_VERSION } : settings.era },
    });
    this.installHandlers();
  }

  get alive(): boolean {
    return this.phase === "open";
  }

  get era(): ProtocolEra {
    return this.client.getProtocolEra() ?? "legacy";
  }

  get capabilities(): ServerCapabilities {
    return this.client.getServerCapabilities() ?? {};
  }

  get supportsSubscriptions(): boolean {
    return this.capabilities.resources?.subscribe === true;
  }

  get requestOptions(): RequestOptions {
    return this.settings.requestTimeoutMs === undefined ? {} : { timeout: this.settings.requestTimeoutMs };
  }

  /** The subscription channel of this connection's era. */
  get channel(): SubscriptionChannel {
    if (this.channelValue === undefined || this.phase !== "open") throw new BrokerClientError("NOT_CONNECTED", "The connection is not open.");
    return this.channelValue;
  }

  /** Connects and negotiates the era; rejects (and leaves nothing open) when that fails. */
  async open(): Promise<void> {
    if (this.phase !== "new") throw new Error("Connection.open() may be called once");
    this.phase = "opening";
    this.transport = this.settings.createTransport({ interrupted: () => this.checkAlive() });
    this.settings.cursor?.attach(this.transport);
    const connecting = this.client.connect(this.transport, this.requestOptions);
    const closed = new Promise<"closed">((resolve) => (this.closedWhileOpening = () => resolve("closed")));
    // Closed while it was opening: once the connect settles, what it made is undone. A legacy
    // session the server made for it is nobody's now, and would stay until it idled out, counted
    // against the principal's session limit (`close` waits for this, bounded).
    this.opening = connecting.then(
      async () => {
        if (this.phase === "opening") return;
        await this.endSession();
        await this.release();
      },
      async () => {
        if (this.phase !== "opening") await this.release();
      },
    );
    let outcome: "closed" | undefined;
    try {
      outcome = await Promise.race([connecting.then(() => undefined), closed]);
    } catch (error) {
      await this.release();
      throw error;
    } finally {
      this.closedWhileOpening = undefined;
    }
    if (outcome === "closed" || this.phase !== "opening") throw new BrokerClientError("NOT_CONNECTED", "The connection was closed while it was opening.");
    this.client.onclose = () => this.markLost("the transport closed");
    this.phase = "open";
    const capabilities = this.capabilities;
    const wanted = this.settings.listChanged;
    this.listChangedFlags = {
      tools: wanted.tools && capabilities.tools?.listChanged === true,
      prompts: wanted.prompts && capabilities.prompts?.listChanged === true,
      resources: wanted.resources && capabilities.resources?.listChanged === true,
    };
    this.channelValue = this.era === "modern" ? this.createListenStream() : new LegacySubscriptionChannel(this);
    this.heard();
    this.scheduleHeartbeat(this.settings.heartbeatIntervalMs);
  }

  /**
   * Sends one request on this connection. A failure that is not a JSON-RPC error (the server did
   * not answer) starts a liveness probe; the error is rethrown either way.
   */
  async request<T>(send: (client: Client, options: RequestOptions) => Promise<T>): Promise<T> {
    if (this.phase !== "open") throw new BrokerClientError("NOT_CONNECTED", "The connection is not open.");
    try {
      const result = await send(this.client, this.requestOptions);
      this.heard();
      return result;
    } catch (error) {
      if (error instanceof ProtocolError) this.heard();
      else this.checkAlive();
      throw error;
    }
  }

  /** Probes the server unless a probe is already under way; a failed probe marks the connection lost. */
  checkAlive(): void {
    if (this.phase !== "open" || this.probe !== undefined) return;
    const sent = this.era === "modern" ? this.client.discover(this.requestOptions) : this.client.ping(this.requestOptions);
    this.probe = sent
      .then(
        () => this.heard(),
        (error: unknown) => {
          // A JSON-RPC error is an answer: the server is there.
          if (error instanceof ProtocolError) this.heard();
          else this.markLost(`the server did not answer a probe (${describe(error)})`, error);
        },
      )
      .finally(() => {
        this.probe = undefined;
      });
  }

  /**
   * Closes the connection; idempotent. With `endSession`, a legacy Streamable HTTP session is
   * ended on the server first (DELETE), so that it releases the subscriptions at once.
   */
  async close(options: { endSession?: boolean } = {}): Promise<void> {
    const wasOpen = this.phase === "open";
    if (this.phase === "closed") return;
    this.phase = "closed";
    if (wasOpen && options.endSession === true) await this.endSession();
    const waiting = this.closedWhileOpening;
    if (waiting !== undefined) {
      // Still opening: `open` rejects at once. Its initialize may have made a legacy session
      // already, whose id only the answer tells: the connect is given a moment to finish (bounded
      // as a DELETE is), and the session is then ended; cut short, it is left to idle out.
      waiting();
      if (options.endSession === true && this.settings.era !== "modern" && this.opening !== undefined) await this.within(END_SESSION_TIMEOUT_MS, this.opening);
    }
    await this.release();
  }

  /** `promise`, or after `ms` whatever it is by then. */
  private async within(ms: number, promise: Promise<unknown>): Promise<void> {
    const { clock } = this.settings;
    let timer: TimerHandle | undefined;
    const timeout = new Promise<void>((resolve) => {
      timer = clock.setTimeout(resolve, ms);
    });
    await Promise.race([promise.catch(() => undefined), timeout]);
    if (timer !== undefined) clock.clearTimeout(timer);
  }

  private installHandlers(): void {
    const { client, listener } = this;
    client.setNotificationHandler(NOTIFICATION.resourceUpdated, (notification) => {
      if (this.phase !== "open") return;
      this.heard();
      listener.resourceUpdated(this, notification.params.uri);
    });
    for (const kind of LIST_KINDS) {
      client.setNotificationHandler(LIST_CHANGED_METHOD[kind], () => {
        if (this.phase !== "open") return;
        this.heard();
        if (this.listChangedFlags[kind]) listener.listChanged(this, kind);
      });
    }
    client.onerror = () => this.checkAlive();
  }

  private createListenStream(): ListenStream {
    const flags: SubscriptionFilter = {
      ...(this.listChangedFlags.tools && { toolsListChanged: true }),
      ...(this.listChangedFlags.prompts && { promptsListChanged: true }),
      ...(this.listChangedFlags.resources && { resourcesListChanged: true }),
    };
    const { clock, random, listenRetry } = this.settings;
    return new ListenStream(this, flags, {
      clock,
      random,
      retry: listenRetry,
      dropped: () => this.checkAlive(),
      refused: (refused) => {
        if (this.phase === "open") this.listener.subscriptionsRefused(this, refused);
      },
      reopened: () => {
        if (this.phase === "open") this.listener.gap(this);
      },
      streamRefused: (error) => {
        if (this.phase === "open" || this.phase === "opening") this.listener.streamRefused(this, error);
      },
      resumedExactly: () => this.settings.cursor?.takeExactResume() ?? false,
      refusals: () => this.settings.cursor?.takeRefusals() ?? new Map(),
      resume: (on) => this.settings.cursor?.resume(on),
    });
  }

  private heard(): void {
    this.lastHeard = this.settings.clock.now();
  }

  /**
   * Wakes up `delay` ms from now: probes if the server has been quiet for a whole interval,
   * otherwise sleeps until it would have been.
   */
  private scheduleHeartbeat(delay: number): void {
    const interval = this.settings.heartbeatIntervalMs;
    if (interval <= 0) return;
    const { clock } = this.settings;
    this.heartbeat = clock.setTimeout(() => {
      this.heartbeat = undefined;
      if (this.phase !== "open") return;
      const quiet = clock.now() - this.lastHeard;
      if (quiet < interval) {
        this.scheduleHeartbeat(interval - quiet);
        return;
      }
      this.checkAlive();
      this.scheduleHeartbeat(interval);
    }, delay);
    // The heartbeat alone must not keep a Node process alive.
    this.heartbeat.unref?.();
  }

  private markLost(reason: string, cause?: unknown): void {
    if (this.phase !== "open") return;
    this.phase = "lost";
    void this.release();
    this.listener.lost(this, new BrokerClientError("CONNECTION_LOST", `The connection to the server was lost: ${reason}.`, { reason }, { cause }));
  }

  private async endSession(): Promise<void> {
    const transport = this.transport;
    if (!(transport instanceof StreamableHTTPClientTransport) || transport.sessionId === undefined) return;
    await this.within(END_SESSION_TIMEOUT_MS, transport.terminateSession());
  }

  private async release(): Promise<void> {
    if (this.heartbeat !== undefined) this.settings.clock.clearTimeout(this.heartbeat);
    this.heartbeat = undefined;
    await this.channelValue?.close().catch(() => undefined);
    // During version negotiation the SDK client does not own the transport yet: then close it
    // here, or a connect() waiting for the probe's answer would wait for its timeout.
    const owned = this.client.transport !== undefined;
    await this.client.close().catch(() => undefined);
    if (!owned) await this.transport?.close().catch(() => undefined);
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
