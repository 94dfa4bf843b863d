import { spawn } from "node:child_process";
import { createServer, connect, type Socket } from "node:net";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Client } from "@modelcontextprotocol/client";
import { Cluster, Redis } from "ioredis";
import { within } from "@mcp-broker/shared";
import { deleteClusterKeys, deleteKeys, testRedisCluster, testRedisUrl, uniquePrefix } from "@mcp-broker/shared/testing";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, type LegacyHttpBackend } from "../fixtures/http-backends.js";
import { createTestServer, type TestServer } from "../fixtures/test-server.js";
import { collectUpdates, connectClient, eventually, startBroker, type Era, type RunningBroker } from "../helpers/harness.js";
import { configFileEnv } from "../fixtures/cli-env.js";

const BROKER_DIR = resolve(import.meta.dirname, "../..");
const CLI = join(BROKER_DIR, "src/cli.ts");
const WORKER = join(BROKER_DIR, "../worker/src/main.ts");
const URI = "test://static/a";
const EXPOSED = `leg+${URI}`;

/**
 * Two broker instances on the Redis engine (one Redis, one key prefix) in front of one HTTP
 * backend: the cluster guarantees, end to end, with real Redis pub/sub and Lua. The same on a Redis
 * Cluster (three masters, started by the tests), except what breaks one Redis's connections by hand.
 */
