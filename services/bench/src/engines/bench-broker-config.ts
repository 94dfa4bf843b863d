import { fileURLToPath } from "node:url";
import type { BrokerConfigInput } from "@mcp-broker/shared";
import { BACKEND_ID } from "../core/bench-uris.js";

/** Upstream release grace of the bench brokers (the default is 5 s). */
export const RELEASE_GRACE_MS = 1_000;

/**
 * The broker config every scenario uses: one backend, the bench backend over stdio (legacy era),
 * calling back to the orchestrator's control port. Limits are raised because every bench session
 * is the same anonymous principal (the default 10 000 subscriptions per principal would cap the
 * 10k-session scenarios). The upstream release grace is 1 s instead of 5 s so the subscribe-cost
 * scenario can count upstream unsubscribes sooner (it only delays releases; nothing measured
 * depends on it otherwise). Logging at `warn`: per-session `info` lines are not what is measured.
 */
export function benchBrokerConfig(controlPort: number, overrides: { debounceMs?: number; redisUrl?: string } = {}): BrokerConfigInput {
  return {
    server: { host: "127.0.0.1", port: 0 },
    backends: [
      {
        id: BACKEND_ID,
        command: process.execPath,
        args: [fileURLToPath(new URL("../backend/bench-backend.js", import.meta.url))],
        env: { BENCH_CONTROL_PORT: String(controlPort) },
        era: "legacy",
        timeoutMs: 60_000,
      },
    ],
    subscriptions: { maxPerSession: 10_000, maxPerPrincipal: 10_000_000, maxTotal: 10_000_000, releaseGraceMs: RELEASE_GRACE_MS },
    ...(overrides.debounceMs !== undefined && { lists: { debounceMs: overrides.debounceMs } }),
    ...(overrides.redisUrl !== undefined && { redisUrl: overrides.redisUrl }),
    logging: { level: "warn" },
  };
}
