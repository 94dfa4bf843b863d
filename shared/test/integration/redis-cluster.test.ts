import { spawn } from "node:child_process";
import type { EventEmitter } from "node:events";
import { Cluster, Redis } from "ioredis";
import { afterAll, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { parseConfig } from "../../src/config/parse.js";
import type { BusMessage, ResourceUpdatedMessage } from "../../src/engine/bus.js";
import type { JobQueue } from "../../src/engine/jobs.js";
import { RedisBus } from "../../src/engine/redis/redis-bus.js";
import { createRedisEngine, type RedisEngine } from "../../src/engine/redis/redis-engine.js";
import { deleteClusterKeys, freePort, testRedisCluster, testRedisUrl, uniquePrefix, waitForClusterOk } from "../../src/testing/test-redis.js";
import { redisEngineContracts } from "../contracts/redis-engine-contracts.js";

/**
 * The Redis engine on a real Redis Cluster (three masters with a replica each, started by the tests
 * from redis-server, or REDIS_CLUSTER_NODES): every engine contract, the topology checks at
 * connect, and a master failover.
 */
const { nodes, processes, kill } = await testRedisCluster();
const prefixes: string[] = [];
const engines: RedisEngine[] = [];

async function members(n: number, onInvalid: (channel: string, reason: string) => void = () => undefined): Promise<RedisEngine[]> {
  const keyPrefix = uniquePrefix("cluster");
  prefixes.push(keyPrefix);
  const made = Array.from({ length: n }, (_, i) => createRedisEngine({ cluster: nodes, keyPrefix, instanceId: `${keyPrefix}${i}`, onInvalidMessage: onInvalid, onConnectionError: () => undefined }));
  await Promise.all(made.map((engine) => engine.connect()));
  engines.push(...made);
  return made;
}

afterAll(async () => {
  await Promise.all(queues.map((queue) => queue.close()));
  await Promise.all(engines.map((engine) => engine.close()));
  for (const prefix of prefixes) await deleteClusterKeys(nodes, prefix).catch(() => undefined);
});

const queues: JobQueue<number>[] = [];
let queueNumber = 0;
redisEngineContracts("redis cluster", members, async (options) => {
  const [engine] = await members(1);
  const queue = engine!.jobQueue<number>(`q${++queueNumber}`, { attempts: 1, backoffMs: 10, lockMs: 500, decode: (data) => z.number().parse(data), ...options });
  queues.push(queue);
  return queue;
});

describe("Redis engine on a Redis Cluster", () => {
  it("keeps every key of a cluster in one hash slot, so that each script touches one", async () => {
    const [engine] = await members(1);
    await engine!.registry.add({ principal: "p", sessionId: "s", backendId: "b", uri: "u" }, { perSession: 10, perPrincipal: 10, total: 10 });
    const keys = [engine!.keys.session("p", "s"), engine!.keys.total(), engine!.keys.refcounts("b"), engine!.keys.positions(), engine!.keys.lease("watcher:b"), engine!.keys.jobs()];
    const slots = await Promise.all(keys.map((key) => engine!.redis.cluster("KEYSLOT", key)));
    expect(new Set(slots).size).toBe(1);
    expect(engine!.keys.prefix).toMatch(/^\{.*\}$/);
  });

  it("refuses a single-Redis URL that points at a cluster node, naming the fields to use instead", async () => {
    const engine = createRedisEngine({ url: `redis://${nodes[0]}`, keyPrefix: uniquePrefix("url"), instanceId: "url", onInvalidMessage: () => undefined, onConnectionError: () => undefined });
    try {
      await expect(engine.connect()).rejects.toThrow(/it is a Redis Cluster node: configure redis\.cluster \(or REDIS_CLUSTER_NODES\)/);
    } finally {
      await engine.close();
    }
  });

  it("refuses seed nodes that are not cluster nodes, or that nothing answers on", async () => {
    const single = createRedisEngine({ cluster: [new URL(await testRedisUrl()).host], keyPrefix: uniquePrefix("single"), instanceId: "single", onInvalidMessage: () => undefined, onConnectionError: () => undefined });
    try {
      await expect(single.connect()).rejects.toThrow(/is not a Redis Cluster node \(cluster mode is off\)/);
    } finally {
      await single.close();
    }
    // A cluster node that serves no slot (never joined to a cluster).
    const port = await freePort();
    const lone = spawn("redis-server", ["--bind", "127.0.0.1", "--port", String(port), "--save", "", "--appendonly", "no", "--cluster-enabled", "yes", "--cluster-config-file", `/tmp/lone-${port}.conf`], { stdio: "ignore" });
    try {
      await vi.waitFor(
        async () => {
          const probe = new Redis(port, "127.0.0.1", { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
          probe.on("error", () => undefined);
          try {
            await probe.connect();
            expect(await probe.ping()).toBe("PONG");
          } finally {
            probe.disconnect();
          }
        },
        { timeout: 5_000, interval: 100 },
      );
      const uncovered = createRedisEngine({ cluster: [`127.0.0.1:${port}`], keyPrefix: uniquePrefix("lone"), instanceId: "lone", onInvalidMessage: () => undefined, onConnectionError: () => undefined });
      try {
        await expect(uncovered.connect()).rejects.toThrow(/does not serve every hash slot \(cluster_state fail, 0 of 16384/);
      } finally {
        await uncovered.close();
      }
    } finally {
      lone.kill("SIGKILL");
    }
    const nobody = createRedisEngine({ cluster: ["127.0.0.1:1"], keyPrefix: uniquePrefix("nobody"), instanceId: "nobody", onInvalidMessage: () => undefined, onConnectionError: () => undefined });
    try {
      await expect(nobody.connect()).rejects.toThrow(/no seed node answers \(127\.0\.0\.1:1: /);
    } finally {
      await nobody.close();
    }
  });

  it("takes seed nodes from redis.cluster or REDIS_CLUSTER_NODES (which wins), never a URL, never beside a Redis URL", () => {
    expect(parseConfig({ backends: [], redis: { cluster: ["127.0.0.1:7000"] } }, "t").redis.cluster).toEqual(["127.0.0.1:7000"]);
    const fromEnv = parseConfig({ backends: [], redisUrl: "redis://127.0.0.1:6379" }, "t", { REDIS_CLUSTER_NODES: "127.0.0.1:7000, [::1]:7001" });
    expect(fromEnv.redis.cluster).toEqual(["127.0.0.1:7000", "[::1]:7001"]);
    expect(fromEnv.redisUrl).toBeUndefined();
    expect(() => parseConfig({ backends: [], redis: { cluster: ["redis://127.0.0.1:7000"] } }, "t")).toThrow(/redis\.cluster\.0: a Redis Cluster seed node is host:port/);
    expect(() => parseConfig({ backends: [], redisUrl: "redis://x", redis: { cluster: ["x:1"] } }, "t")).toThrow(/redis\.cluster: set either redisUrl/);
    expect(() => parseConfig({ backends: [] }, "t", { REDIS_CLUSTER_NODES: "redis://127.0.0.1:7000" })).toThrow(/REDIS_CLUSTER_NODES \(environment\): 'redis:\/\/127\.0\.0\.1:7000' is not host:port/);
    expect(() => parseConfig({ backends: [] }, "t", { REDIS_URL: "redis://x", REDIS_CLUSTER_NODES: "x:1" })).toThrow(/set one/);
  });

  it.skipIf(processes.size === 0)("keeps delivering and holding state through a master failover (a replica takes over)", async () => {
    const [a, b] = await members(2);
    const limits = { perSession: 10, perPrincipal: 10, total: 10 };
    await a!.registry.add({ principal: "p", sessionId: "s", backendId: "b", uri: "kept" }, limits);
    const got: BusMessage[] = [];
    const gaps: string[] = [];
    b!.bus.onMessage((_channel, message) => got.push(message));
    b!.bus.onGap((side) => gaps.push(side));
    await b!.bus.subscribe("ch");
    // The master serving the cluster's hash slot fails over to its replica.
    const { replica } = await syncedReplica(a!);
    const node = new Redis(`redis://${replica}`);
    try {
      await node.cluster("FAILOVER");
    } finally {
      node.disconnect();
    }
    await waitForClusterOk(nodes);
    await vi.waitFor(
      async () => {
        await a!.bus.publish("ch", update);
        expect(got.length).toBeGreaterThan(0);
      },
      { timeout: 15_000, interval: 200 },
    );
    expect(await a!.registry.count("b", "kept")).toBe(1);
    expect(await b!.registry.add({ principal: "p", sessionId: "s2", backendId: "b", uri: "new" }, limits)).toMatchObject({ status: "added" });
  });
});

describe("Redis engine on a Redis Cluster, its slot migrated", () => {
  it.skipIf(processes.size === 0)("keeps the counts exact through the move to another master, and delivers after it", async () => {
    const [a, b] = await members(2);
    const limits = { perSession: 1_000, perPrincipal: 1_000, total: 1_000 };
    const got: string[] = [];
    const gaps: string[] = [];
    b!.bus.onMessage((_channel, message) => {
      if (message.kind === "resource.updated") got.push(message.uri);
    });
    b!.bus.onGap((side) => gaps.push(side));
    await b!.bus.subscribe("ch");
    // Two hundred sessions' keys: the move takes a while (ten keys per MIGRATE, 20 ms apart).
    await Promise.all(Array.from({ length: 200 }, (_, i) => a!.registry.add({ principal: "p", sessionId: `s${i}`, backendId: "b", uri: `before${i}` }, limits)));
    const slot = Number(await a!.redis.cluster("KEYSLOT", a!.keys.total()));
    const before = await slotOwner(a!, slot);
    // Subscribes and unsubscribes go on while the slot moves (some may fail and be retried by clients; none may corrupt the counts).
    let moving = true;
    let n = 0;
    const writer = (async () => {
      while (moving) {
        const ref = { principal: "p", sessionId: `s${n % 5}`, backendId: "b", uri: `during${n}` };
        n++;
        await a!.registry.add(ref, limits).catch(() => undefined);
        if (n % 3 === 0) await a!.registry.remove(ref).catch(() => undefined);
      }
    })();
    await migrateSlot(slot);
    moving = false;
    await writer;
    expect(await slotOwner(a!, slot)).not.toBe(before);
    // Writes ran all along the move (the writer awaits each).
    expect(n).toBeGreaterThan(0);
    // The audit recounts from the sessions' holdings: nothing to repair means the counts stayed exact.
    expect((await a!.registry.audit()).repairs).toEqual([]);
    expect(await a!.registry.add({ principal: "p", sessionId: "after", backendId: "b", uri: "after" }, limits)).toMatchObject({ status: "added" });
    await vi.waitFor(
      async () => {
        await a!.bus.publish("ch", { ...update, uri: "after-move" });
        expect(got).toContain("after-move");
      },
      { timeout: 20_000, interval: 200 },
    );
    // What was published while the channels moved may be lost: the receiver heard of the gap.
    await vi.waitFor(() => expect(gaps).toContain("receive"), { timeout: 5_000 });
  });
});

describe("Redis engine on a Redis Cluster, its slot migrated unannounced", () => {
  it.skipIf(processes.size === 0)("follows the slot to its new master when the old master's SUNSUBSCRIBE never reached the subscriber", async () => {
    const [a] = await members(1);
    const seeds = nodes.map((node) => ({ host: node.slice(0, node.lastIndexOf(":")), port: Number(node.slice(node.lastIndexOf(":") + 1)) }));
    const publisher = new Cluster(seeds);
    const subscriber = new Cluster(seeds, { shardedSubscribers: true });
    publisher.on("error", () => undefined);
    subscriber.on("error", () => undefined);
    const bus = new RedisBus(publisher, subscriber, a!.keys, () => undefined);
    try {
      await Promise.all([publisher.ping(), subscriber.ping()]);
      // The client refreshes its slots on the old master's SUNSUBSCRIBE (or a MOVED answer to a
      // SSUBSCRIBE): without either, only the bus's own check of the slot's owner can notice.
      (subscriber as unknown as { subscriberGroupEmitter: EventEmitter }).subscriberGroupEmitter.removeAllListeners("moved");
      const got: string[] = [];
      const gaps: string[] = [];
      bus.onMessage((_channel, message) => {
        if (message.kind === "resource.updated") got.push(message.uri);
      });
      bus.onGap((side) => gaps.push(side));
      await bus.subscribe("ch");
      await a!.bus.publish("ch", { ...update, uri: "before-move" });
      await vi.waitFor(() => expect(got).toContain("before-move"), { timeout: 5_000 });
      const slot = Number(await a!.redis.cluster("KEYSLOT", a!.keys.total()));
      const before = await slotOwner(a!, slot);
      await migrateSlot(slot);
      expect(await slotOwner(a!, slot)).not.toBe(before);
      await vi.waitFor(
        async () => {
          await a!.bus.publish("ch", { ...update, uri: "after-move" });
          expect(got).toContain("after-move");
        },
        { timeout: 10_000, interval: 200 },
      );
      expect(gaps).toContain("receive");
    } finally {
      await bus.close();
      publisher.disconnect();
      subscriber.disconnect();
    }
  });
});

/** The `host:port` of the master that serves `slot` now. */
async function slotOwner(engine: RedisEngine, slot: number): Promise<string> {
  const ranges = (await engine.redis.cluster("SLOTS")) as unknown as [number, number, [string, number]][];
  const owner = ranges.find(([from, to]) => slot >= from && slot <= to)?.[2];
  return `${owner?.[0]}:${owner?.[1]}`;
}

/** Moves `slot` with its keys from the master that serves it to another master, as `redis-cli --cluster reshard` does. */
async function migrateSlot(slot: number): Promise<void> {
  const connect = (node: string) => new Redis(`redis://${node}`, { maxRetriesPerRequest: 0 });
  const probe = connect(nodes[0]!);
  let masters: { node: string; id: string; slots: number[] }[];
  try {
    const shards = (await probe.cluster("SHARDS")) as unknown[][];
    masters = shards.map((shard) => {
      const fields = new Map<string, unknown>();
      for (let i = 0; i + 1 < shard.length; i += 2) fields.set(String(shard[i]), shard[i + 1]);
      const master = (fields.get("nodes") as unknown[][])
        .map((entry) => {
          const info = new Map<string, unknown>();
          for (let i = 0; i + 1 < entry.length; i += 2) info.set(String(entry[i]), entry[i + 1]);
          return info;
        })
        .find((info) => info.get("role") === "master" && info.get("health") === "online");
      return { node: `${String(master?.get("ip"))}:${String(master?.get("port"))}`, id: String(master?.get("id")), slots: (fields.get("slots") as number[]).map(Number) };
    });
  } finally {
    probe.disconnect();
  }
  const serves = (m: { slots: number[] }) => m.slots.some((_, i) => i % 2 === 0 && slot >= m.slots[i]! && slot <= m.slots[i + 1]!);
  const source = masters.find(serves)!;
  const target = masters.find((m) => m !== source && m.slots.length > 0)!;
  const [from, to] = [connect(source.node), connect(target.node)];
  try {
    await to.cluster("SETSLOT", slot, "IMPORTING", source.id);
    await from.cluster("SETSLOT", slot, "MIGRATING", target.id);
    const [host, port] = target.node.split(":") as [string, string];
    for (;;) {
      const keys = (await from.cluster("GETKEYSINSLOT", slot, 10));
      if (keys.length === 0) break;
      await from.migrate(host, port, "", 0, 5_000, "KEYS", ...keys);
      // Slowly, so that the scripts run while the slot is split between the two.
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    for (const master of masters) {
      const node = connect(master.node);
      try {
        await node.cluster("SETSLOT", slot, "NODE", target.id);
      } finally {
        node.disconnect();
      }
    }
  } finally {
    from.disconnect();
    to.disconnect();
  }
  await waitForClusterOk(nodes);
}

describe("Redis engine on a Redis Cluster, a master killed", () => {
  it.skipIf(processes.size === 0)("announces the gaps on both sides once a replica took over, and delivers and holds state again", async () => {
    const [a, b] = await members(2);
    const limits = { perSession: 10, perPrincipal: 10, total: 10 };
    await a!.registry.add({ principal: "p", sessionId: "s", backendId: "b", uri: "kept" }, limits);
    const got: BusMessage[] = [];
    const gaps: string[] = [];
    b!.bus.onMessage((_channel, message) => got.push(message));
    b!.bus.onGap((side) => gaps.push(`b:${side}`));
    a!.bus.onGap((side) => gaps.push(`a:${side}`));
    await b!.bus.subscribe("ch");
    const { slot } = await syncedReplica(a!);
    // What was written is on the replica before its master dies (replication is asynchronous).
    await a!.redis.call("WAIT", 1, 2_000);
    const master = nodeOf((await a!.redis.cluster("SHARDS")) as unknown[], slot, "master") as string;
    await kill(master);
    await vi.waitFor(async () => expect(await a!.registry.count("b", "kept")).toBe(1), { timeout: 20_000, interval: 200 });
    await vi.waitFor(
      async () => {
        await a!.bus.publish("ch", update);
        expect(got.length).toBeGreaterThan(0);
      },
      { timeout: 20_000, interval: 200 },
    );
    // The publisher heard that a node left, and that publishes go through again; the subscriber
    // (sharded: on the master that died) that it is subscribed again on the new master.
    await vi.waitFor(() => expect(gaps).toEqual(expect.arrayContaining(["a:publish-lost", "a:publish", "b:receive"])), { timeout: 10_000 });
    expect(await b!.registry.add({ principal: "p", sessionId: "s2", backendId: "b", uri: "new" }, limits)).toMatchObject({ status: "added" });
  });
});

const update: ResourceUpdatedMessage = { kind: "resource.updated", v: 1, origin: "t", backendId: "b", key: "u", uri: "u", at: 1, update: 1, keys: 1, position: 1 };

/** The cluster's hash slot, and a replica of its shard ready to take over (synced with its master). */
async function syncedReplica(engine: RedisEngine): Promise<{ slot: number; replica: string }> {
  const slot = Number(await engine.redis.cluster("KEYSLOT", engine.keys.total()));
  let replica: string | undefined;
  await vi.waitFor(
    async () => {
      replica = nodeOf((await engine.redis.cluster("SHARDS")) as unknown[], slot, "replica");
      expect(replica).toBeDefined();
    },
    { timeout: 20_000, interval: 200 },
  );
  return { slot, replica: replica as string };
}

/** The `host:port` of an online node in `role` of the shard that serves `slot`, from CLUSTER SHARDS. */
function nodeOf(shards: unknown[], slot: number, role: "master" | "replica"): string | undefined {
  for (const shard of shards as unknown[][]) {
    const fields = new Map<string, unknown>();
    for (let i = 0; i + 1 < shard.length; i += 2) fields.set(String(shard[i]), shard[i + 1]);
    const ranges = fields.get("slots") as number[];
    let serves = false;
    for (let i = 0; i + 1 < ranges.length; i += 2) if (slot >= Number(ranges[i]) && slot <= Number(ranges[i + 1])) serves = true;
    if (!serves) continue;
    for (const node of fields.get("nodes") as unknown[][]) {
      const info = new Map<string, unknown>();
      for (let i = 0; i + 1 < node.length; i += 2) info.set(String(node[i]), node[i + 1]);
      if (info.get("role") === role && info.get("health") === "online") return `${String(info.get("ip"))}:${String(info.get("port"))}`;
    }
  }
  return undefined;
}