describe.each([
  { on: "one Redis", cluster: false },
  { on: "a Redis Cluster", cluster: true },
])("cluster on the Redis engine ($on): two broker instances", ({ cluster: onCluster }) => {
  let redisUrl: string;
  let clusterNodes: string[] = [];
  let prefix: string;
  /** Tests that break one Redis's connections by hand (a proxy, CLIENT KILL) run on one Redis only. */
  const oneRedisOnly = it.skipIf(onCluster);
  /** A connection to where the cluster's state is, and the name of one of its keys there. */
  const state = () => (onCluster ? new Cluster(clusterNodes.map((node) => ({ host: "127.0.0.1", port: Number(node.split(":")[1]) }))) : new Redis(redisUrl));
  const key = (name: string) => (onCluster ? `{${prefix}}${name}` : `${prefix}${name}`);
  let server: TestServer;
  let backend: LegacyHttpBackend;
  let brokers: RunningBroker[] = [];
  let clients: Client[] = [];

  const config = (limits: { maxPerPrincipal?: number } = {}) => ({
    backends: [{ id: "leg", url: backend.url, era: "legacy" as const, reconnect: { initialDelayMs: 50, maxDelayMs: 200 }, healthIntervalMs: 200 }],
    subscriptions: { releaseGraceMs: 0, ...limits },
    ...(onCluster ? {} : { redisUrl }),
    redis: { keyPrefix: prefix, leaseTtlMs: 1_000, instanceTtlMs: 2_000, watcherTimeoutMs: 3_000, ...(onCluster && { cluster: clusterNodes }) },
  });

  /** A fresh backend (its stats count this test only) and key prefix. */
  async function freshBackend(): Promise<void> {
    prefix = uniquePrefix("cluster");
    server = createTestServer({ name: "shared-backend" });
    backend = await startLegacyHttpBackend(server);
  }

  /** A fresh backend and two brokers in front of it. */
  async function cluster(limits: { maxPerPrincipal?: number } = {}): Promise<[RunningBroker, RunningBroker]> {
    await freshBackend();
    const a = await startBroker(config(limits));
    const b = await startBroker(config(limits));
    brokers.push(a, b);
    await eventually(() => a.broker.watchers.holds("leg") !== b.broker.watchers.holds("leg"), "one watcher for the backend");
    return [a, b];
  }

  /** A fresh backend and one broker that reaches Redis through a proxy the test can break. */
  async function brokerBehindProxy(instanceTtlMs: number): Promise<{ proxy: Awaited<ReturnType<typeof redisProxy>>; running: RunningBroker }> {
    await freshBackend();
    const proxy = await redisProxy(redisUrl);
    const running = await startBroker({ ...config(), redisUrl: proxy.url, redis: { keyPrefix: prefix, leaseTtlMs: 60_000, instanceTtlMs, watcherTimeoutMs: 3_000 } });
    brokers.push(running);
    return { proxy, running };
  }

  async function client(running: RunningBroker, era: Era): Promise<Client> {
    const c = await connectClient(running.url, era);
    clients.push(c);
    return c;
  }

  beforeAll(async () => {
    redisUrl = await testRedisUrl();
    if (onCluster) clusterNodes = (await testRedisCluster()).nodes;
  });

  afterEach(async () => {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
    await Promise.all(brokers.map((b) => b.close().catch(() => undefined)));
    await backend.close();
    await (onCluster ? deleteClusterKeys(clusterNodes, prefix) : deleteKeys(redisUrl, prefix));
    clients = [];
    brokers = [];
  });

  it("delivers an update to subscribers on both instances, through one upstream subscription, and to nobody else", async () => {
    const [a, b] = await cluster();
    const onA = await client(a, "legacy");
    const onB = await client(b, "legacy");
    const modernOnB = await client(b, "modern");
    const bystander = await client(b, "legacy");
    const [gotA, gotB, gotModern, gotBystander] = [collectUpdates(onA), collectUpdates(onB), collectUpdates(modernOnB), collectUpdates(bystander)];
    await onA.subscribeResource({ uri: EXPOSED });
    await onB.subscribeResource({ uri: EXPOSED });
    await modernOnB.listen({ resourceSubscriptions: [EXPOSED] });
    await bystander.subscribeResource({ uri: "leg+test://static/b" });
    expect(server.stats.subscribeCount(URI)).toBe(1);
    expect(server.stats.activeSubscriptions.get(URI)).toBe(1);

    server.emitUpdate(URI);
    await eventually(() => gotA.length === 1 && gotB.length === 1 && gotModern.length === 1, "the update on both instances");
    expect([gotA, gotB, gotModern]).toEqual([[EXPOSED], [EXPOSED], [EXPOSED]]);
    // Barriers instead of waiting: a second update arrives after any copy of the first would have
    // (one channel keeps its order), and the bystander's own update after anything sent to it before.
    server.emitUpdate(URI);
    server.emitUpdate("test://static/b");
    await eventually(() => gotA.length >= 2 && gotB.length >= 2 && gotModern.length >= 2 && gotBystander.length >= 1, "the barrier updates");
    expect([gotA.length, gotB.length, gotModern.length]).toEqual([2, 2, 2]);
    expect(gotBystander).toEqual(["leg+test://static/b"]);
    const readyz = await Promise.all([a, b].map(async (r) => (await fetch(new URL("/readyz", r.url))).json() as Promise<unknown>));
    expect(readyz.map((r) => (r as { engine: string }).engine)).toEqual(["redis", "redis"]);
    const watching = readyz.map((r) => (r as { backends: { watching: boolean }[] }).backends[0]?.watching);
    expect(watching.sort()).toEqual([false, true]);
  });

  it("releases what a listen stream held when it closes, in the cluster's counts too, and what its legacy neighbour holds stays", async () => {
    const [a, b] = await cluster();
    const legacy = await client(b, "legacy");
    await legacy.subscribeResource({ uri: EXPOSED });
    const modern = await client(a, "modern");
    const listen = await modern.listen({ resourceSubscriptions: [EXPOSED, "leg+test://static/b", "leg+test://items/l1", "leg+test://items/l2"] });
    const redis = state();
    try {
      expect(Number(await redis.get(key("sub-count:total")))).toBe(5);
      await listen.close();
      await eventually(async () => Number(await redis.get(key("sub-count:total"))) === 1, "the listen's four released");
      expect(await redis.hgetall(key("refs:leg"))).toEqual({ [URI]: "1" });
      expect(await redis.hgetall(key("sub-count:principal"))).toEqual({ anonymous: "1" });
      await eventually(() => server.stats.activeSubscriptions.size === 1, "the upstream releases of what nobody else holds");
      expect([...server.stats.activeSubscriptions.keys()]).toEqual([URI]);
    } finally {
      redis.disconnect();
    }
  });

  it("releases the upstream subscription once, when the last subscriber on any instance leaves", async () => {
    const [a, b] = await cluster();
    const watcher = a.broker.watchers.holds("leg") ? a : b;
    const other = watcher === a ? b : a;
    const onWatcher = await client(watcher, "legacy");
    const onOther = await client(other, "legacy");
    const gotOther = collectUpdates(onOther);
    await onWatcher.subscribeResource({ uri: EXPOSED });
    await onOther.subscribeResource({ uri: EXPOSED });
    await onWatcher.unsubscribeResource({ uri: EXPOSED });
    // Not the last one: the upstream subscription stays, as an update still arriving shows.
    server.emitUpdate(URI);
    await eventually(() => gotOther.length === 1, "an update after the first unsubscribe");
    expect(server.stats.activeSubscriptions.get(URI)).toBe(1);
    // The last one leaves on the instance that does not watch: its release travels to the watcher.
    await onOther.unsubscribeResource({ uri: EXPOSED });
    await eventually(() => server.stats.activeSubscriptions.get(URI) === undefined, "the upstream unsubscribe");
    expect(server.stats.unsubscribeCount(URI)).toBe(1);
    expect(watcher.broker.watchers.holds("leg")).toBe(true);
    expect(watcher.broker.upstream.watched("leg")).toEqual([]);
  });

  it("holds the per-principal limit exactly across instances", async () => {
    const [a, b] = await cluster({ maxPerPrincipal: 3 });
    const sessions = await Promise.all([client(a, "legacy"), client(b, "legacy"), client(a, "legacy"), client(b, "legacy")]);
    const outcomes = await Promise.allSettled(sessions.flatMap((c, i) => [0, 1].map((j) => c.subscribeResource({ uri: `leg+test://items/${i}-${j}` }))));
    expect(outcomes.filter((o) => o.status === "fulfilled")).toHaveLength(3);
    const refused = outcomes.filter((o): o is PromiseRejectedResult => o.status === "rejected");
    expect(refused).toHaveLength(5);
    for (const r of refused) expect(r.reason).toMatchObject({ code: -32010 });
  });

  it("hands the backend to the other instance when the watcher stops, which re-subscribes what is wanted", async () => {
    const [a, b] = await cluster();
    const watcher = a.broker.watchers.holds("leg") ? a : b;
    const survivor = watcher === a ? b : a;
    const c = await client(survivor, "legacy");
    const got = collectUpdates(c);
    await c.subscribeResource({ uri: EXPOSED });
    const subscribes = server.stats.subscribeCount(URI);
    await watcher.close();
    await eventually(() => survivor.broker.watchers.holds("leg"), "the takeover", 5_000);
    await eventually(() => server.stats.subscribeCount(URI) === subscribes + 1, "the re-subscribe by the new watcher");
    // Updates may have been missed during the handover: the new watcher counts it as updated once.
    await eventually(() => got.length === 1, "the conservative update after the takeover");
    server.emitUpdate(URI);
    await eventually(() => got.length === 2, "an update through the new watcher");
    expect(server.stats.activeSubscriptions.get(URI)).toBe(1);
  });

  it("hands its legacy sessions to the cluster when it stops gracefully, releases its listen streams' at once, and the sessions' once nobody adopted them in time", async () => {
    await freshBackend();
    const shortLived = { ...config(), server: { sessionIdleMs: 1_500 } };
    const [a, b] = [await startBroker(shortLived), await startBroker(shortLived)];
    brokers.push(a, b);
    await eventually(() => a.broker.watchers.holds("leg") !== b.broker.watchers.holds("leg"), "one watcher for the backend");
    const watcher = a.broker.watchers.holds("leg") ? a : b;
    const leaving = watcher === a ? b : a;
    const c = await client(leaving, "legacy");
    await c.subscribeResource({ uri: EXPOSED });
    await c.subscribeResource({ uri: "leg+test://static/b" });
    const modern = await client(leaving, "modern");
    await modern.listen({ resourceSubscriptions: ["leg+test://items/listen"] });
    await leaving.close();
    const redis = state();
    try {
      // The listen stream's are gone; the session's wait for it to be adopted.
      expect((await redis.hkeys(key("refs:leg"))).sort()).toEqual([URI, "test://static/b"]);
      // Nobody comes back for it: once its record expires, the reap job releases what it held.
      await eventually(async () => (await redis.hlen(key("refs:leg"))) === 0, "the expired session's release", 15_000).catch(async (error: Error) => {
        // Failed rarely in CI (not reproduced since): where the session's record and its orphan entry stood.
        const record = key(`session:anonymous:${encodeURIComponent((c.transport as { sessionId?: string } | undefined)?.sessionId ?? "")}`);
        const state = { orphans: await redis.zrange(key("orphans"), "0", "-1", "WITHSCORES"), now: Date.now(), record: { ttl: await redis.pttl(record), fields: await redis.hgetall(record) } };
        throw new Error(`${error.message}; ${JSON.stringify(state)}`);
      });
    } finally {
      redis.disconnect();
    }
    await eventually(() => server.stats.activeSubscriptions.size === 0, "the watcher's upstream unsubscribes");
    expect(watcher.broker.upstream.watched("leg")).toEqual([]);
  });

  oneRedisOnly("answers a subscribe once its instance listens on the bus: an update made right after the answer reaches the session", async () => {
    await freshBackend();
    const watcher = await startBroker(config());
    brokers.push(watcher);
    await eventually(() => watcher.broker.watchers.holds("leg"), "the watcher");
    // The other instance's pub/sub connection reaches Redis slowly: its SUBSCRIBE lands 300 ms after it is sent.
    const proxy = await redisProxy(redisUrl, { latency: { ms: 300, connection: ":subscriber" } });
    const slow = await startBroker({ ...config(), redisUrl: proxy.url });
    try {
      const c = await client(slow, "legacy");
      const got = collectUpdates(c);
      await c.subscribeResource({ uri: EXPOSED });
      server.emitUpdate(URI);
      await eventually(() => got.length === 1, "the update made right after the answer", 5_000);
      const modern = await client(slow, "modern");
      const heard = collectUpdates(modern);
      await modern.listen({ resourceSubscriptions: ["leg+test://static/b"] });
      server.emitUpdate("test://static/b");
      await eventually(() => heard.length === 1, "the update made right after the acknowledgement", 5_000);
    } finally {
      // Closed while it still reaches Redis: a stop cut off from Redis waits out its timeouts.
      await Promise.all(clients.splice(0).map((c) => c.close().catch(() => undefined)));
      await slow.close();
      proxy.close();
    }
  }, 30_000);

  oneRedisOnly("re-announces subscribed resources after Redis connections drop (pub/sub keeps nothing)", async () => {
    const [a, b] = await cluster();
    const watcher = a.broker.watchers.holds("leg") ? a : b;
    const other = watcher === a ? b : a;
    const onOther = await client(other, "legacy");
    const got = collectUpdates(onOther);
    await onOther.subscribeResource({ uri: EXPOSED });
    const redis = new Redis(redisUrl);
    const kill = async (running: RunningBroker, role: "subscriber" | "commands") => {
      const { instance } = (await (await fetch(new URL("/readyz", running.url))).json()) as { instance: string };
      const line = String(await redis.client("LIST")).split("\n").find((l) => l.includes(`name=mcp-broker:${instance}:${role} `));
      await redis.client("KILL", "ID", /id=(\d+)/.exec(line ?? "")?.[1] as string);
    };
    try {
      // The receiving instance lost messages: it re-announces to its own subscribers.
      await kill(other, "subscriber");
      await eventually(() => got.length === 1, "the re-announcement after the subscriber connection came back");
      // The watcher's publishes may have failed: it re-publishes every watched URI, for everyone.
      await kill(watcher, "commands");
      await eventually(() => got.length === 2, "the re-publication after the watcher's connection came back");
      expect(got).toEqual([EXPOSED, EXPOSED]);
      server.emitUpdate(URI);
      await eventually(() => got.length === 3, "updates as before");
    } finally {
      redis.disconnect();
    }
  });

  it("answers a subscribe on a backend no instance reaches with -32000", async () => {
    const [a] = await cluster();
    await backend.close();
    await eventually(() => brokers.every((r) => r.broker.pool.get("leg").state !== "connected"), "both instances to see the backend down");
    await eventually(() => brokers.every((r) => !r.broker.watchers.holds("leg")), "both to give up the watcher lease");
    const c = await client(a, "legacy");
    await expect(c.subscribeResource({ uri: EXPOSED })).rejects.toMatchObject({ code: -32000 });
  });

  it("recovers from an instance killed outright: the other takes over the backend, and releases what the dead one's sessions held once nobody adopted them in time", async () => {
    await freshBackend();
    const dir = await mkdtemp(join(tmpdir(), "broker-cluster-"));
    const configFile = join(dir, "broker.json");
    const shortLived = { ...config(), server: { sessionIdleMs: 1_500 } };
    await writeFile(configFile, JSON.stringify({ ...shortLived, logging: { level: "warn" } }));
    const child = spawn(process.execPath, ["--import", "tsx", CLI, "--config", configFile, "--port", "0"], { cwd: BROKER_DIR, env: configFileEnv(), stdio: ["ignore", "ignore", "pipe"] });
    try {
      // The process starts first, so it watches the backend.
      const doomedUrl = await new Promise<string>((done, fail) => {
        let stderr = "";
        child.stderr.on("data", (chunk: Buffer) => {
          stderr += chunk.toString("utf8");
          const ready = /mcp-broker ready: (\S+)/.exec(stderr);
          if (ready?.[1] !== undefined) done(ready[1]);
        });
        child.once("exit", (code) => fail(new Error(`broker exited with ${code}: ${stderr}`)));
      });
      const survivor = await startBroker(shortLived);
      brokers.push(survivor);
      expect(survivor.broker.watchers.holds("leg")).toBe(false);
      const onDoomed = await client({ url: doomedUrl } as RunningBroker, "legacy");
      await onDoomed.subscribeResource({ uri: EXPOSED });
      const onSurvivor = await client(survivor, "legacy");
      const got = collectUpdates(onSurvivor);
      await onSurvivor.subscribeResource({ uri: "leg+test://static/b" });

      child.kill("SIGKILL");
      await eventually(() => survivor.broker.watchers.holds("leg"), "the takeover after the lease expired", 5_000);
      // What the dead instance's session held stays wanted while the session waits to be adopted
      // (server.sessionIdleMs after its instance was found dead): watched, then released.
      await eventually(() => server.stats.subscribeCount(URI) === 2, "the new watcher to subscribe what is wanted", 5_000);
      await eventually(() => server.stats.unsubscribeCount(URI) === 1, "the release once the orphaned session expired", 15_000);
      expect(survivor.broker.upstream.watched("leg")).toEqual(["test://static/b"]);
      got.length = 0;
      server.emitUpdate("test://static/b");
      await eventually(() => got.length === 1, "updates through the new watcher");
    } finally {
      child.kill("SIGKILL");
      await rm(dir, { recursive: true, force: true });
    }
  }, 30_000);

  it("tells an instance that stalled past the TTL and was reaped meanwhile (SIGSTOP): it hands its sessions to the cluster, which kept what they hold, and ends its listen streams", async () => {
    await freshBackend();
    const dir = await mkdtemp(join(tmpdir(), "broker-stall-"));
    const configFile = join(dir, "broker.json");
    await writeFile(configFile, JSON.stringify({ ...config(), logging: { level: "warn" } }));
    const child = spawn(process.execPath, ["--import", "tsx", CLI, "--config", configFile, "--port", "0"], { cwd: BROKER_DIR, env: configFileEnv(), stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
    const redis = state();
    try {
      await eventually(() => /mcp-broker ready: (\S+)/.test(stderr), "the broker to start", 20_000);
      const url = /mcp-broker ready: (\S+)/.exec(stderr)?.[1] as string;
      const { instance } = (await (await fetch(new URL("/readyz", url))).json()) as { instance: string };
      const survivor = await startBroker(config());
      brokers.push(survivor);
      const c = await connectClient(url, "legacy");
      clients.push(c);
      const got = collectUpdates(c);
      await c.subscribeResource({ uri: EXPOSED });
      const modern = await connectClient(url, "modern");
      clients.push(modern);
      const listen = await modern.listen({ resourceSubscriptions: ["leg+test://items/stalled"] });

      child.kill("SIGSTOP");
      await eventually(async () => (await redis.exists(key(`instance-reaped:${instance}`))) === 1, "the survivor to reap the stalled instance", 10_000);
      // The session waits for an adopter, holding what it held; the listen stream's go (the reap's next step after its claim).
      await eventually(async () => JSON.stringify(await redis.hkeys(key("refs:leg"))) === JSON.stringify([URI]), "the reap to release the listen stream's");
      child.kill("SIGCONT");
      await eventually(async () => (await redis.exists(key(`instance-reaped:${instance}`))) === 0, "the instance's heartbeat to read the mark", 10_000);
      expect(await listen.closed).not.toBe("local");
      await eventually(() => stderr.includes("presumed dead"), "the instance to say so");
      // The client comes back for its session (its stream ended with a retry) and is served again,
      // by whichever member adopts it, with what it held.
      await eventually(
        async () => {
          server.emitUpdate(URI);
          await new Promise((r) => setTimeout(r, 100));
          return got.length >= 1;
        },
        "an update to the session after it was adopted",
        15_000,
      );
      await c.ping();
    } finally {
      redis.disconnect();
      child.kill("SIGCONT");
      child.kill("SIGKILL");
      await rm(dir, { recursive: true, force: true });
    }
  }, 40_000);

  it("lets a worker (a member without an endpoint) watch the backend for the brokers", async () => {
    await freshBackend();
    const dir = await mkdtemp(join(tmpdir(), "broker-worker-"));
    const configFile = join(dir, "worker.json");
    await writeFile(configFile, JSON.stringify({ ...config(), logging: { level: "warn" } }));
    const worker = spawn(process.execPath, ["--import", "tsx", WORKER, "--config", configFile, "--port", "0"], { cwd: BROKER_DIR, env: configFileEnv(), stdio: ["ignore", "ignore", "pipe"] });
    try {
      let stderr = "";
      worker.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
      await eventually(() => stderr.includes("mcp-broker-worker running"), "the worker to start", 20_000);
      const redis = state();
      try {
        await eventually(async () => (await redis.get(key("lease:watcher:leg"))) !== null, "the worker to take the watcher lease", 5_000);
      } finally {
        redis.disconnect();
      }
      const broker = await startBroker(config());
      brokers.push(broker);
      expect(broker.broker.watchers.holds("leg")).toBe(false);
      const c = await client(broker, "legacy");
      const got = collectUpdates(c);
      await c.subscribeResource({ uri: EXPOSED });
      expect(server.stats.subscribeCount(URI)).toBe(1);
      expect(broker.broker.upstream.watched("leg")).toEqual([]);
      server.emitUpdate(URI);
      await eventually(() => got.length === 1, "the update, through the worker");
      // A graceful stop hands the backend over at once.
      worker.kill("SIGTERM");
      await eventually(() => broker.broker.watchers.holds("leg"), "the broker to take over from the stopped worker", 5_000);
      await eventually(() => server.stats.subscribeCount(URI) === 2, "the broker to re-subscribe");
    } finally {
      worker.kill("SIGKILL");
      await rm(dir, { recursive: true, force: true });
    }
  }, 40_000);

  oneRedisOnly("answers -32004 while Redis is unreachable, keeps serving calls, and catches up when it is back", async () => {
    const { proxy, running } = await brokerBehindProxy(10_000);
    try {
      const c = await client(running, "legacy");
      const got = collectUpdates(c);
      await c.subscribeResource({ uri: EXPOSED });
      const modern = await client(running, "modern");
      const listen = await modern.listen({ resourceSubscriptions: ["leg+test://items/cut"] });
      proxy.cut();
      // A stream that ends while Redis is away cannot release now: it is released once Redis is back.
      await listen.close();
      const started = Date.now();
      await expect(c.subscribeResource({ uri: "leg+test://static/b" })).rejects.toMatchObject({ code: -32004 });
      expect(Date.now() - started).toBeLessThan(15_000);
      // Calls do not need Redis; updates of what is watched still reach this instance's sessions.
      expect(await c.callTool({ name: "leg__echo", arguments: { text: "hi" } })).toBeDefined();
      server.emitUpdate(URI);
      await eventually(() => got.length === 1, "a local update while Redis is away");
      proxy.restore();
      // Back: what may have been missed on the bus is re-announced, and subscribing works again.
      await eventually(() => got.length >= 2, "the re-announcement after Redis came back", 15_000);
      const redis = new Redis(redisUrl);
      try {
        await eventually(async () => (await redis.hget(`${prefix}refs:leg`, "test://items/cut")) === null, "the failed release to be retried", 10_000);
      } finally {
        redis.disconnect();
      }
      await eventually(
        async () =>
          c.subscribeResource({ uri: "leg+test://static/b" }).then(
            () => true,
            () => false,
          ),
        "a subscribe once Redis is back",
        15_000,
      );
    } finally {
      proxy.close();
    }
  }, 60_000);

  oneRedisOnly("stops without waiting for a Redis that is down or hangs, and leaves its sessions in Redis for the cluster (not ended)", async () => {
    for (const how of ["down", "hangs"] as const) {
      const { proxy, running } = await brokerBehindProxy(60_000);
      const c = await client(running, "legacy");
      await c.subscribeResource({ uri: EXPOSED });
      const sessionId = (c.transport as { sessionId?: string }).sessionId ?? "";
      if (how === "down") proxy.cut();
      else proxy.stall();
      // Before: 27 s with Redis down (each step waited out its command timeout), forever when it hung (an unanswered QUIT).
      expect(await within(running.close().then(() => true), 20_000, false), `the stop with Redis ${how}`).toBe(true);
      proxy.close();
      // Its session was neither ended nor released: the cluster's reap hands it over once the member's heartbeat lapses.
      const redis = state();
      try {
        expect(await redis.hget(key(`session:anonymous:${sessionId}`), "owner")).not.toBeNull();
        expect(await redis.hkeys(key("refs:leg"))).toContain(URI);
      } finally {
        redis.disconnect();
      }
      clients.splice(0).forEach((each) => void each.close().catch(() => undefined));
    }
  }, 60_000);

  oneRedisOnly("notices Redis connections that went silent (no error, no close), reconnects them and catches up", async () => {
    const { proxy, running } = await brokerBehindProxy(60_000);
    try {
      const other = await startBroker(config());
      brokers.push(other);
      // A session on the other instance hears updates only through the bus.
      const c = await client(running.broker.watchers.holds("leg") ? other : running, "legacy");
      const got = collectUpdates(c);
      await c.subscribeResource({ uri: EXPOSED });
      proxy.freeze();
      // The pings go unanswered, the connections are replaced, and the gap is made up for.
      await eventually(() => got.length >= 1, "the re-announcement after the silent connections were replaced", 20_000);
      const before = got.length;
      server.emitUpdate(URI);
      await eventually(() => got.length > before, "updates through the new connections", 10_000);
    } finally {
      proxy.close();
    }
  }, 60_000);
});

/**
 * A TCP proxy to Redis that can cut every connection and refuse new ones (Redis away), then let
 * them through again, or freeze the open ones: they stay open and carry nothing (a connection a
 * NAT dropped silently), while new ones pass; or stall all of them, new ones too (Redis hangs). With `latency`, what one kind of connection sends is delayed.
 */
async function redisProxy(target: string, options: { latency?: { ms: number; connection: string } } = {}): Promise<{ url: string; cut(): void; restore(): void; freeze(): void; stall(): void; close(): void }> {
  const { hostname, port } = new URL(target);
  const sockets = new Set<Socket>();
  const pairs: [Socket, Socket][] = [];
  let refusing = false;
  let stalled = false;
  const proxy = createServer((inbound) => {
    if (refusing) {
      inbound.destroy();
      return;
    }
    if (stalled) {
      // Accepted and never answered, as by a Redis that stopped (SIGSTOP) or hangs.
      sockets.add(inbound);
      inbound.on("close", () => sockets.delete(inbound));
      inbound.on("error", () => undefined);
      inbound.pause();
      return;
    }
    const outbound = connect(Number(port), hostname);
    for (const socket of [inbound, outbound]) {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
      socket.on("error", () => undefined);
    }
    const latency = options.latency;
    if (latency === undefined) {
      inbound.pipe(outbound).pipe(inbound);
      pairs.push([inbound, outbound]);
    } else {
      // What a connection whose name (its first command, CLIENT SETNAME) contains `latency.connection`
      // sends reaches Redis that much later, in order; the others pass at once. No freeze then.
      let delayed: boolean | undefined;
      inbound.on("data", (chunk: Buffer) => {
        delayed ??= chunk.toString("latin1").includes(latency.connection);
        if (delayed) setTimeout(() => outbound.write(chunk), latency.ms);
        else outbound.write(chunk);
      });
      outbound.pipe(inbound);
    }
    inbound.on("close", () => outbound.destroy());
    outbound.on("close", () => inbound.destroy());
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  const { port: local } = proxy.address() as { port: number };
  return {
    url: `redis://127.0.0.1:${local}`,
    cut: () => {
      refusing = true;
      for (const socket of sockets) socket.destroy();
    },
    restore: () => {
      refusing = false;
    },
    freeze: () => {
      for (const [inbound, outbound] of pairs.splice(0)) {
        inbound.unpipe(outbound);
        outbound.unpipe(inbound);
        inbound.pause();
        outbound.pause();
      }
    },
    /** Every connection, open or new, carries nothing from now on: a Redis that hangs. */
    stall: () => {
      stalled = true;
      for (const [inbound, outbound] of pairs.splice(0)) {
        inbound.unpipe(outbound);
        outbound.unpipe(inbound);
        inbound.pause();
        outbound.pause();
      }
    },
    close: () => {
      refusing = true;
      for (const socket of sockets) socket.destroy();
      proxy.close();
    },
  };
}
