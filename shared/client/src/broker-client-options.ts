import type { FetchLike, Implementation, Transport } from "@modelcontextprotocol/client";
import { MAX_TIMER_MS, systemClock, type BackoffPolicy, type Clock, type ListName } from "@mcp-broker/shared";
import type { ReconnectPolicy } from "./connection/connection-supervisor.js";
import { ERAS, type ConnectionSettings, type EraOption } from "./connection/connection.js";
import { createHttpTransport } from "./connection/http-transport.js";
import { ListenCursor } from "./connection/listen-cursor.js";
import { BrokerClientError } from "./errors.js";
import { mergeMetadata, type RequestMetadata } from "./request-metadata.js";

export interface ReconnectOptions extends Partial<ReconnectPolicy> {
  /**
   * Probe the server (ping, or server/discover) once nothing has been heard from it (no answer,
   * no notification) for this long, to notice a silent drop; 0 disables.
   */
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
  /**
   * Metadata sent as the `_meta` of every list, read, prompt and tool request (InspectorClient's
   * `defaultMetadata`); a call's own metadata is merged over it, key by key.
   */
  defaultMetadata?: Record<string, string>;
  /** Time source for debounce, backoff, retries and heartbeat (tests pass a fake one). */
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
/** Retrying subscriptions the server refused on a resubscribe (besides after each resource-list reload). */
const PENDING_RETRY: BackoffPolicy = { initialDelayMs: 1_000, maxDelayMs: 30_000, multiplier: 2 };

export interface ResolvedOptions {
  connection: ConnectionSettings;
  reconnect: ReconnectPolicy | undefined;
  resubscribeOnReconnect: boolean;
  listChangedDebounceMs: number;
  /** `defaultMetadata`, or undefined when it has no key. */
  defaultMetadata: RequestMetadata | undefined;
  pendingRetry: BackoffPolicy;
  clock: Clock;
  random: () => number;
}

/**
 * Validates the options and fills in the defaults. Throws INVALID_OPTIONS naming the first option
 * that is missing, out of range or inconsistent (`data.option`).
 */
export function resolveOptions(options: BrokerClientOptions): ResolvedOptions {
  validate(options);
  const clock = options.clock ?? systemClock;
  const random = options.random ?? Math.random;
  const reconnect = options.reconnect === false ? undefined : { ...DEFAULT_RECONNECT, ...definedOnly(options.reconnect ?? {}) };
  const wanted = options.listChangedNotifications ?? {};
  const listChanged: Record<ListName, boolean> = {
    tools: wanted.tools ?? true,
    prompts: wanted.prompts ?? true,
    resources: wanted.resources ?? true,
  };
  return {
    connection: {
      createTransport: transportFactory(options, clock),
      // One cursor for every connection this client makes: a reopened listen resumes from the last event seen.
      cursor: new ListenCursor(),
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
    defaultMetadata: mergeMetadata(options.defaultMetadata),
    pendingRetry: PENDING_RETRY,
    clock,
    random,
  };
}

function transportFactory(options: BrokerClientOptions, clock: Clock): ConnectionSettings["createTransport"] {
  const { transport } = options;
  if (transport !== undefined) return () => transport();
  const url = new URL(options.url ?? "");
  return (hooks) => createHttpTransport({ url, headers: options.headers, fetch: options.fetch, clock }, hooks);
}

function validate(options: BrokerClientOptions): void {
  if (typeof options !== "object" || options === null) invalid("options", "must be an object", options);
  const { url, transport } = options;
  if ((url === undefined) === (transport === undefined)) {
    throw new BrokerClientError("INVALID_OPTIONS", "Give exactly one of `url` and `transport`.", { option: "url" });
  }
  if (transport !== undefined && typeof transport !== "function") invalid("transport", "must be a function that returns a new transport", transport);
  if (url !== undefined) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(url);
    } catch {
      invalid("url", "must be an absolute URL", url);
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") invalid("url", "must be an http: or https: URL", url);
  }
  if (options.headers !== undefined && !isStringRecord(options.headers)) invalid("headers", "must map header names to strings", options.headers);
  if (options.headers !== undefined && !validHeaders(options.headers)) invalid("headers", "must be HTTP header names and values (no spaces in a name, no line breaks or control characters in a value)", options.headers);
  if (options.defaultMetadata !== undefined && !isStringRecord(options.defaultMetadata)) invalid("defaultMetadata", "must map keys to strings", options.defaultMetadata);
  if (transport !== undefined && (options.headers !== undefined || options.fetch !== undefined)) {
    throw new BrokerClientError("INVALID_OPTIONS", "`headers` and `fetch` apply to `url` only; a `transport` factory configures its own.", { option: options.headers === undefined ? "fetch" : "headers" });
  }
  optionalFunction("fetch", options.fetch);
  optionalFunction("random", options.random);
  if (options.clientInfo !== undefined && (typeof options.clientInfo?.name !== "string" || typeof options.clientInfo.version !== "string")) {
    invalid("clientInfo", "must have a string name and version", options.clientInfo);
  }
  if (options.era !== undefined && !ERAS.includes(options.era)) invalid("era", `must be one of ${ERAS.join(", ")}`, options.era);
  for (const [kind, enabled] of Object.entries(options.listChangedNotifications ?? {})) {
    if (enabled !== undefined && typeof enabled !== "boolean") invalid(`listChangedNotifications.${kind}`, "must be a boolean", enabled);
  }
  if (options.resubscribeOnReconnect !== undefined && typeof options.resubscribeOnReconnect !== "boolean") {
    invalid("resubscribeOnReconnect", "must be a boolean", options.resubscribeOnReconnect);
  }
  nonNegative("listChangedDebounceMs", options.listChangedDebounceMs);
  if (options.requestTimeoutMs !== undefined && !(isFiniteNumber(options.requestTimeoutMs) && options.requestTimeoutMs > 0 && options.requestTimeoutMs <= MAX_TIMER_MS)) {
    invalid("requestTimeoutMs", `must be a number > 0 and ≤ ${MAX_TIMER_MS}`, options.requestTimeoutMs);
  }
  const { clock } = options;
  if (clock !== undefined && !(typeof clock === "object" && clock !== null && ["now", "setTimeout", "clearTimeout"].every((name) => typeof (clock as unknown as Record<string, unknown>)[name] === "function"))) {
    invalid("clock", "must have now(), setTimeout() and clearTimeout()", clock);
  }
  if (options.reconnect !== undefined && options.reconnect !== false) validateReconnect(options.reconnect);
}

function validateReconnect(reconnect: ReconnectOptions): void {
  if (typeof reconnect !== "object" || reconnect === null) invalid("reconnect", "must be an object or false", reconnect);
  const merged = { ...DEFAULT_RECONNECT, ...definedOnly(reconnect) };
  nonNegative("reconnect.initialDelayMs", reconnect.initialDelayMs);
  nonNegative("reconnect.maxDelayMs", reconnect.maxDelayMs);
  nonNegative("reconnect.heartbeatIntervalMs", reconnect.heartbeatIntervalMs);
  if (reconnect.multiplier !== undefined && !(isFiniteNumber(reconnect.multiplier) && reconnect.multiplier >= 1)) {
    invalid("reconnect.multiplier", "must be a finite number ≥ 1", reconnect.multiplier);
  }
  const { maxAttempts } = reconnect;
  if (maxAttempts !== undefined && !(maxAttempts === Number.POSITIVE_INFINITY || (Number.isInteger(maxAttempts) && maxAttempts >= 1))) {
    invalid("reconnect.maxAttempts", "must be an integer ≥ 1, or Infinity", maxAttempts);
  }
  if (merged.maxDelayMs < merged.initialDelayMs) {
    throw new BrokerClientError(
      "INVALID_OPTIONS",
      `reconnect.maxDelayMs (${merged.maxDelayMs}) must not be below reconnect.initialDelayMs (${merged.initialDelayMs}).`,
      { option: "reconnect.maxDelayMs" },
    );
  }
}

function isStringRecord(value: unknown): boolean {
  return typeof value === "object" && value !== null && Object.values(value).every((v) => typeof v === "string");
}

function isFiniteNumber(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value);
}

/** A duration: Node fires a timer of more than MAX_TIMER_MS (about 24.8 days) after 1 ms. */
function nonNegative(option: string, value: unknown): void {
  if (value !== undefined && !(isFiniteNumber(value) && value >= 0 && value <= MAX_TIMER_MS)) invalid(option, `must be a number ≥ 0 and ≤ ${MAX_TIMER_MS}`, value);
}

function optionalFunction(option: string, value: unknown): void {
  if (value !== undefined && typeof value !== "function") invalid(option, "must be a function", value);
}

function invalid(option: string, requirement: string, value: unknown): never {
  throw new BrokerClientError("INVALID_OPTIONS", `${option} ${requirement} (got ${show(value)}).`, { option });
}

function show(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "function") return "a function";
  if (typeof value === "object" && value !== null) return value instanceof URL ? value.href : "an object";
  return String(value);
}

/** `{ a: undefined }` must not override a default when spread. */
function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** Whether `headers` can go on a request as they are (fetch refuses them otherwise, at connect time). */
export function validHeaders(headers: Record<string, string>): boolean {
  try {
    new Headers(headers);
    return true;
  } catch {
    return false;
  }
}
