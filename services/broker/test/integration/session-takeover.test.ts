import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { deleteKeys, testRedisUrl, uniquePrefix } from "@mcp-broker/shared/testing";
import { Redis } from "ioredis";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, type LegacyHttpBackend } from "../fixtures/http-backends.js";
import { createTestServer, type TestServer } from "../fixtures/test-server.js";
import { eventually, post, startBroker, type RunningBroker } from "../helpers/harness.js";
import { openSse } from "../helpers/raw-http.js";
import { configFileEnv } from "../fixtures/cli-env.js";

const BROKER_DIR = resolve(import.meta.dirname, "../..");
const CLI = join(BROKER_DIR, "src/cli.ts");
const MODERN = { "mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen" };
const MODERN_META = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
const KEY_A = "key-for-team-a-0123456789";
const KEY_B = "key-for-team-b-0123456789";

type Stream = Awaited<ReturnType<typeof openSse>>;
type Event = Stream["events"][number];

/** The URIs of the resources/updated events, and the methods of any other event. */
const described = (events: readonly Event[]) =>
  events.map((e) => {
    const { method, params } = e.data as { method?: string; params?: { uri?: string } };
    return method === "notifications/resources/updated" ? (params?.uri ?? "?") : (method ?? "(response)");
  });

/**
 * Sessions that outlive their instance (Redis engine, real broker processes and in-process
 * brokers on one Redis): any member adopts a legacy session, resumes its stream from what the
 * cluster knows, and a listen stream resumes from its cursor on any member.
 */
