import type { EmitPlan } from "../core/bench-uris.js";
import type { PacedResult } from "../core/paced-loop.js";
import type { ProcessUsage } from "../core/process-usage.js";

/** Requests the bench backend received, by kind (since the last reset). */
export interface BackendCounters {
  subscribe: number;
  unsubscribe: number;
  /** `tools/list` calls without a cursor: one per list reload. */
  toolsListReloads: number;
}

export interface ListStormOutcome {
  emitted: number;
  firstMicros: number;
  lastMicros: number;
  /** The tool-list version after the storm (what every client must end up holding). */
  finalVersion: number;
}

/** The bench backend's control API (JSON lines over TCP; its stdio carries MCP). */
export type BackendApi = {
  /** Emits `resources/updated` for the plan's sub-resources at the plan's rate; resolves when all are sent. */
  emit(plan: EmitPlan): Promise<PacedResult>;
  /** `count` tool-list changes, each followed by `tools/list_changed`, spread over `durationMs`. */
  listStorm(params: { count: number; durationMs: number }): Promise<ListStormOutcome>;
  counters(params: Record<string, never>): BackendCounters;
  resetCounters(params: Record<string, never>): void;
  usage(params: { gc: boolean }): ProcessUsage;
};
