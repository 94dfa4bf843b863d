import type { HistogramData } from "../core/histogram.js";
import type { ProcessUsage } from "../core/process-usage.js";

/** What a load generator connects to: the broker in either era, or the raw SSE server. */
/** raw: a stream of one key on the baseline server; raw-listen: a `subscriptions/listen` request to the baseline server. */
export type TargetKind = "legacy" | "modern" | "raw" | "raw-listen";

export interface OpenParams {
  kind: TargetKind;
  /** Endpoints; session i goes to urls[i % urls.length]. Broker: its /mcp URL; raw: the server's base URL. */
  urls: string[];
  /** One session per entry, subscribed to that URI (broker) or key (raw), or to several separated by spaces; "" for no subscription. */
  uris: string[];
  /** Keep each session's last event id (for `storm` re-attaches). */
  trackEventIds?: boolean;
  /** Session i's stream connects from localAddresses[i % n] (loopback aliases: each gives ~28k source ports per server port). */
  localAddresses?: string[];
  /** Handshakes in flight at once. */
  concurrency: number;
  /** Also ask for tools/list_changed (modern listen flag; legacy sessions get it anyway). */
  toolsListChanged: boolean;
  /**
   * Legacy only: open no GET stream (initialize, initialized, subscribe): a session whose client is
   * away between turns, its updates kept for its resumption. Costs the generator no socket each.
   */
  withoutStreams?: boolean;
  /** Over HTTP/2 without TLS: many sessions' requests and streams share each connection (see H2Pool). */
  http2?: boolean;
}

export interface OpenResult {
  opened: number;
  failed: number;
  errors: string[];
  ms: number;
}

/** Updates received since the last `reset`. */
export interface GeneratorSnapshot {
  received: number;
  /** Updates of another step (late arrivals of a previous one). */
  strays: number;
  /** End-to-end latency, µs. */
  histogram: HistogramData;
  firstMicros: number;
  lastMicros: number;
  /** Per update seq (when tracked): [seq, receivers, max latency µs]. */
  perSeq: [number, number, number][];
  usage: ProcessUsage;
}

/** The list watch of a set of sessions. */
export interface ListWatchCounts {
  sessions: number;
  /** list_changed notifications per session, as [count, sessions with that count]. */
  notificationCounts: [number, number][];
  /** Sessions whose last tools/list holds the target version. */
  holding: number;
  /** When the last of them first held it, µs (0 if none). */
  lastHeldMicros: number;
}

export interface ListWatchReport extends ListWatchCounts {
  listCalls: number;
  listErrors: number;
  /** The same per endpoint the sessions are on ([url, counts], in the order of the `urls` they were opened with). */
  byUrl: [string, ListWatchCounts][];
}

/**
 * A reconnect storm over every legacy session of the generator: all streams are cut at once, then
 * every client reconnects at once. `reattach`: GET with Last-Event-ID (the session lives on, or is
 * adopted by the instance it reaches); `reinit`: initialize and subscribe again (its broker lost it).
 * Session i reconnects to `urls[i % urls.length]`, or with `moveOn` to the endpoint after its own in `urls`.
 */
export interface StormParams {
  mode: "reattach" | "reinit";
  urls: string[];
  moveOn: boolean;
}

export interface StormResult {
  sessions: number;
  failed: number;
  errors: string[];
  /** Per reconnected session: from the cut until it was receiving again (stream open; with reinit, every subscribe answered too), µs. */
  readyMicros: number[];
  /** Reconnects that failed and were tried again (after 0.25–1 s, at most 5 tries per client). */
  retries: number;
}

/** For sessions opened with trackEventIds: which (session, resource, update) of a step's emission reached the session. */
export interface CoverageParams {
  step: number;
  /** Update seq i went to resource key i % keys (an emission over keys 0…keys-1 from the start of its cycle). */
  keys: number;
  /** When each update was emitted, µs (the backend's emitLog). */
  emitMicros: number[];
}

export interface CoverageResult {
  /** (session, update) pairs: each update of a resource the session held. */
  expected: number;
  /** Reached it as itself. */
  exact: number;
  /** Not as itself, but a notification for its resource came after it was emitted (the client re-reads: nothing missed). */
  renotified: number;
  /** Neither: missed. */
  lost: number;
  /** (session, resource) pairs told about the resource itself during the step (at most one spurious each is the resumption's promise). */
  renotifiedPairs: number;
}

export interface RpcLoadParams {
  /**
   * `subscriptions/listen`: each entry is one listen (its URIs separated by spaces), opened on
   * `urls[w % urls.length]`, timed until its acknowledgement, then closed; on the raw server, one
   * SSE stream opened (timed until its headers) and closed.
   */
  method: "resources/subscribe" | "resources/unsubscribe" | "subscriptions/listen";
  /** URIs per worker; worker w runs its list in order on legacy session w (or on the raw server). */
  perWorker: string[][];
  /** Raw server base URL: POST /rpc (or GET /sse) there instead of the broker sessions. */
  rawUrl?: string;
  /** The raw server's route for these requests instead of /rpc (e.g. /relay/stdio), or of /listen for listens (e.g. /store/listen). */
  rawPath?: string;
  /** Broker endpoints for `subscriptions/listen`. */
  urls?: string[];
}

export interface RpcLoadResult {
  ops: number;
  errors: number;
  firstError: string | undefined;
  ms: number;
  histogram: HistogramData;
}

/** The API a load generator serves over IPC. */
export type GeneratorApi = {
  open(params: OpenParams): Promise<OpenResult>;
  /** Starts a measurement step: counters cleared, updates of other steps counted as strays. */
  reset(params: { step: number; trackSeq: boolean }): void;
  progress(params: Record<string, never>): { received: number };
  snapshot(params: Record<string, never>): GeneratorSnapshot;
  /** Counts list_changed per session from now on; each one makes the session re-list tools. */
  watchLists(params: Record<string, never>): void;
  /** Reports which sessions hold `marker` in their latest tools/list. */
  listReport(params: { marker: string }): ListWatchReport;
  rpcLoad(params: RpcLoadParams): Promise<RpcLoadResult>;
  storm(params: StormParams): Promise<StormResult>;
  /** Clears what tracked sessions heard; from now on updates of `step` count (see `coverage`). */
  trackStep(params: { step: number }): void;
  coverage(params: CoverageParams): CoverageResult;
  usage(params: { gc: boolean }): ProcessUsage | Promise<ProcessUsage>;
  /** Ends every session (legacy: DELETE, then the stream closed). */
  closeAll(params: Record<string, never>): Promise<void>;
  /** Closes every session, then the process exits. */
  stop(params: Record<string, never>): void;
};
