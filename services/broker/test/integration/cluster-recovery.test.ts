import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { afterEach, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, type LegacyHttpBackend } from "../fixtures/http-backends.js";
import { createTestServer, type TestServer } from "../fixtures/test-server.js";
import { eventually, post, startBroker, type RunningBroker } from "../helpers/harness.js";
import { openSse } from "../helpers/raw-http.js";

const MODERN = { "mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen" };
const MODERN_META = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * A Redis of this test's own (it is restarted, so not the shared one), keeping nothing on disk, or
 * in `dir` what it is told to SAVE (and loading it when it starts).
 */
async function redisServer(port: number, dir?: string): Promise<ChildProcess> {
  const disk = dir === undefined ? [] : ["--dir", dir, "--dbfilename", "dump.rdb"];
  const child = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", ...disk], { stdio: ["ignore", "pipe", "pipe"] });
  await new Promise<void>((resolve, reject) => {
    let output = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      output += chunk.toString("utf8");
      if (output.includes("Ready to accept connections")) resolve();
    });
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`redis-server exited with ${code}: ${output}`)));
  });
  return child;
}

/**
 * Redis restarted without persistence loses the cluster's state: sessions, subscriptions, the
 * catalog, positions, leases, jobs. The members write back what they hold, and nothing a client
 * holds is lost: its session id still works, its subscriptions deliver again, lists still reload.
 */
