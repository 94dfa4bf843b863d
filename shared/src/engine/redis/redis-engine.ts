import { Cluster, Redis, type ClusterNode, type RedisOptions } from "ioredis";
import type { JobQueue } from "../jobs.js";
import { within } from "../../clock.js";
import { BullJobQueue, type BullJobQueueOptions } from "./bullmq-job-queue.js";
import { RedisBus } from "./redis-bus.js";
import { RedisCatalogStore } from "./redis-catalog-store.js";
import { RedisSessionStore } from "./redis-session-store.js";
import { RedisUpdateLog, UPDATE_PUBLISH_COMMAND, UPDATE_UNWATCHED_COMMAND, UPDATE_WATCHED_COMMAND } from "./redis-update-log.js";
import { RedisKeys } from "./keys.js";
import { RedisLeases } from "./redis-leases.js";
import { RedisRegistry } from "./redis-registry.js";
import type { RedisClient } from "./redis-client.js";

export interface RedisEngineOptions {
  /** One Redis; or, with `cluster`, unused. */
  url?: string;
  /** A Redis Cluster's seed nodes (`host:port`): every key then carries the prefix as its hash tag (see keys.ts). */
  cluster?: readonly string[];
  keyPrefix: string;
  /** This instance's id: names its connections in CLIENT LIST (`mcp-broker:<id>:commands|subscriber`) and its heartbeat. */
  instanceId: string;
  /** A command that gets no answer in this time fails (Redis down): callers get an error, never a hang. */
  commandTimeoutMs?: number;
  onInvalidMessage: (channel: string, reason: string) => void;
  onConnectionError: (role: "commands" | "subscriber", error: Error) => void;
}

/** The Redis engine's parts over two connections: one for commands and publishing, one subscribed. */
export interface RedisEngine {
  readonly keys: RedisKeys;
  readonly bus: RedisBus;
  readonly registry: RedisRegistry;
  readonly leases: RedisLeases;
  /** The cluster catalog; also the cluster's position counter. */
  readonly catalog: RedisCatalogStore;
  /** Resource updates with their cluster positions and stamps. */
  readonly updates: RedisUpdateLog;
  /** Legacy sessions' records, for adoption by any member. */
  readonly sessions: RedisSessionStore;
  /** The command connection, for operator tools and tests. */
  readonly redis: RedisClient;
  /** A BullMQ job queue of this cluster (its connections are its own; `close` it before the engine). */
  jobQueue<T>(name: string, options: Omit<BullJobQueueOptions<T>, "connect" | "prefix" | "name">): JobQueue<T>;
  /**
   * When either connection last had trouble (an error, a close, a reconnect; `Date.now()` ms, or
   * -Infinity): Redis went away or restarted (it may have lost writes), and the other members may
   * still be waiting out their reconnect delay (at most `RECONNECT_MAX_MS`).
   */
  lastTrouble(): number;
  /** Resolves once both connections are ready; rejects when Redis cannot be reached. */
  connect(): Promise<void>;
  /** The command connection is up (connected and ready), as far as this process knows. */
  reachable(): boolean;
  /**
   * Drops both connections now, for a stop while Redis is away: what waits for Redis fails at once
   * ("Connection is closed"), and so does every command after, instead of waiting out its timeout.
   */
  abandon(): void;
  close(): Promise<void>;
}

/** How long a closing engine waits for Redis to answer its QUITs before it drops the connections. */
const QUIT_WAIT_MS = 1_000;

/** The longest a member waits between two attempts to reach Redis again. */
export const RECONNECT_MAX_MS = 5_000;

