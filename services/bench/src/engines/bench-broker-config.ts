import { fileURLToPath } from "node:url";
import type { BrokerConfigInput } from "@mcp-broker/shared";
import { BACKEND_ENV } from "../backend/backend-api.js";
import { BACKEND_ID } from "../core/bench-uris.js";

/** Upstream release grace of the bench brokers (the default is 5 s). */
export const RELEASE_GRACE_MS = 1_000;

/** The bench backend's script (stdio mode when the broker starts it; HTTP mode when the orchestrator forks it). */
export const BENCH_BACKEND_SCRIPT = new URL("../backend/bench-backend.js", import.meta.url);

/**
 * Where the brokers' one backend is: each broker starts its own bench backend over stdio, calling
 * back to the orchestrator's control port, or all of them reach one shared bench backend over
 * Streamable HTTP at `url`.
 */
export type BenchBackendTarget = { controlPort: number } | { url: string };

export interface BenchBrokerOptions {
  debounceMs?: number;
  /** The Redis engine: every broker with this Redis (one, by URL, or a Redis Cluster's seed nodes) and key prefix is one cluster. */
  redis?: { url?: string; cluster?: string[]; keyPrefix: string; workersWatchFirst?: boolean };
  /** `jobs.process` (whether a broker runs the cluster's jobs) and `jobs.lockMs`; the defaults otherwise. */
  jobs?: { process?: boolean; lockMs?: number };
}

/**
 * The broker config every scenario uses: one backend, the bench backend (legacy era). Limits are
 * raised (subscriptions, and sessions per principal) because every bench session is the same anonymous principal (the default 10 000
 * subscriptions per principal would cap the 10k-session scenarios). The upstream release grace is
 * 1 s instead of 5 s so the subscribe-cost scenario can count upstream unsubscribes sooner (it only
 * delays releases; nothing measured depends on it otherwise). Logging at `warn`: per-session
 * `info` lines are not what is measured.
 */
export function benchBrokerConfig(backend: BenchBackendTarget, options: BenchBrokerOptions = {}): BrokerConfigInput {
  const common = { id: BACKEND_ID, era: "legacy", timeoutMs: 60_000 } as const;
  return {
    server: { host: "127.0.0.1", port: 0, maxSessionsPerPrincipal: 1_000_000 },
    backends: [
      "url" in backend
        ? { ...common, url: backend.url }
        : {
            ...common,
            command: process.execPath,
            args: [fileURLToPath(BENCH_BACKEND_SCRIPT)],
            env: { [BACKEND_ENV.controlPort]: String(backend.controlPort) },
          },
    ],
    subscriptions: { maxPerSession: 10_000, maxPerPrincipal: 10_000_000, maxTotal: 10_000_000, releaseGraceMs: RELEASE_GRACE_MS },
    ...(options.debounceMs !== undefined && { lists: { debounceMs: options.debounceMs } }),
    ...(options.redis !== undefined && {
      ...(options.redis.url !== undefined && { redisUrl: options.redis.url }),
      redis: {
        keyPrefix: options.redis.keyPrefix,
        ...(options.redis.cluster !== undefined && { cluster: options.redis.cluster }),
        ...(options.redis.workersWatchFirst !== undefined && { workersWatchFirst: options.redis.workersWatchFirst }),
      },
    }),
    ...(options.jobs !== undefined && { jobs: options.jobs }),
    logging: { level: "warn" },
  };
}
