import { randomBytes } from "node:crypto";
import { deleteKeys } from "@mcp-broker/shared/testing";
import { BACKEND_ENV, type BackendApi, type HttpBackendProcessApi } from "../backend/backend-api.js";
import type { RpcClient } from "../core/rpc.js";
import { BENCH_BACKEND_SCRIPT, benchBrokerConfig } from "./bench-broker-config.js";
import type { BrokerDeployment, BrokerEngine } from "./broker-engine.js";
import { brokerDeployment, startBrokerProcess, stopBrokerProcess, type BrokerProcess, type EngineDeps } from "./broker-processes.js";

/** Broker instances of one Redis deployment. */
export const REDIS_INSTANCES = 2;

/**
 * The Redis engine: REDIS_INSTANCES broker processes with `redisUrl` and one key prefix of their
 * own (`mcpb-bench:<label>:<random>:`, so no two deployments share state), which makes them one
 * cluster. Each broker connects to every backend itself, so the backend is one process both reach:
 * the bench backend in HTTP mode, forked here, one MCP session per broker. Load generators spread
 * sessions round-robin over the brokers' URLs. Stopping stops the brokers, then the backend, then
 * deletes whatever the brokers left in Redis under the prefix.
 */
export class RedisEngine implements BrokerEngine {
  readonly name = "redis";
  readonly description =
    `${REDIS_INSTANCES} broker processes with redisUrl set, one cluster on one Redis (a key prefix per deployment), ` +
    `fed by one bench backend process over Streamable HTTP (one MCP session per broker); sessions spread round-robin over the ${REDIS_INSTANCES}`;
  readonly unavailableReason: string | undefined;

  constructor(private readonly deps: EngineDeps & { redisUrl: string; redisUnavailable: string | undefined }) {
    this.unavailableReason = deps.redisUnavailable;
  }

  async deploy(label: string, options: { debounceMs?: number } = {}): Promise<BrokerDeployment> {
    const { group, control, diagnostics, redisUrl } = this.deps;
    const keyPrefix = `mcpb-bench:${label}:${randomBytes(4).toString("hex")}:`;
    const backendArrives = control.next(60_000);
    backendArrives.catch(() => undefined);
    const backendProcess = group.fork<HttpBackendProcessApi>(BENCH_BACKEND_SCRIPT, `backend-${label}`, {
      env: { [BACKEND_ENV.controlPort]: String(control.port), [BACKEND_ENV.transport]: "http" },
    });
    const brokers: BrokerProcess[] = [];
    const afterBrokers = async (): Promise<void> => {
      await backendProcess.stop(() => backendProcess.rpc.call("stop", {}));
      // A leftover key only costs Redis memory (no later run shares the prefix): not worth failing a scenario.
      await deleteKeys(redisUrl, keyPrefix).catch((error: unknown) => {
        process.stderr.write(`warning: Redis keys under ${keyPrefix} not deleted: ${(error as Error).message}\n`);
      });
    };
    try {
      const { url } = await backendProcess.rpc.call("listen", {});
      const backend: RpcClient<BackendApi> = await backendArrives;
      const config = benchBrokerConfig({ url }, { ...options, redis: { url: redisUrl, keyPrefix } });
      for (let i = 1; i <= REDIS_INSTANCES; i++) brokers.push(await startBrokerProcess(this.deps, `${label}-${i}`, config));
      return brokerDeployment("redis", brokers, backend, diagnostics, afterBrokers);
    } catch (error) {
      await Promise.all(brokers.map(stopBrokerProcess));
      await afterBrokers();
      throw error;
    }
  }
}
