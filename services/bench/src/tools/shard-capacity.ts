/**
 * How many backend updates one Redis (or the one shard of a Redis Cluster that serves a broker
 * cluster's slot) takes through the Redis engine's update log: the script that takes a position,
 * stamps the key and publishes the message, as a watcher runs it, with one subscriber receiving
 * every message. Publishers keep `--inflight` ticks of `--batch` updates in flight (a watcher sends
 * the updates of one tick in one script call) for `--seconds`; reported: updates/s published and
 * received, and the Redis server's CPU over the run (INFO cpu, of the node that serves the slot).
 * Usage (after `npm run build`):
 *
 *   node dist/tools/shard-capacity.js [--cluster] [--seconds 10] [--batch 10] [--inflight 8] [--publishers 2]
 *
 * One Redis: REDIS_URL (default redis://127.0.0.1:6379). --cluster: REDIS_CLUSTER_NODES, or a
 * local Redis Cluster started for the run. The figure is a measurement on this machine, where the
 * publishers share its cores with Redis; it is the number the bench README's sizing table uses.
 */
import { parseArgs } from "node:util";
import { Redis } from "ioredis";
import { CHANNEL } from "@mcp-broker/shared";
import { createRedisEngine, type RedisEngine } from "@mcp-broker/shared/node";
import { deleteClusterKeys, deleteKeys, testRedisCluster } from "@mcp-broker/shared/testing";

const { values } = parseArgs({
  options: {
    cluster: { type: "boolean", default: false },
    seconds: { type: "string", default: "10" },
    batch: { type: "string", default: "10" },
    inflight: { type: "string", default: "8" },
    publishers: { type: "string", default: "2" },
    keys: { type: "string", default: "1000" },
  },
});
const seconds = Number(values.seconds);
const batch = Number(values.batch);
const inflight = Number(values.inflight);
const keyCount = Number(values.keys);
const url = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const nodes = values.cluster ? (await testRedisCluster()).nodes : undefined;
const keyPrefix = `mcpb-capacity:${process.pid}:`;
const engine = (name: string): RedisEngine =>
  createRedisEngine({ ...(nodes === undefined ? { url } : { cluster: nodes }), keyPrefix, instanceId: name, onInvalidMessage: () => undefined, onConnectionError: () => undefined });

const subscriber = engine("capacity-subscriber");
const publishers = Array.from({ length: Number(values.publishers) }, (_, i) => engine(`capacity-publisher-${i}`));
await Promise.all([subscriber, ...publishers].map((e) => e.connect()));
let received = 0;
subscriber.bus.onMessage(() => received++);
for (let k = 0; k < keyCount; k++) await subscriber.bus.subscribe(CHANNEL.resource("b", `k${k}`));

// The server whose CPU counts: the one Redis, or the master that serves the prefix's slot.
const slotNode = async (): Promise<Redis> => {
  if (nodes === undefined) return new Redis(url);
  const slot = Number(await subscriber.redis.cluster("KEYSLOT", subscriber.keys.positions()));
  const ranges = (await subscriber.redis.cluster("SLOTS")) as unknown as [number, number, [string, number]][];
  const owner = ranges.find(([from, to]) => slot >= from && slot <= to)?.[2];
  return new Redis(owner?.[1] ?? 0, owner?.[0] ?? "127.0.0.1");
};
const server = await slotNode();
const cpu = async (): Promise<number> => {
  const info = await server.info("cpu");
  return Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1] ?? 0) + Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1] ?? 0);
};

let published = 0;
let sequence = 0;
const deadline = Date.now() + seconds * 1000;
const cpuBefore = await cpu();
const started = Date.now();
await Promise.all(
  publishers.flatMap((publisher) =>
    Array.from({ length: inflight }, async () => {
      while (Date.now() < deadline) {
        const tick: Promise<number>[] = [];
        for (let i = 0; i < batch; i++) {
          const key = `k${sequence++ % keyCount}`;
          tick.push(publisher.updates.publish({ kind: "resource.updated", v: 1, origin: "capacity", backendId: "b", uri: key, at: Date.now(), update: sequence }, [key]));
        }
        await Promise.all(tick);
        published += batch;
      }
    }),
  ),
);
const elapsed = (Date.now() - started) / 1000;
const cpuUsed = (await cpu()) - cpuBefore;
await new Promise((resolve) => setTimeout(resolve, 500));
process.stdout.write(
  `${nodes === undefined ? `one Redis at ${url}` : `Redis Cluster (${nodes.length} nodes), the shard of the prefix's slot`}: ` +
    `${Math.round(published / elapsed).toLocaleString("en-US")} updates/s published, ${Math.round(received / elapsed).toLocaleString("en-US")}/s received ` +
    `(${keyCount} keys, ${publishers.length} publishers × ${inflight} ticks of ${batch} in flight, ${elapsed.toFixed(1)} s); Redis CPU ${Math.round((cpuUsed / elapsed) * 100)} % of a core\n`,
);
server.disconnect();
await Promise.all([subscriber, ...publishers].map((e) => e.close()));
await (nodes === undefined ? deleteKeys(url, keyPrefix) : deleteClusterKeys(nodes, keyPrefix));
process.exit(0);
