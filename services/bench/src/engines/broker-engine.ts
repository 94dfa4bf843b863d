import type { BackendApi } from "../backend/backend-api.js";
import type { BrokerCensus, LoopDelay } from "../broker/broker-child-api.js";
import type { ProcessUsage } from "../core/process-usage.js";
import type { RpcClient } from "../core/rpc.js";

export type EngineName = "memory" | "redis" | "redis-cluster";

/** Where diagnostics go; each is off when its directory is undefined. */
export interface Diagnostics {
  /** --cpu-prof: whole-process and per-step CPU profiles. */
  cpuProfDir: string | undefined;
  /** --heap-snapshot: heap snapshots in the memory scenario. */
  heapSnapshotDir: string | undefined;
  /** Step profiles written so far (appended by the engines), for the report. */
  readonly stepProfiles: string[];
}

/** Brokers under test, running, with the backend that feeds them. */
export interface BrokerDeployment {
  readonly engine: EngineName;
  /** MCP endpoints; load generators spread sessions over them round-robin. */
  readonly urls: string[];
  /** The bench backend whose updates the scenario drives. */
  readonly backend: RpcClient<BackendApi>;
  /** One sample per broker process; with `gc`, after full collections. */
  usage(gc: boolean): Promise<ProcessUsage[]>;
  census(): Promise<BrokerCensus[]>;
  /** Each broker process's event-loop delay since the last reset (see BrokerChildApi.loopDelay). */
  loopDelay(reset: boolean): Promise<LoopDelay[]>;
  /**
   * Runs `run`; under --cpu-prof also records a CPU profile of every broker process for exactly
   * that span, to results/broker-<label>-<name>.cpuprofile (whole-process profiles mix in setup).
   */
  profiled<T>(name: string, run: () => Promise<T>): Promise<T>;
  /** Under --heap-snapshot, writes results/broker-<label>-<name>.heapsnapshot per broker process; otherwise nothing. */
  heapSnapshot(name: string): Promise<void>;
  stop(): Promise<void>;
}

/**
 * How brokers are deployed for a scenario: the memory engine is one broker process (its own stdio
 * backend); the Redis engine is two broker processes sharing a Redis, one HTTP backend both reach,
 * sessions spread over both (see README, "Engines").
 */
export interface BrokerEngine {
  readonly name: EngineName;
  /** How it deploys brokers and their backend, for the report ("2 broker processes …"). */
  readonly description: string;
  /** Why this engine cannot run here (e.g. Redis unreachable), or undefined when it can. */
  readonly unavailableReason: string | undefined;
  /** The Redis Cluster (seed nodes) its brokers use, if any: the baselines beside this engine publish there too. */
  readonly redisCluster?: readonly string[];
  deploy(label: string, options?: { debounceMs?: number }): Promise<BrokerDeployment>;
}
