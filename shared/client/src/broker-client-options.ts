import { StreamableHTTPClientTransport, type FetchLike, type Implementation, type Transport } from "@modelcontextprotocol/client";
import { systemClock, type Clock, type ListName } from "@mcp-broker/shared";
import type { BackoffPolicy } from "@mcp-broker/shared";
import type { ReconnectPolicy } from "./connection/connection-supervisor.js";
import type { ConnectionSettings, EraOption, TransportHooks } from "./connection/connection.js";
import { BrokerClientError } from "./errors.js";

export interface ReconnectOptions extends Partial<ReconnectPolicy> {
  /** Probe the server this often (ping, or server/discover) to notice a silent drop; 0 disables. */
  heartbeatIntervalMs?: number;
}

export interface BrokerClientOptions {
  /** The MCP endpoint to reach over Streamable HTTP, e.g. `http://127.0.0.1:3000/mcp`. */
  url?: string | URL;
  /** Extra HTTP headers for every request to `url` (e.g. `Authorization`). */
  headers?: Record<string, string>;
  /** A fetch implementation for `url` (default: the global fetch). */
  fetch?: FetchLike;
  /**
   * Instead of `url`: makes a new SDK transport (stdio, in-memory, custom) for each connection
   * attempt. A transport cannot be restarted, hence a factory.
   */
  transport?: () => Transport;
  /** How the client introduces itself. Default `{ name: "mcp-broker-client", version: "0.1.0" }`. */
  clientInfo?: Implementation;
  /** Protocol era: `auto` (default) negotiates; `legacy` (2025-11-25) and `modern` (2026-07-28) pin it. */
  era?: EraOption;
  /** Which `list_changed` notifications reload a list. Each defaults to true. */
  listChangedNotifications?: { tools?: boolean; resources?: boolean; prompts?: boolean };
  /** Delay from the first `list_changed` of a burst to the reload (later ones join it). Default 100 ms. */
  listChangedDebounceMs?: number;
  /** Reconnect when the connection drops (default on), or `false` to stay disconnected. */
  reconnect?: ReconnectOptions | false;
  /** Re-establish the subscriptions after a reconnect. Default true. */
  resubscribeOnReconnect?: boolean;
  /** Timeout of each request, in ms. Default: the SDK's (60 s). */
  requestTimeoutMs?: number;
  /** Time source for debounce, backoff and heartbeat (tests pass a fake one). */
  clock?: Clock;
  /** Random source in [0, 1) for backoff jitter. */
  random?: () => number;
}

export const DEFAULT_CLIENT_INFO: Implementation = { name: "mcp-broker-client", version: "0.1.0" };
export const DEFAULT_LIST_CHANGED_DEBOUNCE_MS = 100;
export const DEFAULT_RECONNECT: Required<ReconnectOptions> = {
  initialDelayMs: 500,
  maxDelayMs: 30_000,
  multiplier: 2,
  maxAttempts: Number.POSITIVE_INFINITY,
  heartbeatIntervalMs: 30_000,
};
/** Reopening a dropped listen stream: quick first retry, then the same growth, capped lower. */
const LISTEN_RETRY: BackoffPolicy = { initialDelayMs: 250, maxDelayMs: 10_000, multiplier: 2 };

export interface ResolvedOptions {
  connection: ConnectionSettings;
  reconnect: ReconnectPolicy | undefined;
  resubscribeOnReconnect: boolean;
  listChangedDebounceMs: number;
  clock: Clock;
  random: () => number;
}

/** Validates the options and fills in the defaults. */
export function resolveOptions(options: BrokerClientOptions): ResolvedOptions {
  const clock = options.clock ?? systemClock;
  const random = options.random ?? Math.random;
  const reconnect = options.reconnect === false ? undefined : { ...DEFAULT_RECONNECT, ...options.reconnect };
  const wanted = options.listChangedNotifications ?? {};
  const listChanged: Record<ListName, boolean> = {
    tools: wanted.tools ?? true,
    prompts: wanted.prompts ?? true,
    resources: wanted.resources ?? true,
  };
  return {
    connection: {
      createTransport: transportFactory(options, clock),
      clientInfo: options.clientInfo ?? DEFAULT_CLIENT_INFO,
      era: options.era ?? "auto",
      requestTimeoutMs: options.requestTimeoutMs,
      heartbeatIntervalMs: reconnect?.heartbeatIntervalMs ?? DEFAULT_RECONNECT.heartbeatIntervalMs,
      listChanged,
      listenRetry: LISTEN_RETRY,
      clock,
      random,
    },
    reconnect,
    resubscribeOnReconnect: options.resubscribeOnReconnect ?? true,
    listChangedDebounceMs: options.listChangedDebounceMs ?? DEFAULT_LIST_CHANGED_DEBOUNCE_MS,
    clock,
    random,
  };
}

function transportFactory(options: BrokerClientOptions, clock: Clock): ConnectionSettings["createTransport"] {
  const { url, transport } = options;
  if (transport !== undefined && url === undefined) return () => transport();
  if (url !== undefined && transport === undefined) {
    const endpoint = new URL(url);
    return (hooks) => httpTransport(endpoint, options, clock, hooks);
  }
  throw new BrokerClientError("INVALID_OPTIONS", "Give exactly one of `url` and `transport`.");
}

/**
 * Streamable HTTP to `url`. The SDK transport resumes a broken SSE stream on its own (with
 * Last-Event-ID: on a broker fleet another instance may take over); each resumption it schedules
 * is also the cue to check that the server is still there.
 */
function httpTransport(url: URL, options: BrokerClientOptions, clock: Clock, hooks: TransportHooks): Transport {
  return new StreamableHTTPClientTransport(url, {
    ...(options.headers !== undefined && { requestInit: { headers: options.headers } }),
    ...(options.fetch !== undefined && { fetch: options.fetch }),
    reconnectionScheduler: (reconnect, delay) => {
      hooks.interrupted();
      const timer = clock.setTimeout(reconnect, delay);
      return () => clock.clearTimeout(timer);
    },
  });
}
