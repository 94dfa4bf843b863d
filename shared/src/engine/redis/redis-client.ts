import type { Cluster, Redis } from "ioredis";

/** A connection of the Redis engine: to one Redis, or to a Redis Cluster (see `redis.cluster`). */
export type RedisClient = Redis | Cluster;

/** Every key matching `pattern`, in batches: on a cluster, from every master (SCAN is per node). */
export async function* scanKeys(redis: RedisClient, pattern: string): AsyncIterable<string[]> {
  const nodes: Redis[] = "nodes" in redis && redis.isCluster ? redis.nodes("master") : [redis as Redis];
  for (const node of nodes) {
    for await (const batch of node.scanStream({ match: pattern, count: 500 }) as AsyncIterable<string[]>) yield batch;
  }
}
