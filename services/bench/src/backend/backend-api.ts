import type { EmitPlan } from "../core/bench-uris.js";
import type { PacedResult } from "../core/paced-loop.js";
import type { ProcessUsage } from "../core/process-usage.js";

/** Requests the bench backend received, by kind (since the last reset). */
export interface BackendCounters {
  subscribe: number;
  unsubscribe: number;
  /** `tools/list` calls without a cursor: one per list reload. */
  toolsListReloads: number;
  /** When each of them arrived (µs, the first 100). */
  toolsListReloadMicros: number[];
}

/** The backend's MCP connections (one per broker: its stdio, or its HTTP session) and what each subscribed. */
export interface BackendCensus {
  /** Subscribed resource URIs per connection, in the order the connections were opened. */
  subscriptions: number[];
  /** `tools/list` calls without a cursor per connection (since the last reset), in the same order. */
  toolsListReloads: number[];
}

export interface ListStormOutcome {
  emitted: number;
  /** When the first and the last `tools/list_changed` were sent. */
  firstMicros: number;
  lastMicros: number;
  /** When the tool list last really changed (with `change: "last"`, just before the last notification). */
  changedMicros: number;
  /** The tool-list version after the storm (what every client must end up holding). */
  finalVersion: number;
}

/**
 * Which notifications of a list storm follow a real change of the tool list: `each` of them, or
 * only the `last` (the ones before it announce a change that did not happen, as a flapping backend does).
 */
export type ListStormChange = "each" | "last";

/** The bench backend's control API (JSON lines over TCP; MCP is on its stdio or its HTTP port). */
export type BackendApi = {
  /** Emits `resources/updated` for the plan's sub-resources at the plan's rate; resolves when all are sent. */
  emit(plan: EmitPlan): Promise<PacedResult>;
  /**
   * Of the last emission with `record`: when updates from..from+count-1 were emitted (µs; 0: not
   * yet), and to how many of the backend's connections each went (0: nobody had subscribed its
   * resource, so it reached no broker; at most 255).
   */
  emitLog(params: { from: number; count: number }): { micros: number[]; targets: number[] };
  /** `count` `tools/list_changed` spread over `durationMs`, each after a tool-list change (`change: "each"`, the default) or only the last (`"last"`). */
  listStorm(params: { count: number; durationMs: number; change?: ListStormChange }): Promise<ListStormOutcome>;
  /** `tools/list` requests arriving from now on are answered `ms` later (0: at once again); requests already held keep their delay. */
  listDelay(params: { ms: number }): void;
  counters(params: Record<string, never>): BackendCounters;
  census(params: Record<string, never>): BackendCensus;
  resetCounters(params: Record<string, never>): void;
  usage(params: { gc: boolean }): ProcessUsage | Promise<ProcessUsage>;
};

/** How the bench backend serves MCP: to its one broker over stdio, or to any number of brokers over Streamable HTTP. */
export type BackendTransport = "stdio" | "http";

/** Environment variables of the bench backend process. */
export const BACKEND_ENV = {
  /** The orchestrator's control port (BackendControlServer), in both modes. */
  controlPort: "BENCH_CONTROL_PORT",
  /** `http` for the HTTP mode; stdio otherwise. */
  transport: "BENCH_BACKEND_TRANSPORT",
  /**
   * HTTP mode: a session without a notification stream for this long (ms) is ended, as the broker
   * that opened it is gone (SIGKILLed brokers never DELETE theirs); unset or 0: sessions live until
   * deleted.
   */
  sessionIdleMs: "BENCH_BACKEND_SESSION_IDLE_MS",
} as const;

/**
 * What an HTTP-mode bench backend serves over IPC to the orchestrator that forked it (the scenario
 * API stays on the control socket, as in stdio mode).
 */
export type HttpBackendProcessApi = {
  /** Listens on 127.0.0.1 (a free port) and resolves with the MCP endpoint, `http://127.0.0.1:<port>/mcp`. */
  listen(params: Record<string, never>): Promise<{ url: string }>;
  /** Ends every session and closes the server, then the process exits. */
  stop(params: Record<string, never>): Promise<void>;
};
