import type { BrokerConfigInput } from "@mcp-broker/shared";
import type { ProcessUsage } from "../core/process-usage.js";

/** What a broker child holds, for sanity checks (sessions really open, subscriptions really there). */
export interface BrokerCensus {
  legacySessions: number;
  listens: number;
  /** Upstream subscriptions held on the bench backend. */
  watched: number;
  /** Whether this broker holds the bench backend's watcher lease (Redis engine: one member of the cluster does). */
  watching: boolean;
}

/** The API a broker child serves over IPC. */
export type BrokerChildApi = {
  /** Builds the broker from `config`, listens, and resolves with its MCP URL once every backend is ready. */
  start(params: { config: BrokerConfigInput }): Promise<{ url: string }>;
  usage(params: { gc: boolean }): ProcessUsage | Promise<ProcessUsage>;
  census(params: Record<string, never>): BrokerCensus;
  /** The event loop's delay since the last reset (or start), ms; with `reset`, measuring starts again. */
  loopDelay(params: { reset: boolean }): LoopDelay;
  /** Starts an in-process CPU profile (V8 inspector), for one measured step. */
  profileStart(params: { intervalMicros: number }): Promise<void>;
  /** Stops the step profile and writes it as a .cpuprofile to `file`. */
  profileStop(params: { file: string }): Promise<void>;
  /** Writes a V8 heap snapshot to `file` (see tools/summarize-heapsnapshot). */
  heapSnapshot(params: { file: string }): void;
  /** Closes the broker, then the process exits (writing its CPU profile when profiled). */
  stop(params: Record<string, never>): Promise<void>;
};

export interface LoopDelay {
  maxMs: number;
  p99Ms: number;
}