export function createRedisEngine(options: RedisEngineOptions): RedisEngine {
  const connection = {
    commandTimeout: options.commandTimeoutMs ?? 5_000,
    // Fail a command after one retry rather than queueing it for minutes while Redis is down.
    maxRetriesPerRequest: 1,
    retryStrategy: (attempt: number) => Math.min(100 * 2 ** attempt, RECONNECT_MAX_MS),
  };
  const seeds = options.cluster?.map(seedNode);
  const connect = (role: string, extra: RedisOptions & { shardedSubscribers?: boolean }): RedisClient => {
    const { enableAutoPipelining, autoPipeliningIgnoredCommands, shardedSubscribers, ...redisOptions } = { ...connection, ...extra, connectionName: `mcp-broker:${options.instanceId}:${role}` };
    const pipelining = { ...(enableAutoPipelining !== undefined && { enableAutoPipelining }), ...(autoPipeliningIgnoredCommands !== undefined && { autoPipeliningIgnoredCommands }) };
    if (seeds === undefined) return new Redis(options.url ?? "", { ...redisOptions, lazyConnect: true, ...pipelining });
    return new Cluster(seeds, {
      lazyConnect: true,
      ...pipelining,
      ...(shardedSubscribers !== undefined && { shardedSubscribers }),
      redisOptions,
      clusterRetryStrategy: connection.retryStrategy,
      // A command during a failover waits for the new master rather than failing at once.
      retryDelayOnFailover: 200,
      retryDelayOnClusterDown: 200,
      // No periodic refresh of the slots: each one opened a connection to a node and rebuilt a
      // 16 384-slot table (~1.5 ms of a broker's CPU). The subscriber's every second put that in
      // the tail of every update (unicast p99 at 5k/s, probe of the update log and bus: 2.0 ->
      // 1.3 ms). A slot that moves is seen without it (see RedisBus).
    });
  };
  // Auto-pipelining writes the commands issued in one tick with one socket write instead of one
  // each. Publishes, the hot path, bypass it (see RedisBus.publish and UPDATE_PUBLISH_COMMAND), and
  // so do the start and end of a watch, which must reach Redis in order with those publishes
  // (UPDATE_WATCHED_COMMAND, UPDATE_UNWATCHED_COMMAND).
  const redis = connect("commands", { enableAutoPipelining: true, autoPipeliningIgnoredCommands: [UPDATE_PUBLISH_COMMAND, UPDATE_WATCHED_COMMAND, UPDATE_UNWATCHED_COMMAND] });
  // On a cluster the bus uses sharded pub/sub: the client keeps a subscriber per master (ours is the one that serves the prefix's slot).
  const subscriber = connect("subscriber", { commandTimeout: undefined, shardedSubscribers: true });
  let lastError: Error | undefined;
  let troubleAt = Number.NEGATIVE_INFINITY;
  for (const client of [redis, subscriber]) {
    for (const event of ["error", "close", "reconnecting", "node error"]) client.on(event, () => (troubleAt = Date.now()));
  }
  redis.on("error", (error: Error) => {
    lastError = error;
    options.onConnectionError("commands", error);
  });
  subscriber.on("error", (error: Error) => {
    lastError = error;
    options.onConnectionError("subscriber", error);
  });
  // On a cluster every key shares one hash tag, so that each script touches one slot (see keys.ts).
  const keys = seeds === undefined ? new RedisKeys(options.keyPrefix) : new RedisKeys(`{${options.keyPrefix}}`, true);
  const bus = new RedisBus(redis, subscriber, keys, options.onInvalidMessage);
  const updates = new RedisUpdateLog(redis, keys);
  return {
    keys,
    bus,
    registry: new RedisRegistry(redis, keys, options.instanceId),
    leases: new RedisLeases(redis, keys),
    catalog: new RedisCatalogStore(redis, keys, updates),
    updates,
    lastTrouble: () => troubleAt,
    sessions: new RedisSessionStore(redis, keys),
    redis,
    jobQueue: (name, queueOptions) =>
      new BullJobQueue({
        ...queueOptions,
        name,
        owner: options.instanceId,
        // BullMQ on a cluster: a hash tag in its prefix keeps each queue's keys in one slot (keys.jobs() has it).
        prefix: keys.jobs(),
        // BullMQ's commands wait out a Redis restart (a job scheduled then is not lost).
        connect: () => {
          const jobOptions = { maxRetriesPerRequest: null, retryStrategy: connection.retryStrategy, connectionName: `mcp-broker:${options.instanceId}:jobs` };
          return seeds === undefined ? new Redis(options.url ?? "", jobOptions) : new Cluster(seeds, { redisOptions: jobOptions, clusterRetryStrategy: connection.retryStrategy });
        },
      }),
    async connect() {
      // A cluster is asked first, node by node, whether it is one that serves every slot: the
      // cluster client would otherwise wait for one without end.
      if (seeds !== undefined) await probeCluster(seeds);
      try {
        await Promise.all([redis.connect(), subscriber.connect()]);
      } catch (error) {
        // ioredis rejects with "Connection is closed"; the cause is the last connection error.
        throw lastError ?? error;
      }
      // One Redis must not be a cluster node (a cluster was checked before connecting).
      if (seeds === undefined) await checkNotClusterNode(redis);
    },
    reachable: () => redis.status === "ready",
    abandon() {
      for (const client of [redis, subscriber]) {
        const away = client.status !== "ready";
        client.options.enableOfflineQueue = false;
        client.disconnect();
        // ioredis ends a client that waits between two reconnect attempts only at the next attempt,
        // which `disconnect` cancelled: what it queued would wait out its timeout, and a cluster
        // client with no node connected ends never (nothing is left to close), so what it queued
        // waited for ever (a broker stopping while its Redis Cluster was down did not exit).
        if (away) (client as unknown as { flushQueue?(error: Error): void }).flushQueue?.(new Error("Connection is closed."));
      }
    },
    async close() {
      await bus.close();
      // A QUIT that Redis does not answer (stalled) is not waited for: the subscriber has no command timeout.
      await within(Promise.allSettled([redis.quit(), subscriber.quit()]), QUIT_WAIT_MS, undefined);
      redis.disconnect();
      subscriber.disconnect();
    },
  };
}

