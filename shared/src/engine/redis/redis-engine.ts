import { Redis } from "ioredis";
import type { JobQueue } from "../jobs.js";
import { BullJobQueue, type BullJobQueueOptions } from "./bullmq-job-queue.js";
import { RedisBus } from "./redis-bus.js";
import { RedisCatalogStore } from "./redis-catalog-store.js";
import { RedisSessionStore } from "./redis-session-store.js";
import { RedisUpdateLog } from "./redis-update-log.js";
import { RedisKeys } from "./keys.js";
import { RedisLeases } from "./redis-leases.js";
import { RedisRegistry } from "./redis-registry.js";

export interface RedisEngineOptions {
  url: string;
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
  readonly redis: Redis;
  /** A BullMQ job queue of this cluster (its connections are its own; `close` it before the engine). */
  jobQueue<T>(name: string, options: Omit<BullJobQueueOptions<T>, "connect" | "prefix" | "name">): JobQueue<T>;
  /** Resolves once both connections are ready; rejects when Redis cannot be reached. */
  connect(): Promise<void>;
  close(): Promise<void>;
}

export function createRedisEngine(options: RedisEngineOptions): RedisEngine {
  const connection = {
    lazyConnect: true,
    commandTimeout: options.commandTimeoutMs ?? 5_000,
    // Fail a command after one retry rather than queueing it for minutes while Redis is down.
    maxRetriesPerRequest: 1,
    retryStrategy: (attempt: number) => Math.min(100 * 2 ** attempt, 5_000),
  };
  // Auto-pipelining writes the commands issued in one tick with one socket write instead of one
  // each. Publishes, the hot path, bypass it (see RedisBus.publish).
  const redis = new Redis(options.url, { ...connection, enableAutoPipelining: true, connectionName: `mcp-broker:${options.instanceId}:commands` });
  const subscriber = new Redis(options.url, { ...connection, connectionName: `mcp-broker:${options.instanceId}:subscriber`, commandTimeout: undefined });
  let lastError: Error | undefined;
  redis.on("error", (error: Error) => {
    lastError = error;
    options.onConnectionError("commands", error);
  });
  subscriber.on("error", (error: Error) => {
    lastError = error;
    options.onConnectionError("subscriber", error);
  });
  const keys = new RedisKeys(options.keyPrefix);
  const bus = new RedisBus(redis, subscriber, keys, options.onInvalidMessage);
  return {
    keys,
    bus,
    registry: new RedisRegistry(redis, keys, options.instanceId),
    leases: new RedisLeases(redis, keys),
    catalog: new RedisCatalogStore(redis, keys),
    updates: new RedisUpdateLog(redis, keys),
    sessions: new RedisSessionStore(redis, keys),
    redis,
    jobQueue: (name, queueOptions) =>
      new BullJobQueue({
        ...queueOptions,
        name,
        prefix: keys.jobs(),
        // BullMQ's commands wait out a Redis restart (a job scheduled then is not lost).
        connect: () => new Redis(options.url, { maxRetriesPerRequest: null, retryStrategy: connection.retryStrategy, connectionName: `mcp-broker:${options.instanceId}:jobs` }),
      }),
    async connect() {
      try {
        await Promise.all([redis.connect(), subscriber.connect()]);
      } catch (error) {
        // ioredis rejects with "Connection is closed"; the cause is the last connection error.
        throw lastError ?? error;
      }
    },
    async close() {
      await bus.close();
      await Promise.allSettled([redis.quit(), subscriber.quit()]);
      redis.disconnect();
      subscriber.disconnect();
    },
  };
}
