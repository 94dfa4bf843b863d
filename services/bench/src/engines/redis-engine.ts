import { randomBytes } from "node:crypto";
import { deleteClusterKeys, deleteKeys } from "@mcp-broker/shared/testing";
import { BACKEND_ENV, type BackendApi, type HttpBackendProcessApi } from "../backend/backend-api.js";
import { pollUntil } from "../core/clock.js";
import type { RpcClient } from "../core/rpc.js";
import { BENCH_BACKEND_SCRIPT, benchBrokerConfig } from "./bench-broker-config.js";
import type { BrokerDeployment, BrokerEngine } from "./broker-engine.js";
import { brokerDeployment, forkBrokerChild, startBrokerProcess, stopBrokerProcess, type BrokerProcess, type EngineDeps } from "./broker-processes.js";
import { startWorkerProcess, workerProblem, type WorkerProcess } from "./worker-process.js";

/** Broker instances of one Redis deployment. */
export const REDIS_INSTANCES = 2;

/** How long broker 1 of a cluster may take to become the backend's watcher. */
const WATCHER_TIMEOUT_MS = 30_000;

export interface ClusterOptions {
  /** Broker processes, all with `jobs.process: false`: the workers run the cluster's jobs. */
  brokers: number;
  /** `jobs.lockMs` of every member (the default otherwise). */
  lockMs?: number;
}

/** Brokers and workers on one Redis and key prefix, fed by one bench backend (see RedisEngine.deployCluster). */
export interface ClusterDeployment extends BrokerDeployment {
  readonly keyPrefix: string;
  /** The workers running now, in the order they started. */
  readonly workers: readonly WorkerProcess[];
  /**
   * Which member opened each of the backend's MCP sessions, in the order the backend's census lists
   * them ("broker 1", "worker 1", "broker 2", …; workers started later are appended).
   */
  readonly backendSessions: readonly string[];
  /** Starts one more worker on the cluster's config; resolves once its /readyz says ready. */
  startWorker(): Promise<WorkerProcess>;
  /** SIGKILLs `worker` (no goodbye: the jobs it ran are left to the others' stalled-job recovery); resolves once it is gone. */
  killWorker(worker: WorkerProcess): Promise<void>;
}

/** The bench backend of a Redis deployment, and the key prefix that makes the deployment's members one cluster. */
interface ClusterBase {
  readonly url: string;
  readonly backend: RpcClient<BackendApi>;
  readonly keyPrefix: string;
  /** Stops the backend, then deletes the keys under the prefix (after every member stopped). */
  stop(): Promise<void>;
}

/**
 * The Redis engine: REDIS_INSTANCES broker processes with `redisUrl` and one key prefix of their
 * own (`mcpb-bench:<label>:<random>:`, so no two deployments share state), which makes them one
 * cluster. Each broker connects to every backend itself, so the backend is one process both reach:
 * the bench backend in HTTP mode, forked here, one MCP session per broker. Load generators spread
 * sessions round-robin over the brokers' URLs. Stopping stops the brokers, then the backend, then
 * deletes whatever the brokers left in Redis under the prefix. `deployCluster` deploys brokers that
 * leave the cluster's jobs to worker processes (scenarios 7 and 8).
 */
export class RedisEngine implements BrokerEngine {
  readonly name: "redis" | "redis-cluster";
  readonly description: string;
  readonly unavailableReason: string | undefined;
  readonly redisCluster: readonly string[] | undefined;

  /** `cluster`: the brokers use a Redis Cluster through these seed nodes instead of the Redis at `redisUrl`. */
  constructor(private readonly deps: EngineDeps & { redisUrl: string; redisUnavailable: string | undefined; cluster?: { nodes: string[] } }) {
    this.unavailableReason = deps.redisUnavailable;
    this.redisCluster = deps.cluster?.nodes;
    this.name = deps.cluster === undefined ? "redis" : "redis-cluster";
    this.description =
      deps.cluster === undefined
        ? `${REDIS_INSTANCES} broker processes with redisUrl set, one cluster on one Redis (a key prefix per deployment), ` +
          `fed by one bench backend process over Streamable HTTP (one MCP session per broker); sessions spread round-robin over the ${REDIS_INSTANCES}`
        : `${REDIS_INSTANCES} broker processes with redis.cluster set (a local Redis Cluster of ${deps.cluster.nodes.length} redis-server nodes, 3 masters with a replica each, on this machine), ` +
          `otherwise as the redis engine`;
  }

  /** Where this engine's brokers find Redis (with the deployment's key prefix). */
  private target(keyPrefix: string): { url?: string; cluster?: string[]; keyPrefix: string } {
    return this.deps.cluster === undefined ? { url: this.deps.redisUrl, keyPrefix } : { cluster: this.deps.cluster.nodes, keyPrefix };
  }

  /** Why `deployCluster` cannot run here (no Redis, or no worker build), or undefined when it can. */
  clusterUnavailableReason(): string | undefined {
    return this.unavailableReason ?? workerProblem();
  }

