import type { HistogramData } from "../core/histogram.js";
import type { ProcessUsage } from "../core/process-usage.js";

/** What a load generator connects to: the broker in either era, or the raw SSE server. */
export type TargetKind = "legacy" | "modern" | "raw";

export interface OpenParams {
  kind: TargetKind;
  /** Endpoints; session i goes to urls[i % urls.length]. Broker: its /mcp URL; raw: the server's base URL. */
  urls: string[];
  /** One session per entry, subscribed to that URI (broker) or key (raw); "" for no subscription. */
  uris: string[];
  /** Handshakes in flight at once. */
  concurrency: number;
  /** Also ask for tools/list_changed (modern listen flag; legacy sessions get it anyway). */
  toolsListChanged: boolean;
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

export interface RpcLoadParams {
  method: "resources/subscribe" | "resources/unsubscribe";
  /** URIs per worker; worker w runs its list in order on legacy session w (or on the raw server). */
  perWorker: string[][];
  /** Raw server base URL: POST /rpc there instead of the broker sessions. */
  rawUrl?: string;
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
  usage(params: { gc: boolean }): ProcessUsage | Promise<ProcessUsage>;
  /** Ends every session (legacy: DELETE, then the stream closed). */
  closeAll(params: Record<string, never>): Promise<void>;
  /** Closes every session, then the process exits. */
  stop(params: Record<string, never>): void;
};