describe("cluster recovery after Redis lost its data", () => {
  let redis: ChildProcess | undefined;
  let server: TestServer;
  let backend: LegacyHttpBackend;
  let brokers: RunningBroker[] = [];
  const streams: { close(): void }[] = [];

  afterEach(async () => {
    for (const stream of streams.splice(0)) stream.close();
    await Promise.all(brokers.map((b) => b.close().catch(() => undefined)));
    brokers = [];
    await backend?.close();
    redis?.kill("SIGKILL");
  });

  /** Two brokers on a Redis of this test's own; a legacy session subscribed on the second, with its stream open, and a listen stream on the first. */
  async function deploy(dir?: string, beforeSessions?: (port: number) => Promise<void>, instanceTtlMs = 2_000) {
    const port = await freePort();
    redis = await redisServer(port, dir);
    server = createTestServer({ name: "shared-backend" });
    backend = await startLegacyHttpBackend(server);
    const config = {
      backends: [{ id: "leg", url: backend.url, era: "legacy" as const, reconnect: { initialDelayMs: 50, maxDelayMs: 200 }, healthIntervalMs: 200 }],
      subscriptions: { releaseGraceMs: 0 },
      lists: { debounceMs: 50 },
      redisUrl: `redis://127.0.0.1:${port}`,
      redis: { keyPrefix: "recovery:", leaseTtlMs: 1_000, instanceTtlMs, watcherTimeoutMs: 3_000 },
    };
    const [one, two] = [await startBroker(config), await startBroker(config)];
    brokers.push(one, two);
    await beforeSessions?.(port);
    const init = await post(two.url, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
    const sessionId = init.headers.get("mcp-session-id") ?? "";
    const headers = { "mcp-session-id": sessionId, "mcp-protocol-version": "2025-11-25" };
    await post(two.url, { jsonrpc: "2.0", method: "notifications/initialized" }, headers);
    expect((await post(two.url, { jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri: "leg+test://static/a" } }, headers)).json).toMatchObject({ result: {} });
    const legacy = await openSse(two.url, { ...headers, accept: "text/event-stream" });
    streams.push(legacy);
    const listen = await openSse(one.url, MODERN, { jsonrpc: "2.0", id: 5, method: "subscriptions/listen", params: { notifications: { resourceSubscriptions: ["leg+test://static/b"], toolsListChanged: true }, _meta: MODERN_META } });
    streams.push(listen);
    await eventually(() => listen.events.length === 1, "the acknowledgement");
    return { port, one, two, headers, legacy, listen };
  }

  const updated = (stream: { events: { data: unknown }[] }, uri: string) => stream.events.filter((e) => (e.data as { params?: { uri?: string } }).params?.uri === uri).length;

  /** Redis killed, and after `outageMs` started again, empty, on the same port. */
  async function restartRedisEmpty(port: number, outageMs = 0): Promise<void> {
    redis?.kill("SIGKILL");
    await new Promise((done) => redis?.once("exit", done));
    await new Promise((r) => setTimeout(r, outageMs));
    redis = await redisServer(port);
  }

  it("writes back sessions and subscriptions: ids keep working, updates flow again, lists reload", async () => {
    const deployed = await deploy();
    const { port, one, headers, listen } = deployed;
    const before = (listen.events[0]?.data as { params: { _meta: Record<string, unknown> } }).params._meta["io.mcp-broker/cursor"];
    await restartRedisEmpty(port);

    // Once written back and watched again, updates flow as before.
    await deliverAgain(deployed);
    // A cursor from before the loss is resumed as everything: what happened before the write-back took positions from a counter that started over.
    const resumed = await openSse(one.url, MODERN, { jsonrpc: "2.0", id: 7, method: "subscriptions/listen", params: { notifications: { resourceSubscriptions: ["leg+test://static/b"] }, _meta: { ...MODERN_META, "io.mcp-broker/cursor": before } } });
    streams.push(resumed);
    await eventually(() => resumed.events.length >= 1, "the resumed listen's acknowledgement");
    expect(resumed.events[0]?.data).toMatchObject({ params: { _meta: { "io.mcp-broker/resumed": "everything" } } });
    // The session is known to the cluster again once its holder noticed (within a heartbeat; the
    // updates above may flow sooner): the other broker adopts it, no 404.
    await eventually(async () => (await post(one.url, { jsonrpc: "2.0", id: 3, method: "ping" }, headers)).status === 200, "the session written back", 5_000);
    // The catalog is written back by the watcher's reloads: a broker that starts now serves the
    // stored lists (it does not list backends itself), the backend's tools among them.
    const three = await startBroker({ backends: [{ id: "leg", url: backend.url, era: "legacy" }], redisUrl: `redis://127.0.0.1:${port}`, redis: { keyPrefix: "recovery:", leaseTtlMs: 1_000, instanceTtlMs: 2_000 } });
    brokers.push(three);
    await eventually(async () => JSON.stringify((await post(three.url, { jsonrpc: "2.0", id: 6, method: "tools/list", params: { _meta: MODERN_META } }, { "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list" })).json).includes("leg__echo"), "the stored tool list on a new broker", 10_000);
    // The catalog reloads: a tool change reaches the listen stream, and the new tool is listed.
    server.addTool("after-recovery");
    await eventually(() => listen.events.some((e) => (e.data as { method?: string }).method === "notifications/tools/list_changed"), "the list change after recovery", 10_000);
    const tools = await post(one.url, { jsonrpc: "2.0", id: 4, method: "tools/list" }, headers);
    expect(JSON.stringify(tools.json)).toContain("leg__after-recovery");
  }, 60_000);

  it("writes back again after a write-back that failed (Redis stalled meanwhile), and lets go of nothing until it is done", async () => {
    const deployed = await deploy();
    const { port, one, two, headers, legacy } = deployed;
    let streamEnded = false;
    void legacy.ended.then(() => (streamEnded = true));
    // The session's holder fails its write-backs part way, as when Redis stalls past the command
    // timeout: the one its bus's reconnect starts, and the one its heartbeat starts on finding its
    // writes lost. Its later heartbeats find nothing lost (their sequence landed, the generation is
    // the one it read), so only the failed write-back says that Redis lacks what it holds.
    const reregister = two.broker.sessions.reregister.bind(two.broker.sessions);
    let calls = 0;
    two.broker.sessions.reregister = async () => {
      if (++calls <= 2) throw new Error("Command timed out");
      await reregister();
    };
    await restartRedisEmpty(port);
    // Written back at last (at a later heartbeat's check); meanwhile the session's missing record was
    // no sign that another member ended it.
    await eventually(() => calls >= 3, "the write-back again", 5_000);
    await deliverAgain(deployed);
    for (const broker of [two, one]) await eventually(async () => (await post(broker.url, { jsonrpc: "2.0", id: 3, method: "ping" }, headers)).status === 200, "the session, kept and written back", 5_000);
    expect(streamEnded).toBe(false);
  }, 60_000);

  it("keeps its sessions through a longer outage: a heartbeat queued while Redis was away and answered by the empty one is not taken for this member's death", async () => {
    const { port, one, two, headers, legacy } = await deploy();
    let streamEnded = false;
    void legacy.ended.then(() => (streamEnded = true));
    // Heartbeats every 400 ms: several ticks fail their state check, and one heartbeat waits in the connection's queue.
    await restartRedisEmpty(port, 2_500);
    await eventually(
      async () => {
        server.emitUpdate("test://static/a");
        await new Promise((r) => setTimeout(r, 100));
        return updated(legacy, "leg+test://static/a") >= 1;
      },
      "updates through the recovered cluster",
      20_000,
    );
    // The session lives on at its holder and is known to the cluster: neither answers 404.
    for (const broker of [two, one]) await eventually(async () => (await post(broker.url, { jsonrpc: "2.0", id: 3, method: "ping" }, headers)).status === 200, "the session, kept", 5_000);
    expect(streamEnded).toBe(false);
  }, 60_000);

  /** Redis writes a snapshot of what it holds now (it does so on a schedule, or for a replica's sync). */
  async function save(port: number): Promise<void> {
    const admin = new Redis(`redis://127.0.0.1:${port}`);
    await admin.save();
    admin.disconnect();
  }

  /** Each member's last heartbeat sequence number in Redis, by key. */
  async function heartbeatSequences(port: number): Promise<Record<string, number>> {
    const admin = new Redis(`redis://127.0.0.1:${port}`);
    try {
      const keys = await admin.keys("recovery:instance-sequence:*");
      const values = keys.length === 0 ? [] : await admin.mget(...keys);
      return Object.fromEntries(keys.map((key, i) => [key, Number(values[i])]));
    } finally {
      admin.disconnect();
    }
  }

  /** Redis killed, and after `outageMs` started again on the same port, from the snapshot in `dir`. */
  async function restartFromSnapshot(port: number, dir: string, outageMs: number): Promise<void> {
    redis?.kill("SIGKILL");
    await new Promise((done) => redis?.once("exit", done));
    await new Promise((r) => setTimeout(r, outageMs));
    redis = await redisServer(port, dir);
  }

  /** Both of `deploy`'s streams get updates again, and (with `ended`) neither ended meanwhile. */
  async function deliverAgain({ legacy, listen }: Awaited<ReturnType<typeof deploy>>, ended: () => number = () => 0): Promise<void> {
    await eventually(
      async () => {
        server.emitUpdate("test://static/a");
        server.emitUpdate("test://static/b");
        await new Promise((r) => setTimeout(r, 100));
        return updated(legacy, "leg+test://static/a") >= 1 && updated(listen, "leg+test://static/b") >= 1;
      },
      "updates after Redis came back",
      20_000,
    );
    expect(ended()).toBe(0);
  }

  /** A deployment on a Redis that keeps its snapshots in a directory of the test's own. */
  async function withSnapshots(run: (dir: string) => Promise<void>): Promise<void> {
    const dir = await mkdtemp(join(tmpdir(), "broker-snapshot-"));
    try {
      await run(dir);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  const countEnds = (deployed: Awaited<ReturnType<typeof deploy>>): (() => number) => {
    let ended = 0;
    for (const stream of [deployed.legacy, deployed.listen]) void stream.ended.then(() => ended++);
    return () => ended;
  };

  it("keeps its sessions when Redis comes back from a snapshot in which every heartbeat had expired: nobody was reaped, so nobody is dead", () =>
    withSnapshots(async (dir) => {
      const deployed = await deploy(dir);
      const ended = countEnds(deployed);
      // Redis comes back from a snapshot of the state as it is, after longer than the heartbeat TTL.
      await save(deployed.port);
      await restartFromSnapshot(deployed.port, dir, 2_500);
      await deliverAgain(deployed, ended);
      // Past the reap's grace (two heartbeat periods) and then some: still nobody presumed dead.
      await new Promise((r) => setTimeout(r, 2_000));
      for (const broker of [deployed.two, deployed.one]) expect((await post(broker.url, { jsonrpc: "2.0", id: 3, method: "ping" }, deployed.headers)).status).toBe(200);
      expect(ended()).toBe(0);
    }), 60_000);

  it("writes back what it holds when Redis comes back from a snapshot taken before its sessions subscribed: they deliver again", () =>
    withSnapshots(async (dir) => {
      // The snapshot holds the members and the cluster's name, but none of the sessions and subscriptions made after it.
      let saved: Record<string, number> = {};
      const deployed = await deploy(dir, async (port) => {
        await save(port);
        saved = await heartbeatSequences(port);
      });
      const ended = countEnds(deployed);
      expect(Object.keys(saved)).toHaveLength(2);
      // Each member heartbeats after the snapshot: its next heartbeat then shows Redis lost its writes.
      await eventually(async () => {
        const now = await heartbeatSequences(deployed.port);
        return Object.entries(saved).every(([key, n]) => (now[key] ?? 0) > n);
      }, "a heartbeat of each member after the snapshot");
      await restartFromSnapshot(deployed.port, dir, 1_000);
      await deliverAgain(deployed, ended);
      expect((await post(deployed.two.url, { jsonrpc: "2.0", id: 4, method: "ping" }, deployed.headers)).status).toBe(200);
      // The session is the cluster's again: the other broker adopts it.
      await eventually(async () => (await post(deployed.one.url, { jsonrpc: "2.0", id: 3, method: "ping" }, deployed.headers)).status === 200, "the session written back", 5_000);
    }), 60_000);

  it("applies a list stored after Redis lost its data and announced before a member noticed the loss (its version number started over)", async () => {
    // Heartbeats 4 s apart: the change lands long before either broker notices the loss.
    const deployed = await deploy(undefined, undefined, 20_000);
    const listed = async (url: string, name: string) => JSON.stringify((await post(url, { jsonrpc: "2.0", id: 8, method: "tools/list" }, deployed.headers)).json).includes(name);
    // A change before the loss: the stored version is past 1 everywhere.
    server.addTool("before-loss");
    for (const broker of [deployed.one, deployed.two]) await eventually(() => listed(broker.url, "leg__before-loss"), "the change before the loss", 10_000);
    const admin = new Redis(`redis://127.0.0.1:${deployed.port}`);
    try {
      await admin.flushall();
    } finally {
      admin.disconnect();
    }
    server.addTool("after-loss");
    for (const broker of [deployed.one, deployed.two]) await eventually(() => listed(broker.url, "leg__after-loss"), `the change after the loss on ${broker.url}`, 15_000);
  }, 60_000);

  it("writes back what it holds when Redis comes back from a snapshot taken after its last heartbeat but before its sessions subscribed", () =>
    withSnapshots(async (dir) => {
      // Heartbeats 4 s apart: the snapshot is taken right after one, and Redis restarts before the next.
      let saved: Record<string, number> = {};
      const deployed = await deploy(
        dir,
        async (port) => {
          const before = await heartbeatSequences(port);
          await eventually(async () => {
            const now = await heartbeatSequences(port);
            return Object.keys(now).length === 2 && Object.entries(now).every(([key, n]) => n > (before[key] ?? 0));
          }, "a heartbeat of each member", 10_000);
          await save(port);
          saved = await heartbeatSequences(port);
        },
        20_000,
      );
      await restartFromSnapshot(deployed.port, dir, 200);
      // The snapshot holds each member's last heartbeat: the sequence check finds nothing missing.
      expect(await heartbeatSequences(deployed.port)).toEqual(saved);
      const ended = countEnds(deployed);
      await deliverAgain(deployed, ended);
      await eventually(async () => (await post(deployed.one.url, { jsonrpc: "2.0", id: 3, method: "ping" }, deployed.headers)).status === 200, "the session written back", 10_000);
    }), 60_000);
});