  async deploy(label: string, options: { debounceMs?: number } = {}): Promise<BrokerDeployment> {
    const base = await this.startBase(label);
    const brokers: BrokerProcess[] = [];
    try {
      const config = benchBrokerConfig({ url: base.url }, { ...options, redis: this.target(base.keyPrefix) });
      for (let i = 1; i <= REDIS_INSTANCES; i++) brokers.push(await startBrokerProcess(this.deps, `${label}-${i}`, config));
      return brokerDeployment(this.name, brokers, base.backend, this.deps.diagnostics, () => base.stop());
    } catch (error) {
      await Promise.all(brokers.map(stopBrokerProcess));
      await base.stop();
      throw error;
    }
  }

  /**
   * `brokers` broker processes with `jobs.process: false` and one worker process (services/worker,
   * run as deployed), on one Redis and key prefix, fed by one bench backend over Streamable HTTP
   * (one MCP session per member). Broker 1 starts first and takes the backend's watcher lease (the
   * intake of its list_changed) before the worker runs, so that killing a worker never kills the
   * watcher too; the worker then loads the catalog the brokers wait for, and the other brokers
   * follow. Stopping stops the brokers, the workers, the backend, then deletes the keys.
   */
  async deployCluster(label: string, options: ClusterOptions): Promise<ClusterDeployment> {
    const base = await this.startBase(label);
    const redis = this.target(base.keyPrefix);
    const lockMs = options.lockMs === undefined ? {} : { lockMs: options.lockMs };
    const brokerConfig = benchBrokerConfig({ url: base.url }, { redis, jobs: { process: false, ...lockMs } });
    // Broker 1 stays the watcher (workers do not take it over): killing a worker tests its jobs alone.
    const workerConfig = benchBrokerConfig({ url: base.url }, { redis: { ...redis, workersWatchFirst: false }, jobs: lockMs });
    const brokers: BrokerProcess[] = [];
    const workers: WorkerProcess[] = [];
    const backendSessions: string[] = [];
    let workerSeq = 0;
    const startWorker = async (): Promise<WorkerProcess> => {
      const seq = ++workerSeq;
      const worker = await startWorkerProcess(this.deps.group, `${label}-${seq}`, workerConfig);
      workers.push(worker);
      backendSessions.push(`worker ${seq}`);
      return worker;
    };
    const afterBrokers = async (): Promise<void> => {
      await Promise.all(workers.splice(0).map((w) => w.child.stop()));
      await base.stop();
    };
    const firstTag = `${label}-1`;
    const first = forkBrokerChild(this.deps, firstTag);
    try {
      const starting = first.rpc.call("start", { config: brokerConfig });
      starting.catch(() => undefined);
      await pollUntil(async () => (await first.rpc.call("census", {})).watching, WATCHER_TIMEOUT_MS, `broker ${firstTag} to take the backend's watcher lease`, 50);
      backendSessions.push("broker 1");
      await startWorker();
      brokers.push({ tag: firstTag, url: (await starting).url, child: first });
      for (let i = 2; i <= options.brokers; i++) {
        brokers.push(await startBrokerProcess(this.deps, `${label}-${i}`, brokerConfig));
        backendSessions.push(`broker ${i}`);
      }
    } catch (error) {
      await Promise.all([first.stop(() => first.rpc.call("stop", {})), ...brokers.filter((b) => b.child !== first).map(stopBrokerProcess)]);
      await afterBrokers();
      throw error;
    }
    return {
      ...brokerDeployment(this.name, brokers, base.backend, this.deps.diagnostics, afterBrokers),
      keyPrefix: base.keyPrefix,
      workers,
      backendSessions,
      startWorker,
      killWorker: async (worker) => {
        await worker.child.kill();
        const index = workers.indexOf(worker);
        if (index >= 0) workers.splice(index, 1);
      },
    };
  }

  /** Forks the bench backend in HTTP mode and picks the deployment's key prefix. */
  private async startBase(label: string): Promise<ClusterBase> {
    const { group, control, redisUrl } = this.deps;
    const keyPrefix = `mcpb-bench:${label}:${randomBytes(4).toString("hex")}:`;
    const backendArrives = control.next(60_000);
    backendArrives.catch(() => undefined);
    const backendProcess = group.fork<HttpBackendProcessApi>(BENCH_BACKEND_SCRIPT, `backend-${label}`, {
      env: { [BACKEND_ENV.controlPort]: String(control.port), [BACKEND_ENV.transport]: "http" },
    });
    const stop = async (): Promise<void> => {
      await backendProcess.stop(() => backendProcess.rpc.call("stop", {}));
      // A leftover key only costs Redis memory (no later run shares the prefix): not worth failing a scenario.
      const cluster = this.deps.cluster;
      await (cluster === undefined ? deleteKeys(redisUrl, keyPrefix) : deleteClusterKeys(cluster.nodes, keyPrefix)).catch((error: unknown) => {
        process.stderr.write(`warning: Redis keys under ${keyPrefix} not deleted: ${(error as Error).message}\n`);
      });
    };
    try {
      const { url } = await backendProcess.rpc.call("listen", {});
      const backend: RpcClient<BackendApi> = await backendArrives;
      return { url, backend, keyPrefix, stop };
    } catch (error) {
      await stop();
      throw error;
    }
  }
}