/** `host:port` (IPv6 in brackets) as ioredis takes a cluster node. */
function seedNode(node: string): ClusterNode {
  const colon = node.lastIndexOf(":");
  return { host: node.slice(0, colon).replace(/^\[(.*)\]$/, "$1"), port: Number(node.slice(colon + 1)) };
}

/** Redis answers, but is not what the engine is configured for. */
export class RedisTopologyError extends Error {
  override readonly name = "RedisTopologyError";
}

/** The first seed node that answers says whether it is a cluster node of a cluster that serves every slot. */
async function probeCluster(seeds: readonly ClusterNode[]): Promise<void> {
  const errors: string[] = [];
  for (const seed of seeds) {
    const { host, port } = seed as { host: string; port: number };
    const node = new Redis({ host, port, lazyConnect: true, connectTimeout: 2_000, maxRetriesPerRequest: 0, retryStrategy: () => null });
    let cause: Error | undefined;
    node.on("error", (error: Error) => (cause = error));
    let info: string;
    try {
      await node.connect();
      info = await node.info("cluster");
      if (/cluster_enabled:1/.test(info)) info = await node.cluster("INFO");
    } catch (error) {
      errors.push(`${host}:${port}: ${(cause ?? (error as Error)).message}`);
      continue;
    } finally {
      node.disconnect();
    }
    checkClusterInfo(info, `${host}:${port}`);
    return;
  }
  throw new Error(`no seed node answers (${errors.join("; ")})`);
}

function checkClusterInfo(info: string, node: string): void {
  if (/cluster_enabled:0/.test(info)) throw new RedisTopologyError(`${node} is not a Redis Cluster node (cluster mode is off): use redisUrl (or REDIS_URL) for one Redis`);
  const assigned = /cluster_slots_assigned:(\d+)/.exec(info)?.[1];
  if (!info.includes("cluster_state:ok") || assigned !== "16384") {
    throw new RedisTopologyError(
      `it does not serve every hash slot (cluster_state ${/cluster_state:(\w+)/.exec(info)?.[1] ?? "?"}, ${assigned ?? "?"} of 16384 slots assigned, as ${node} says): fix the cluster (redis-cli --cluster check) before starting`,
    );
  }
}

/** A single-Redis URL that points at a Redis Cluster node would half-work (MOVED on most keys): refused. */
async function checkNotClusterNode(redis: RedisClient): Promise<void> {
  const info = await redis.info("cluster").catch(() => "");
  if (/cluster_enabled:1/.test(info)) throw new RedisTopologyError("it is a Redis Cluster node: configure redis.cluster (or REDIS_CLUSTER_NODES) with its nodes instead of redisUrl (or REDIS_URL)");
}
