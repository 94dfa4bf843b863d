/**
 * The baseline's update source: publishes each update URI on Redis channel `bench:r:<key>` at the
 * plan's rate (auto-pipelined), where the bench backend would send `resources/updated` to the broker.
 */
import { Redis } from "ioredis";
import { exposedUri, keyOf, rawChannel, updateUri } from "../core/bench-uris.js";
import { nowMicros } from "../core/clock.js";
import { parentLink } from "../core/links.js";
import { pacedLoop } from "../core/paced-loop.js";
import { exitWithParent } from "../core/process-group.js";
import { reportUsage } from "../core/process-usage.js";
import { serveRpc } from "../core/rpc.js";
import type { RawPublisherApi } from "./raw-api.js";

let redis: Redis | undefined;

const api: RawPublisherApi = {
  start: async ({ redisUrl }) => {
    const client = new Redis(redisUrl, { lazyConnect: true, enableAutoPipelining: true, maxRetriesPerRequest: 1 });
    await client.connect();
    redis = client;
  },
  emit: async (plan) => {
    const client = redis;
    if (client === undefined) throw new Error("publisher not started");
    return pacedLoop(plan.rate, plan.count, (i) => {
      const key = keyOf(plan, i);
      void client.publish(rawChannel(key), updateUri(exposedUri(key), plan.step, i, nowMicros())).catch(() => undefined);
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
