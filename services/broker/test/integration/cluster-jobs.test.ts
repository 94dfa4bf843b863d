import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Client } from "@modelcontextprotocol/client";
import { createRedisEngine } from "@mcp-broker/shared/node";
import { deleteKeys, testRedisUrl, uniquePrefix } from "@mcp-broker/shared/testing";
import { Redis } from "ioredis";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, type LegacyHttpBackend } from "../fixtures/http-backends.js";
import { createTestServer, type TestServer } from "../fixtures/test-server.js";
import { collectUpdates, connectClient, eventually, post, startBroker, type RunningBroker } from "../helpers/harness.js";
import { openSse } from "../helpers/raw-http.js";
import { configFileEnv } from "../fixtures/cli-env.js";

const BROKER_DIR = resolve(import.meta.dirname, "../..");
const WORKER = join(BROKER_DIR, "../worker/src/main.ts");

/**
 * The cluster's jobs with real brokers, real workers and a real Redis: one list reload per change
 * for the whole cluster, the stored catalog, the reap, audit and limits jobs.
 */
describe("cluster jobs on the Redis engine", () => {
  let redisUrl: string;
  let prefix: string;
  let server: TestServer;
  let backend: LegacyHttpBackend;
  let brokers: RunningBroker[] = [];
  let clients: Client[] = [];
  let children: ChildProcess[] = [];
  let dirs: string[] = [];

  type Overrides = { subscriptions?: Record<string, number>; jobs?: Record<string, number | boolean> };
  const config = (overrides: Overrides = {}) => ({
    backends: [{ id: "leg", url: backend.url, era: "legacy" as const, reconnect: { initialDelayMs: 50, maxDelayMs: 200 }, healthIntervalMs: 200 }],
    subscriptions: { releaseGraceMs: 0, ...overrides.subscriptions },
    lists: { debounceMs: 200 },
    jobs: { lockMs: 1_000, backoffMs: 100, ...overrides.jobs },
    redisUrl,
    redis: { keyPrefix: prefix, leaseTtlMs: 1_000, instanceTtlMs: 2_000, watcherTimeoutMs: 3_000 },
  });

  async function broker(overrides: Overrides = {}): Promise<RunningBroker> {
    const running = await startBroker(config(overrides));
    brokers.push(running);
    return running;
  }

  async function client(running: RunningBroker): Promise<Client> {
    const c = await connectClient(running.url, "legacy");
    clients.push(c);
    return c;
  }

  /** A worker process (the real entry point) on the same config. */
  async function worker(overrides: Overrides = {}): Promise<ChildProcess> {
    const dir = await mkdtemp(join(tmpdir(), "cluster-jobs-"));
    dirs.push(dir);
    const file = join(dir, "worker.json");
    await writeFile(file, JSON.stringify({ ...config(overrides), logging: { level: "warn" } }));
    const child = spawn(process.execPath, ["--import", "tsx", WORKER, "--config", file, "--port", "0"], { cwd: BROKER_DIR, env: configFileEnv(), stdio: ["ignore", "ignore", "pipe"] });
    children.push(child);
    let stderr = "";
    child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
    await eventually(() => stderr.includes("mcp-broker-worker running"), "the worker to start", 20_000);
    return child;
  }

  /** Waits until no job is waiting, delayed or running in the cluster. */
  async function jobsIdle(running: RunningBroker): Promise<void> {
    await eventually(async () => (await running.broker.jobs.pending()).length === 0, "the cluster's jobs to finish", 15_000);
  }

  function listChanges(c: Client): { count: number } {
    const seen = { count: 0 };
    c.setNotificationHandler("notifications/tools/list_changed", () => {
      seen.count++;
    });
    return seen;
  }

  const toolNames = async (c: Client) => (await c.listTools()).tools.map((t) => t.name).sort();

  beforeAll(async () => {
    redisUrl = await testRedisUrl();
  });

  async function freshBackend(): Promise<void> {
    prefix = uniquePrefix("jobs");
    server = createTestServer({ name: "shared-backend" });
    backend = await startLegacyHttpBackend(server);
  }

  afterEach(async () => {
    for (const child of children) child.kill("SIGKILL");
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
    await Promise.all(brokers.map((b) => b.close().catch(() => undefined)));
    await backend.close();
    await deleteKeys(redisUrl, prefix);
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
    clients = [];
    brokers = [];
    children = [];
    dirs = [];
  });

  it("reloads a backend's list once per burst for the whole cluster; each session hears of it once", async () => {
    await freshBackend();
    const [a, b] = [await broker(), await broker()];
    const [onA, onB] = [await client(a), await client(b)];
    const [heardA, heardB] = [listChanges(onA), listChanges(onB)];
    await jobsIdle(a);
    const before = backend.requests("tools/list");

    server.addTool("fresh"); // one list_changed on each broker's connection
    for (let i = 0; i < 50; i++) server.emitListChanged("tools");
    await eventually(() => heardA.count === 1 && heardB.count === 1, "list_changed on both instances");
    await jobsIdle(a);
    expect(backend.requests("tools/list") - before).toBeGreaterThanOrEqual(1);
    expect(backend.requests("tools/list") - before).toBeLessThanOrEqual(2);
    expect(await toolNames(onA)).toContain("leg__fresh");
    expect(await toolNames(onB)).toContain("leg__fresh");
    expect([heardA.count, heardB.count]).toEqual([1, 1]);

    // A member that starts after the change serves the new list from the cluster catalog, without listing.
    const listed = backend.requests("tools/list");
    const late = await broker();
    expect(await toolNames(await client(late))).toContain("leg__fresh");
    expect(backend.requests("tools/list")).toBe(listed);
  });

  it("loses no list change when the worker running the reload is killed mid-reload", async () => {
    await freshBackend();
    // Brokers that leave the jobs to workers wait for a worker to load the catalog.
    const first = await worker();
    const a = await broker({ jobs: { process: false } });
    const b = await broker({ jobs: { process: false } });
    const [onA, onB] = [await client(a), await client(b)];
    const [heardA, heardB] = [listChanges(onA), listChanges(onB)];
    await jobsIdle(a);
    const release = backend.hold("tools/list");
    const before = backend.requests("tools/list");
    server.addTool("survivor");
    await eventually(() => backend.requests("tools/list") > before, "the worker's reload to reach the backend");
    first.kill("SIGKILL");
    await new Promise((done) => first.once("exit", done));
    release();
    // No member processes jobs now: the stalled reload waits for one.
    await worker();
    await eventually(async () => (await toolNames(onA)).includes("leg__survivor") && (await toolNames(onB)).includes("leg__survivor"), "the new list on both instances", 20_000);
    await eventually(() => heardA.count >= 1 && heardB.count >= 1, "list_changed on both instances");
  }, 60_000);

  it("is not ready while no member runs the reload that loads a connected backend's lists: /readyz says which, until one runs", async () => {
    await freshBackend();
    const alone = await startBroker(config({ jobs: { process: false } }), {}, { readyBackends: [] });
    brokers.push(alone);
    const readyz = async () => {
      const response = await fetch(new URL("/readyz", alone.url));
      return { status: response.status, body: (await response.json()) as { status: string; backends: { id: string; state: string; listed: boolean }[] } };
    };
    await eventually(() => alone.broker.pool.get("leg").state === "connected", "the backend connected");
    const before = await readyz();
    expect(before.status).toBe(503);
    expect(before.body.status).toBe("degraded");
    expect(before.body.backends).toEqual([expect.objectContaining({ id: "leg", state: "connected", listed: false })]);
    await worker();
    await eventually(async () => (await readyz()).status === 200, "ready once a worker loaded the lists", 20_000);
    expect((await readyz()).body.backends).toEqual([expect.objectContaining({ id: "leg", listed: true })]);
  }, 60_000);

  it("repairs a drifted count with the audit job", async () => {
    await freshBackend();
    const a = await broker({ jobs: { auditIntervalMs: 300 } });
    const c = await client(a);
    await c.subscribeResource({ uri: "leg+test://static/a" });
    await c.subscribeResource({ uri: "leg+test://static/b" });
    const redis = new Redis(redisUrl);
    try {
      await redis.hset(`${prefix}sub-count:principal`, "anonymous", "40");
      await redis.set(`${prefix}sub-count:total`, "41");
      await eventually(async () => (await redis.hget(`${prefix}sub-count:principal`, "anonymous")) === "2" && (await redis.get(`${prefix}sub-count:total`)) === "2", "the audit's repair", 10_000);
      const metrics = await (await fetch(new URL("/metrics", a.url))).text();
      expect(metrics).toMatch(/mcp_broker_subscription_count_repairs_total [1-9]/);
    } finally {
      redis.disconnect();
    }
  });

  it("stops the periodic reload of a backend no longer in the config (removed from the fleet)", async () => {
    await freshBackend();
    const a = await broker({ jobs: { attempts: 1 } });
    await eventually(() => a.broker.watchers.holds("leg"), "the watcher");
    // A relist left by a fleet that had backend "gone" (removed from the config since).
    const engine = createRedisEngine({ url: redisUrl, keyPrefix: prefix, instanceId: "old-fleet", onInvalidMessage: () => undefined, onConnectionError: () => undefined });
    await engine.connect();
    const queue = engine.jobQueue<Record<string, string>>("jobs", { attempts: 1, backoffMs: 100, decode: (data) => data as Record<string, string> });
    await queue.repeat("reload:gone:tools", { type: "reload", backendId: "gone", list: "tools" }, 300);
    await queue.close();
    await engine.close();
    const redis = new Redis(redisUrl);
    try {
      const schedulers = () => redis.zrange(`${prefix}bull:jobs:repeat`, "0", "-1");
      await eventually(async () => !(await schedulers()).includes("repeat:reload:gone:tools"), "the relist of the removed backend stopped", 10_000);
    } finally {
      redis.disconnect();
    }
  });

  it("reaps a dead member's holdings once, with one reap repetition for the whole cluster", async () => {
    await freshBackend();
    const [a, b] = [await broker(), await broker()];
    await eventually(() => a.broker.watchers.holds("leg") || b.broker.watchers.holds("leg"), "a watcher");
    // A member that subscribed and then died without a word: its heartbeat expires.
    const ghost = createRedisEngine({ url: redisUrl, keyPrefix: prefix, instanceId: "ghost", onInvalidMessage: () => undefined, onConnectionError: () => undefined });
    await ghost.connect();
    // Its heartbeat outlives the watcher's next periodic reconcile (at most 3 s away), which watches the ghost's subscription.
    await ghost.registry.heartbeat(4_000);
    const limits = { perSession: 10, perPrincipal: 10, total: 10 };
    await ghost.registry.add({ principal: "p", sessionId: "s", backendId: "leg", uri: "test://static/a" }, limits);
    await ghost.close();
    const c = await client(a);
    await c.subscribeResource({ uri: "leg+test://static/b" }); // the watcher reconciles what is wanted
    await eventually(() => server.stats.subscribeCount("test://static/a") === 1, "the ghost's subscription watched upstream", 10_000);
    await eventually(() => server.stats.unsubscribeCount("test://static/a") === 1, "the reap's release", 10_000);
    const redis = new Redis(redisUrl);
    try {
      expect(await redis.hget(`${prefix}refs:leg`, "test://static/a")).toBeNull();
      const schedulers = await redis.zrange(`${prefix}bull:jobs:repeat`, "0", "-1");
      expect(schedulers.filter((id) => id === "repeat:reap")).toHaveLength(1);
    } finally {
      redis.disconnect();
    }
    expect(server.stats.unsubscribeCount("test://static/a")).toBe(1);
  });

  it("brings holdings within lowered limits, telling the sessions what went and why", async () => {
    await freshBackend();
    const a = await broker({ subscriptions: { maxPerSession: 10 } });
    const legacy = await client(a);
    const updates = collectUpdates(legacy);
    const messages: unknown[] = [];
    legacy.setNotificationHandler("notifications/message", (n) => {
      messages.push(n.params);
    });
    const uris = ["a", "b", "static/a", "static/b"].map((name) => (name.startsWith("static") ? `leg+test://${name}` : `leg+test://items/${name}`));
    for (const uri of uris) await legacy.subscribeResource({ uri });
    const modern = await connectClient(a.url, "modern");
    clients.push(modern);
    const listen = await modern.listen({ resourceSubscriptions: ["leg+test://items/x", "leg+test://items/y", "leg+test://items/z"] });

    // A member with a lower limit joins: its audit finds the holdings beyond it.
    await broker({ subscriptions: { maxPerSession: 2 } });
    await eventually(() => messages.length === 1, "the warning to the legacy session", 15_000);
    expect(messages[0]).toMatchObject({ level: "warning", logger: "mcp-broker", data: { limit: "session", max: 2 } });
    expect((messages[0] as { data: { uris: string[] } }).data.uris.sort()).toEqual([uris[2], uris[3]].sort());
    // The listen stream's filter can no longer be honored: it ends (with the limit's error).
    expect(await listen.closed).not.toBe("local");
    // What went is no longer delivered; what stayed still is.
    server.emitUpdate("test://static/a");
    server.emitUpdate("test://items/a");
    await eventually(() => updates.includes(uris[0]!), "an update of a kept subscription");
    expect(updates).toEqual([uris[0]]);
  }, 40_000);

  it("tells a session what a lowered limit removed while no broker held it, once another adopts it", async () => {
    await freshBackend();
    const [a, b] = [await broker({ subscriptions: { maxPerSession: 10 } }), await broker({ subscriptions: { maxPerSession: 10 } })];
    const init = await post(b.url, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
    const sessionId = init.headers.get("mcp-session-id") ?? "";
    const headers = { "mcp-session-id": sessionId, "mcp-protocol-version": "2025-11-25" };
    await post(b.url, { jsonrpc: "2.0", method: "notifications/initialized" }, headers);
    const uris = ["a", "b", "c", "d"].map((name) => `leg+test://items/${name}`);
    for (const uri of uris) expect((await post(b.url, { jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri } }, headers)).json).toMatchObject({ result: {} });
    // Its broker stops: the session is handed to the cluster, and nobody holds it.
    await b.close();
    brokers = brokers.filter((running) => running !== b);
    // A member with a lower limit joins: its audit finds the session beyond it, and nobody hears the bus.
    await broker({ subscriptions: { maxPerSession: 2 } });
    const redis = new Redis(redisUrl);
    try {
      await eventually(async () => (await redis.hget(`${prefix}session:anonymous:${sessionId}`, "notices")) !== null, "the notice kept for the session's next holder", 15_000);
    } finally {
      redis.disconnect();
    }
    const stream = await openSse(a.url, { ...headers, accept: "text/event-stream" });
    try {
      await eventually(() => stream.events.some((e) => (e.data as { method?: string }).method === "notifications/message"), "the warning on the adopted session's stream");
      const warning = stream.events.find((e) => (e.data as { method?: string }).method === "notifications/message")?.data as { params: { level: string; data: { limit: string; max: number; uris: string[] } } };
      expect(warning.params).toMatchObject({ level: "warning", data: { limit: "session", max: 2 } });
      expect(warning.params.data.uris.sort()).toEqual([uris[2], uris[3]].sort());
    } finally {
      stream.close();
    }
  }, 40_000);
});
