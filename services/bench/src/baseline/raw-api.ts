import type { EmitPlan } from "../core/bench-uris.js";
import type { PacedResult } from "../core/paced-loop.js";
import type { ProcessUsage } from "../core/process-usage.js";
import type { RelayTransport } from "./raw-relay.js";

/** The plain Node SSE server of the baselines, over IPC. */
export type RawServerApi = {
  /**
   * Listens on 127.0.0.1; with `redisUrl`, streams are fed from Redis channels `bench:r:<key>`
   * (with `cluster`, sharded channels of that Redis Cluster instead, spread over its masters by key);
   * with `relays`, POST /relay/<transport> goes through a bench backend of its own over that transport (see raw-relay.ts);
   * with `store` (a Redis URL), the same routes under /store/ keep the requests' subscriptions in that Redis first.
   */
  /** `http2`: also serve HTTP/2 without TLS on the port (scenario 10's largest counts); off, the plain server takes each connection as it comes. */
  start(params: { redisUrl: string | undefined; cluster?: readonly string[]; relays?: readonly RelayTransport[]; store?: string; http2?: boolean }): Promise<{ url: string }>;
  usage(params: { gc: boolean }): ProcessUsage | Promise<ProcessUsage>;
  census(params: Record<string, never>): { connections: number; channels: number };
  stop(params: Record<string, never>): Promise<void>;
};

/** The Redis publisher of the baselines (stands where the backend stands for the broker). */
export type RawPublisherApi = {
  /** With `cluster`, SPUBLISH on that Redis Cluster (seed nodes `host:port`) instead of PUBLISH on `redisUrl`. */
  start(params: { redisUrl: string; cluster?: readonly string[] }): Promise<void>;
  emit(plan: EmitPlan): Promise<PacedResult>;
  usage(params: { gc: boolean }): ProcessUsage | Promise<ProcessUsage>;
  stop(params: Record<string, never>): Promise<void>;
};