describe("sessions across broker instances", () => {
  let redisUrl: string;
  let prefix: string;
  let server: TestServer;
  let backend: LegacyHttpBackend;
  let brokers: RunningBroker[] = [];
  let streams: Stream[] = [];
  let children: ChildProcess[] = [];
  let dirs: string[] = [];

  const config = (extra: Record<string, unknown> = {}) => ({
    backends: [{ id: "leg", url: backend.url, era: "legacy" as const, reconnect: { initialDelayMs: 50, maxDelayMs: 200 }, healthIntervalMs: 200 }],
    subscriptions: { releaseGraceMs: 0 },
    redisUrl,
    redis: { keyPrefix: prefix, leaseTtlMs: 1_000, instanceTtlMs: 2_000, watcherTimeoutMs: 3_000 },
    ...extra,
  });

  beforeAll(async () => {
    redisUrl = await testRedisUrl();
  });

  afterEach(async () => {
    for (const child of children) child.kill("SIGKILL");
    for (const stream of streams) stream.close();
    await Promise.all(brokers.map((b) => b.close().catch(() => undefined)));
    await backend?.close();
    await deleteKeys(redisUrl, prefix);
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
    brokers = [];
    streams = [];
    children = [];
    dirs = [];
  });

  async function fresh(): Promise<void> {
    prefix = uniquePrefix("takeover");
    server = createTestServer({ name: "shared-backend" });
    backend = await startLegacyHttpBackend(server);
  }

  async function broker(extra: Record<string, unknown> = {}): Promise<RunningBroker> {
    const running = await startBroker(config(extra));
    brokers.push(running);
    return running;
  }

  /** A broker as its own process (to be killed), ready to serve. */
  async function brokerProcess(): Promise<{ url: string; child: ChildProcess; stderr: () => string }> {
    const dir = await mkdtemp(join(tmpdir(), "takeover-"));
    dirs.push(dir);
    const file = join(dir, "broker.json");
    await writeFile(file, JSON.stringify({ ...config(), logging: { level: "warn" } }));
    const child = spawn(process.execPath, ["--import", "tsx", CLI, "--config", file, "--port", "0"], { cwd: BROKER_DIR, env: configFileEnv(), stdio: ["ignore", "ignore", "pipe"] });
    children.push(child);
    let stderr = "";
    const url = await new Promise<string>((done, fail) => {
      child.stderr?.on("data", (chunk: Buffer) => {
        stderr += chunk.toString("utf8");
        const ready = /mcp-broker ready: (\S+)/.exec(stderr);
        if (ready?.[1] !== undefined) done(ready[1]);
      });
      child.once("exit", (code) => fail(new Error(`broker exited with ${code}: ${stderr}`)));
    });
    return { url, child, stderr: () => stderr };
  }

  const headersOf = (sessionId: string, key?: string) => ({
    "mcp-session-id": sessionId,
    "mcp-protocol-version": "2025-11-25",
    ...(key !== undefined && { authorization: `Bearer ${key}` }),
  });

  async function initialize(url: string, key?: string): Promise<string> {
    const auth: Record<string, string> = key === undefined ? {} : { authorization: `Bearer ${key}` };
    const init = await post(url, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } }, auth);
    const sessionId = init.headers.get("mcp-session-id") ?? "";
    expect(sessionId).not.toBe("");
    await post(url, { jsonrpc: "2.0", method: "notifications/initialized" }, headersOf(sessionId, key));
    return sessionId;
  }

  async function subscribe(url: string, sessionId: string, uri: string): Promise<void> {
    const answer = await post(url, { jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri } }, headersOf(sessionId));
    expect(answer.json).toMatchObject({ result: {} });
  }

  async function stream(url: string, sessionId: string, lastEventId?: string, key?: string): Promise<Stream> {
    const opened = await openSse(url, { ...headersOf(sessionId, key), accept: "text/event-stream", ...(lastEventId !== undefined && { "last-event-id": lastEventId }) });
    streams.push(opened);
    return opened;
  }

  const updates = (s: Stream) => s.events.filter((e) => (e.data as { method?: string }).method === "notifications/resources/updated");
  const A = "leg+test://static/a";
  const B = "leg+test://static/b";

  it("adopts a session whose broker was SIGKILLed, under the same id, and resumes it with what was updated meanwhile", async () => {
    await fresh();
    const doomed = await brokerProcess(); // starts first: it watches the backend
    const survivor = await broker();
    const sessionId = await initialize(doomed.url);
    await subscribe(doomed.url, sessionId, A);
    await subscribe(doomed.url, sessionId, B);
    const first = await stream(doomed.url, sessionId);
    server.emitUpdate("test://static/a");
    await eventually(() => updates(first).length === 1, "an update on the first broker");
    const seen = updates(first)[0]?.id ?? "";

    doomed.child.kill("SIGKILL");
    await eventually(() => survivor.broker.watchers.holds("leg"), "the survivor to watch the backend", 5_000);
    // Updated while no broker holds the session: it is not lost.
    server.emitUpdate("test://static/b");
    const redis = new Redis(redisUrl);
    try {
      // Seen once in CI (not reproduced since): the state the survivor was in says where it stopped.
      const state = () => JSON.stringify({ watched: survivor.broker.upstream.watched("leg"), backend: survivor.broker.pool.get("leg").state, holds: survivor.broker.watchers.holds("leg") });
      await eventually(async () => (await redis.hget(`${prefix}stamps:leg`, "utest://static/b")) !== null, "the update stamped").catch((error: Error) => {
        throw new Error(`${error.message}; the survivor: ${state()}`);
      });
    } finally {
      redis.disconnect();
    }

    const resumed = await stream(survivor.url, sessionId, seen);
    expect(resumed.status).toBe(200);
    await eventually(() => described(updates(resumed)).includes(B), "the update made while the session had no holder");
    const call = await post(survivor.url, { jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "leg__echo", arguments: { text: "hi" } } }, headersOf(sessionId));
    expect(call.status).toBe(200);
    expect(call.json).toMatchObject({ result: {} });
    const before = updates(resumed).length;
    server.emitUpdate("test://static/a");
    await eventually(() => updates(resumed).length > before, "live updates on the adopting broker");
  }, 40_000);

  it("resumes Last-Event-ID on another broker with exactly the subscriptions updated since", async () => {
    await fresh();
    const [one, two] = [await broker(), await broker()];
    const sessionId = await initialize(one.url);
    for (const name of ["a", "b", "static/a"]) await subscribe(one.url, sessionId, name.startsWith("static") ? A : `leg+test://items/${name}`);
    const first = await stream(one.url, sessionId);
    server.emitUpdate("test://items/a");
    await eventually(() => updates(first).length === 1, "the first update");
    const seen = updates(first)[0]?.id ?? "";
    first.close();
    await first.ended;
    const delivered = one.broker.fanout.deliveries().resourceUpdated;
    server.emitUpdate("test://items/b");
    server.emitUpdate("test://static/a");
    await eventually(() => one.broker.fanout.deliveries().resourceUpdated === delivered + 2, "the updates reaching the session on the first broker");

    const resumed = await stream(two.url, sessionId, seen);
    // A barrier: an update after the resumption arrives after anything the resumption sends.
    await eventually(() => updates(resumed).length === 2, "the resumption");
    server.emitUpdate("test://items/a");
    await eventually(() => updates(resumed).length === 3, "the barrier update");
    expect(described(resumed.events)).toEqual(["leg+test://items/b", A, "leg+test://items/a"]);
    // The first broker let go of it.
    await eventually(() => one.broker.sessions.legacySession(sessionId, "anonymous") === undefined, "the first broker to let go");
  });

  it("resumes Last-Event-ID on a broker that adopted the session earlier and delivered to it since, with what it did not deliver", async () => {
    await fresh();
    const [one, two] = [await broker(), await broker()];
    const sessionId = await initialize(one.url);
    await subscribe(one.url, sessionId, A);
    await subscribe(one.url, sessionId, B);
    const first = await stream(one.url, sessionId);
    server.emitUpdate("test://static/a");
    await eventually(() => updates(first).length === 1, "the first update");
    const seen = updates(first)[0]?.id ?? "";
    first.close();
    await first.ended;
    // Updated while the client has no stream: delivered to the session on the first broker only.
    const delivered = one.broker.fanout.deliveries().resourceUpdated;
    server.emitUpdate("test://static/b");
    await eventually(() => one.broker.fanout.deliveries().resourceUpdated === delivered + 1, "the update reaching the session on the first broker");
    // A request moves the session to the second broker (idle so far: its event clock is far behind
    // the cluster's), which then delivers an update to it before the client's stream comes back.
    expect((await post(two.url, { jsonrpc: "2.0", id: 4, method: "ping" }, headersOf(sessionId))).status).toBe(200);
    const before = two.broker.fanout.deliveries().resourceUpdated;
    server.emitUpdate("test://static/a");
    await eventually(() => two.broker.fanout.deliveries().resourceUpdated === before + 1, "the update reaching the adopted session");
    const resumed = await stream(two.url, sessionId, seen);
    await eventually(() => updates(resumed).length >= 2, "the resumption");
    expect(described(updates(resumed)).sort()).toEqual([A, B]);
  });

  it("lets exactly one of two brokers racing to adopt a session deliver to it", async () => {
    await fresh();
    const [owner, b, c] = [await broker(), await broker(), await broker()];
    const sessionId = await initialize(owner.url);
    await subscribe(owner.url, sessionId, A);
    const [onB, onC] = await Promise.all([stream(b.url, sessionId), stream(c.url, sessionId)]);
    // The one with the older epoch is told to let go, and ends its stream.
    await eventually(() => [b, c].filter((r) => r.broker.sessions.legacySession(sessionId, "anonymous") !== undefined).length === 1, "one holder");
    await Promise.race([onB.ended, onC.ended]);
    expect(owner.broker.sessions.legacySession(sessionId, "anonymous")).toBeUndefined();
    const holder = b.broker.sessions.legacySession(sessionId, "anonymous") !== undefined ? onB : onC;
    const other = holder === onB ? onC : onB;
    const [holderBefore, otherBefore] = [updates(holder).length, updates(other).length];
    server.emitUpdate("test://static/a");
    server.emitUpdate("test://static/a");
    await eventually(() => updates(holder).length === holderBefore + 2, "the updates on the holder's stream");
    expect(updates(other).length).toBe(otherBefore);
  });

  it("refuses a subscribe on a broker that no longer holds the session (moved, retry), lets its stale copy go, and the retry adopts the session and delivers", async () => {
    await fresh();
    const stale = await broker();
    const sessionId = await initialize(stale.url);
    await subscribe(stale.url, sessionId, A);
    const redis = new Redis(redisUrl);
    try {
      // Another member adopts the session, and its word to the old holder has not arrived yet.
      const record = `${prefix}session:anonymous:${sessionId}`;
      await redis.hincrby(record, "epoch", 1);
      const refused = await post(stale.url, { jsonrpc: "2.0", id: 4, method: "resources/subscribe", params: { uri: B } }, headersOf(sessionId));
      expect(refused.json).toMatchObject({ error: { code: -32000, data: { moved: true } } });
      // Nothing was added for the session behind its holder's back.
      expect(await redis.zrange(`${prefix}sub:anonymous:${sessionId}`, "0", "-1")).toEqual(["leg\u0000test://static/a"]);
      // The refusal told the broker its copy is stale: it lets it go.
      await eventually(() => stale.broker.sessions.legacySession(sessionId, "anonymous") === undefined, "the stale copy let go");

      // The client sends it again, to the same broker as a sticky load balancer would: it adopts
      // the session (instead of meeting the stale copy and answering moved forever) and delivers.
      const onStale = await stream(stale.url, sessionId);
      await subscribe(stale.url, sessionId, B);
      server.emitUpdate("test://static/b");
      server.emitUpdate("test://static/a");
      await eventually(() => described(updates(onStale)).includes(B) && described(updates(onStale)).includes(A), "both updates on the stream");
      expect((await redis.zrange(`${prefix}sub:anonymous:${sessionId}`, "0", "-1")).sort()).toEqual(["leg\u0000test://static/a", "leg\u0000test://static/b"]);
      expect(Number(await redis.hget(record, "epoch"))).toBe(3);
    } finally {
      redis.disconnect();
    }
  });

  it("does not attach a stream to a stale copy: a broker that missed the word of a takeover adopts the session back on its client's GET", async () => {
    await fresh();
    const [first, second] = [await broker(), await broker()];
    const sessionId = await initialize(first.url);
    await subscribe(first.url, sessionId, A);
    // The session.moved message to the first broker is lost.
    first.broker.sessions.moved = () => undefined;
    // The client comes to the second broker, which takes the session over and subscribes to B there.
    await subscribe(second.url, sessionId, B);
    expect(first.broker.sessions.legacySession(sessionId, "anonymous")).toBeDefined();
    // Its stream goes back to the first broker (a sticky load balancer's stale entry): the first
    // checks the record, lets its copy go and adopts the session with all it holds.
    const onFirst = await stream(first.url, sessionId);
    await eventually(() => second.broker.sessions.legacySession(sessionId, "anonymous") === undefined, "the second let go");
    server.emitUpdate("test://static/b");
    await eventually(() => described(updates(onFirst)).includes(B), "the update of what the second subscribed to");
  });

  it("lets go of sessions adopted or ended elsewhere while its bus was away, once its bus is back", async () => {
    await fresh();
    const [first, second] = [await broker(), await broker()];
    const [adopted, ended, kept] = [await initialize(first.url), await initialize(first.url), await initialize(first.url)];
    await subscribe(first.url, adopted, A);
    const onKept = await stream(first.url, kept);
    await subscribe(first.url, kept, B);
    // The bus is away: the first broker's session.moved messages are lost.
    first.broker.sessions.moved = () => undefined;
    await subscribe(second.url, adopted, B);
    expect((await fetch(second.url, { method: "DELETE", headers: headersOf(ended) })).status).toBe(200);
    const ping = { jsonrpc: "2.0", id: 9, method: "ping" };
    // The stale copies still answer (a missing record alone may be Redis's loss, so it is trusted).
    expect((await post(first.url, ping, headersOf(ended))).status).toBe(200);
    // The bus reconnects (its subscriber connection killed): the first broker reads its sessions' records again.
    const redis = new Redis(redisUrl);
    try {
      const { instance } = (await (await fetch(new URL("/readyz", first.url))).json()) as { instance: string };
      const line = String(await redis.client("LIST")).split("\n").find((l) => l.includes(`name=mcp-broker:${instance}:subscriber `));
      await redis.client("KILL", "ID", /id=(\d+)/.exec(line ?? "")?.[1] as string);
    } finally {
      redis.disconnect();
    }
    await eventually(() => first.broker.sessions.legacySession(adopted, "anonymous") === undefined && first.broker.sessions.legacySession(ended, "anonymous") === undefined, "the stale copies let go", 10_000);
    expect((await post(first.url, ping, headersOf(ended))).status).toBe(404);
    // The one it still holds stays, with its stream and what it subscribed to.
    expect(first.broker.sessions.legacySession(kept, "anonymous")).toBeDefined();
    server.emitUpdate("test://static/b");
    await eventually(() => described(updates(onKept)).includes(B), "the kept session's update");
    // The adopted session goes on at its new holder, with both subscriptions.
    const onSecond = await stream(second.url, adopted);
    server.emitUpdate("test://static/a");
    await eventually(() => described(updates(onSecond)).includes(A), "the adopted session's update at its new holder");
  });

  it("answers 404 to a session id presented by another principal, or one that never existed", async () => {
    await fresh();
    const keys = { auth: { apiKeys: [{ key: KEY_A, principal: "team-a" }, { key: KEY_B, principal: "team-b" }] } };
    const [one, two] = [await broker(keys), await broker(keys)];
    const sessionId = await initialize(one.url, KEY_A);
    const ping = { jsonrpc: "2.0", id: 9, method: "ping" };
    expect((await post(two.url, ping, headersOf(sessionId, KEY_B))).status).toBe(404);
    expect((await post(one.url, ping, headersOf(sessionId, KEY_B))).status).toBe(404);
    expect((await post(two.url, ping, headersOf("00000000-0000-4000-8000-000000000000", KEY_A))).status).toBe(404);
    // Its own principal reaches it from either broker.
    expect((await post(two.url, ping, headersOf(sessionId, KEY_A))).json).toMatchObject({ result: {} });
  });

  it("ends a session everywhere on DELETE from any broker, and releases what it held", async () => {
    await fresh();
    const [one, two] = [await broker(), await broker()];
    const sessionId = await initialize(one.url);
    await subscribe(one.url, sessionId, A);
    // Enough that releasing them takes a while after the DELETE is answered.
    await Promise.all(Array.from({ length: 100 }, (_, i) => subscribe(one.url, sessionId, `leg+test://items/${i}`)));
    const first = await stream(one.url, sessionId);
    const deleted = await fetch(two.url, { method: "DELETE", headers: headersOf(sessionId) });
    expect(deleted.status).toBe(200);
    // From the answer on, no broker adopts it (not even while the deleting one still releases what it held).
    for (const url of [one.url, two.url]) expect((await post(url, { jsonrpc: "2.0", id: 9, method: "ping" }, headersOf(sessionId))).status).toBe(404);
    await first.ended;
    const redis = new Redis(redisUrl);
    try {
      await eventually(async () => (await redis.hlen(`${prefix}refs:leg`)) === 0, "the release");
    } finally {
      redis.disconnect();
    }
  });

  it("leaves a session with its holder when another broker refuses to adopt it (the principal's session limit there), so a later DELETE there still ends it", async () => {
    await fresh();
    const limited = { server: { maxSessionsPerPrincipal: 1 } };
    const [one, two] = [await broker(limited), await broker(limited)];
    const sessionId = await initialize(one.url);
    await subscribe(one.url, sessionId, A);
    const first = await stream(one.url, sessionId);
    const other = await initialize(two.url); // the principal's one session on the second broker
    const refused = await post(two.url, { jsonrpc: "2.0", id: 5, method: "ping" }, headersOf(sessionId));
    expect(refused.json).toMatchObject({ error: { code: -32011 } });
    // Still held by the first broker: it serves the session, and the record names it.
    expect((await post(one.url, { jsonrpc: "2.0", id: 6, method: "ping" }, headersOf(sessionId))).status).toBe(200);
    expect((await fetch(two.url, { method: "DELETE", headers: headersOf(other) })).status).toBe(200);
    expect((await fetch(two.url, { method: "DELETE", headers: headersOf(sessionId) })).status).toBe(200);
    // Ended everywhere: the first broker let it go (its stream ended) and answers 404.
    await first.ended;
    await eventually(async () => (await post(one.url, { jsonrpc: "2.0", id: 7, method: "ping" }, headersOf(sessionId))).status === 404, "the first broker to end it");
  });

  /** Waits until the update log stamped `uri` (the test backend's) after the position `cursor` names. */
  async function stampedAfter(uri: string, cursor: unknown): Promise<void> {
    await eventually(async () => {
      const redis = new Redis(redisUrl);
      try {
        const stamp = await redis.hget(`${prefix}stamps:leg`, `u${uri}`);
        return stamp !== null && Number(stamp) > Number(String(cursor).split(":")[3]);
      } finally {
        redis.disconnect();
      }
    }, `an update of ${uri} after the cursor`);
  }

  it("resumes a listen stream from its cursor on another broker, with exactly what changed since", async () => {
    await fresh();
    const [one, two] = [await broker(), await broker()];
    // Someone else keeps the resources watched while the listen is closed.
    const keeper = await initialize(one.url);
    await subscribe(one.url, keeper, A);
    await subscribe(one.url, keeper, B);
    const listen = (url: string, meta: Record<string, unknown> = {}) =>
      openSse(url, MODERN, { jsonrpc: "2.0", id: 5, method: "subscriptions/listen", params: { notifications: { resourceSubscriptions: [A, B] }, _meta: { ...MODERN_META, ...meta } } });
    const first = await listen(one.url);
    streams.push(first);
    await eventually(() => first.events.length === 1, "the acknowledgement");
    server.emitUpdate("test://static/a");
    await eventually(() => updates(first).length === 1, "an update with its cursor");
    const cursor = (updates(first)[0]?.data as { params: { _meta: Record<string, unknown> } }).params._meta["io.mcp-broker/cursor"];
    expect(cursor).toMatch(/^1:[^:]+:[^:]+:\d+$/);
    first.close();
    server.emitUpdate("test://static/b");
    await stampedAfter("test://static/b", cursor);

    const resumed = await listen(two.url, { "io.mcp-broker/cursor": cursor });
    streams.push(resumed);
    await eventually(() => updates(resumed).length === 1, "the resumption");
    expect(resumed.events[0]?.data).toMatchObject({ method: "notifications/subscriptions/acknowledged", params: { _meta: { "io.mcp-broker/resumed": "exact" } } });
    server.emitUpdate("test://static/a");
    await eventually(() => updates(resumed).length === 2, "the barrier update");
    expect(described(updates(resumed))).toEqual([B, A]);
  });

  it("acknowledges a listen with a cursor: an update made after the acknowledgement, before any notification, reaches a stream resumed from it on another broker", async () => {
    await fresh();
    const [one, two] = [await broker(), await broker()];
    const keeper = await initialize(one.url);
    await subscribe(one.url, keeper, A);
    const listen = (url: string, meta: Record<string, unknown> = {}) =>
      openSse(url, MODERN, { jsonrpc: "2.0", id: 5, method: "subscriptions/listen", params: { notifications: { resourceSubscriptions: [A] }, _meta: { ...MODERN_META, ...meta } } });
    const first = await listen(one.url);
    streams.push(first);
    await eventually(() => first.events.length === 1, "the acknowledgement");
    const cursor = (first.events[0]?.data as { params: { _meta: Record<string, unknown> } }).params._meta["io.mcp-broker/cursor"];
    expect(cursor).toMatch(/^1:[^:]+:[^:]+:\d+$/);
    first.close();
    server.emitUpdate("test://static/a");
    await stampedAfter("test://static/a", cursor);
    const resumed = await listen(two.url, { "io.mcp-broker/cursor": cursor });
    streams.push(resumed);
    await eventually(() => updates(resumed).length === 1, "the resumption");
    expect(resumed.events[0]?.data).toMatchObject({ params: { _meta: { "io.mcp-broker/resumed": "exact", "io.mcp-broker/cursor": cursor } } });
    expect(described(updates(resumed))).toEqual([A]);

    // A position the cluster never handed out cannot be resumed from exactly: everything is announced, and said so.
    const future = String(cursor).replace(/\d+$/, "999999999");
    const forward = await listen(two.url, { "io.mcp-broker/cursor": future });
    streams.push(forward);
    await eventually(() => updates(forward).length === 1, "the announcement");
    const acknowledged = (forward.events[0]?.data as { params: { _meta: Record<string, unknown> } }).params._meta;
    expect(acknowledged["io.mcp-broker/resumed"]).toBe("everything");
    // Its cursor is the one given: broken before the announcement arrives, the stream is told everything again.
    expect(acknowledged["io.mcp-broker/cursor"]).toBe(future);
  });

  it("acknowledges a listen at a position handed out after its watches began: resumed with nothing changed since, on either broker, it is told only what nobody could tell, once", async () => {
    await fresh();
    const [one, two] = [await broker(), await broker()];
    // The cluster moves on without the first broker: it passes none of these updates on.
    const keeper = await initialize(two.url);
    await subscribe(two.url, keeper, A);
    for (let i = 0; i < 3; i++) server.emitUpdate("test://static/a");
    await stampedAfter("test://static/a", "::0:2");
    const listen = (url: string, uris: string[], cursor: unknown) =>
      openSse(url, MODERN, { jsonrpc: "2.0", id: 5, method: "subscriptions/listen", params: { notifications: { resourceSubscriptions: uris }, _meta: { ...MODERN_META, ...(cursor !== undefined && { "io.mcp-broker/cursor": cursor }) } } });
    const cursorOf = (event: { data: unknown } | undefined) => (event?.data as { params: { _meta: Record<string, unknown> } }).params._meta["io.mcp-broker/cursor"];
    const first = await listen(one.url, [A], undefined);
    streams.push(first);
    await eventually(() => first.events.length === 1, "the acknowledgement");
    first.close();

    // Resumed with B added, whose watch begins now: B is announced (nobody can tell what it missed), A is not.
    const second = await listen(two.url, [A, B], cursorOf(first.events[0]));
    streams.push(second);
    await eventually(() => updates(second).length === 1, "the announcement of B").catch((e) => { throw new Error(e.message + JSON.stringify(second.events)); });
    second.close();
    // Resumed from that announcement's cursor: nothing to tell; the first update is the live one.
    const third = await listen(one.url, [A, B], cursorOf(updates(second)[0]));
    streams.push(third);
    await eventually(() => third.events.length === 1, "the acknowledgement");
    server.emitUpdate("test://static/a");
    await eventually(() => updates(third).length >= 1, "the live update");
    expect(described(updates(second))).toEqual([B]);
    expect(described(updates(third))).toEqual([A]);
    expect(third.events[0]?.data).toMatchObject({ params: { _meta: { "io.mcp-broker/resumed": "exact" } } });
  });

  it("announces a subscription nobody could tell about once: resumed from that announcement's id, on another broker, it is not announced again, and ids never go back", async () => {
    await fresh();
    const [one, two] = [await broker(), await broker()];
    const sessionId = await initialize(one.url);
    await subscribe(one.url, sessionId, A);
    const first = await stream(one.url, sessionId);
    server.emitUpdate("test://static/a");
    await eventually(() => updates(first).length === 1, "the update on the first broker");
    const seen = updates(first)[0]?.id ?? "";
    first.close();
    await first.ended;
    // The cluster moves on: an update of what only another session holds, on the second broker.
    const keeper = await initialize(two.url);
    await subscribe(two.url, keeper, "leg+test://items/c");
    const kept = await stream(two.url, keeper);
    server.emitUpdate("test://items/c");
    await eventually(() => updates(kept).length === 1, "the other session's update");
    // Subscribed after that: its watch began after the last event the client saw, so nobody can tell what it missed.
    await subscribe(one.url, sessionId, B);

    const second = await stream(two.url, sessionId, seen);
    await eventually(() => updates(second).length === 1, "the announcement of B");
    const announced = updates(second)[0]?.id ?? "";
    second.close();
    await second.ended;
    // Resumed from that announcement on the first broker: nothing to tell; the first update is the live one.
    const third = await stream(one.url, sessionId, announced);
    await eventually(() => one.broker.sessions.legacySession(sessionId, "anonymous") !== undefined, "the first broker to adopt the session again");
    server.emitUpdate("test://static/a");
    await eventually(() => updates(third).length >= 1, "the live update");
    expect(described(updates(second))).toEqual([B]);
    expect(described(updates(third))).toEqual([A]);
    const position = (id: string) => Number(id.split(".")[0]);
    expect(position(announced)).toBeGreaterThan(position(updates(kept)[0]?.id ?? ""));
  });

  it("announces everything once for a forged or malformed Last-Event-ID, and for a cursor of another principal or cluster", async () => {
    await fresh();
    const [one, two] = [await broker(), await broker()];
    const sessionId = await initialize(one.url);
    await subscribe(one.url, sessionId, A);
    const everything = [A, "notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed"];
    for (const [url, lastEventId] of [
      [two.url, "999999999999"],
      [one.url, "abc"],
      [two.url, "1.0"],
    ] as const) {
      const resumed = await stream(url, sessionId, lastEventId);
      await eventually(() => resumed.events.length >= 4, `the re-announcement for ${lastEventId}`);
      expect(described(resumed.events), lastEventId).toEqual(everything);
    }
    for (const cursor of ["1:another-cluster:x:5", "garbage", 42]) {
      const resumed = await openSse(two.url, MODERN, { jsonrpc: "2.0", id: 5, method: "subscriptions/listen", params: { notifications: { resourceSubscriptions: [A] }, _meta: { ...MODERN_META, "io.mcp-broker/cursor": cursor } } });
      streams.push(resumed);
      await eventually(() => updates(resumed).length === 1, `the re-announcement for cursor ${String(cursor)}`);
      expect(resumed.events[0]?.data).toMatchObject({ params: { _meta: { "io.mcp-broker/resumed": "everything" } } });
    }
  });

  it("hands its sessions over when it stops gracefully: the stream ends with a retry, and another broker resumes it", async () => {
    await fresh();
    const leaving = await brokerProcess();
    const staying = await broker();
    const sessionId = await initialize(leaving.url);
    await subscribe(leaving.url, sessionId, A);
    const first = await stream(leaving.url, sessionId);
    server.emitUpdate("test://static/a");
    await eventually(() => updates(first).length === 1, "an update");
    const seen = updates(first)[0]?.id ?? "";
    leaving.child.kill("SIGTERM");
    await first.ended;
    expect(first.retry).toBeGreaterThan(0);
    const resumed = await stream(staying.url, sessionId, seen);
    server.emitUpdate("test://static/a");
    await eventually(() => updates(resumed).length >= 1, "updates on the broker that took it over", 10_000);
    expect(described(updates(resumed)).every((uri) => uri === A)).toBe(true);
  }, 30_000);
});
