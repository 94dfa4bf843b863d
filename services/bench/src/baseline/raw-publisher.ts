/**
 * The baseline's update source: publishes each update URI on Redis channel `bench:r:<key>` at the
 * plan's rate (auto-pipelined), where the bench backend would send `resources/updated` to the broker;
 * on a Redis Cluster, as a sharded channel (SPUBLISH), on its slot's master.
 */
import { Cluster, Redis } from "ioredis";
import { exposedUri, keyOf, rawChannel, updateUri } from "../core/bench-uris.js";
import { nowMicros } from "../core/clock.js";
import { parentLink } from "../core/links.js";
import { pacedLoop } from "../core/paced-loop.js";
import { exitWithParent } from "../core/process-group.js";
import { reportUsage } from "../core/process-usage.js";
import { serveRpc } from "../core/rpc.js";
import type { RawPublisherApi } from "./raw-api.js";

let redis: Redis | Cluster | undefined;
/** SPUBLISH on a Redis Cluster (each key's channel on its own slot's master), PUBLISH on one Redis. */
let sharded = false;

const api: RawPublisherApi = {
  start: async ({ redisUrl, cluster }) => {
    const client =
      cluster === undefined
        ? new Redis(redisUrl, { lazyConnect: true, enableAutoPipelining: true, maxRetriesPerRequest: 1 })
        : new Cluster(
            cluster.map((node) => ({ host: node.slice(0, node.lastIndexOf(":")), port: Number(node.slice(node.lastIndexOf(":") + 1)) })),
            { lazyConnect: true, enableAutoPipelining: true, redisOptions: { maxRetriesPerRequest: 1 } },
          );
    await client.connect();
    redis = client;
    sharded = cluster !== undefined;
  },
  emit: async (plan) => {
    const client = redis;
    if (client === undefined) throw new Error("publisher not started");
    return pacedLoop(plan.rate, plan.count, (i) => {
      const key = keyOf(plan, i);
      const uri = updateUri(exposedUri(key), plan.step, i, nowMicros());
      void (sharded ? client.spublish(rawChannel(key), uri) : client.publish(rawChannel(key), uri)).catch(() => undefined);
    });
  },
  usage: reportUsage,
  stop: async () => {
    redis?.disconnect();
    setTimeout(() => process.exit(0), 20);
  },
};

serveRpc(parentLink(), api);
exitWithParent(() => redis?.disconnect());
