import type { Client } from "@modelcontextprotocol/client";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, type HttpBackend } from "../fixtures/http-backends.js";
import { createTestServer } from "../fixtures/test-server.js";
import { connectClient, eventually, startBroker, startEngineBrokers, type RunningBroker } from "../helpers/harness.js";
import { raw } from "../helpers/raw-http.js";

const ADMIN_KEY = "console-admin-key-0123456789";

interface Row {
  uri: string;
  backend: string;
  name: string;
  subscribers: number;
  upstream: string;
  listed: boolean;
}

async function api(running: RunningBroker, path: string, headers: Record<string, string | undefined> = {}): Promise<{ status: number; body: string; json: unknown }> {
  const response = await raw(new URL(`/console/api/${path}`, running.url).href, { method: "GET", headers });
  let json: unknown;
  try {
    json = JSON.parse(response.body);
  } catch {
    json = undefined;
  }
  return { status: response.status, body: response.body, json };
}

/**
 * The operator console's API: who may read it, and what it says. Resources with their cluster-wide
 * subscriber count and upstream state (on the Redis engine, a subscription made on another instance
 * counts), backends with the instance that watches each.
 */
describe.each(["memory", "redis"] as const)("console API on the %s engine", (engine) => {
  let pushing: HttpBackend;
  let polled: HttpBackend;
  let brokers: RunningBroker[] = [];
  let closeBrokers: () => Promise<void> = async () => undefined;
  let clients: Client[] = [];

  beforeAll(async () => {
    pushing = await startLegacyHttpBackend(createTestServer({ name: "pushing" }));
    polled = await startLegacyHttpBackend(createTestServer({ name: "polled", subscribe: false }));
    ({ brokers, close: closeBrokers } = await startEngineBrokers(engine, {
      backends: [
        { id: "push", url: pushing.url, era: "legacy" },
        { id: "poll", url: polled.url, era: "legacy", pollIntervalMs: 60_000 },
      ],
      console: { enabled: true },
      subscriptions: { releaseGraceMs: 50 },
    }));
  }, 60_000);

  afterEach(async () => {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
    clients = [];
  });

  afterAll(async () => {
    await closeBrokers();
    await Promise.all([pushing?.close(), polled?.close()]);
  });

  const first = () => brokers[0] as RunningBroker;
  const last = () => brokers.at(-1) as RunningBroker;
  const rows = async () => ((await api(first(), "resources")).json as { resources: Row[] }).resources;
  const row = async (uri: string) => (await rows()).find((r) => r.uri === uri);

  it("shows every resource with its subscribers across the cluster and how it is watched upstream", async () => {
    expect(await row("push+test://static/a")).toEqual({ uri: "push+test://static/a", backend: "push", name: "static-a", mimeType: "text/plain", subscribers: 0, upstream: "none", listed: true });
    const legacy = await connectClient(last().url, "legacy");
    const modern = await connectClient(last().url, "modern");
    clients.push(legacy, modern);
    await legacy.subscribeResource({ uri: "push+test://static/a" });
    const listen = await modern.listen({ resourceSubscriptions: ["push+test://static/a", "push+test://items/9", "poll+test://static/b"] });
    expect(await row("push+test://static/a")).toMatchObject({ subscribers: 2, upstream: "subscribed" });
    expect(await row("poll+test://static/b")).toMatchObject({ subscribers: 1, upstream: "polling" });
    // Subscribed but not listed: a template match.
    expect(await row("push+test://items/9")).toEqual({ uri: "push+test://items/9", backend: "push", name: "push+test://items/9", subscribers: 1, upstream: "subscribed", listed: false });
    await listen.close();
    await legacy.unsubscribeResource({ uri: "push+test://static/a" });
    await eventually(async () => (await row("push+test://static/a"))?.subscribers === 0 && (await row("push+test://items/9")) === undefined, "the counts back at 0");
    expect(await row("poll+test://static/b")).toMatchObject({ subscribers: 0, upstream: "none" });
  });

  it("lists every broker's legacy sessions and listen streams, with what each subscribes to", async () => {
    const legacy = await connectClient(first().url, "legacy");
    const modern = await connectClient(last().url, "modern");
    clients.push(legacy, modern);
    await legacy.subscribeResource({ uri: "push+test://static/a" });
    const listen = await modern.listen({ resourceSubscriptions: ["push+test://static/b"] });
    const sessionId = (legacy.transport as { sessionId?: string }).sessionId ?? "";
    type Census = { instance: string; self: boolean; legacy: { count: number; sessions: { sessionId: string; subscriptions: string[]; principal: string }[] }; listens: { count: number; streams: { subscriptions: string[] }[] } };
    const { instances } = (await api(first(), "sessions")).json as { instances: Census[] };
    // One entry per broker of the cluster, the answering one first.
    expect(instances.length).toBe(brokers.length);
    expect(instances[0]?.self).toBe(true);
    const sessions = instances.flatMap((i) => i.legacy.sessions);
    expect(sessions.find((s) => s.sessionId === sessionId)).toMatchObject({ principal: "anonymous", subscriptions: ["push+test://static/a"] });
    expect(instances.flatMap((i) => i.listens.streams).map((s) => s.subscriptions)).toContainEqual(["push+test://static/b"]);
    // The listen stream is on the last broker: on the Redis engine another instance than the first.
    expect(instances.at(-1)?.listens.count).toBe(1);
    expect((await api(first(), "sessions?limit=0")).status).toBe(400);
    await listen.close();
  });

  it("bounds its answers: thousands of KB of subscribed URIs neither crash the broker nor flood the bus", async () => {
    const legacy = await connectClient(last().url, "legacy");
    clients.push(legacy);
    // URIs of 15 000 control characters: 90 000 characters each in JSON (the resource's name repeats it).
    const huge = (i: number) => `push+test://items/${String(i).padStart(3, "0")}${"\u0001".repeat(15_000)}`;
    for (let i = 0; i < 60; i++) await legacy.subscribeResource({ uri: huge(i) });
    const resources = await api(first(), "resources");
    expect(resources.status).toBe(200);
    const body = resources.json as { resources: Row[]; truncated?: boolean; total?: number };
    expect(body.truncated).toBe(true);
    expect(body.total).toBeGreaterThan(body.resources.length);
    expect(resources.body.length).toBeLessThan(9 * 1024 * 1024);
    const census = await api(first(), "sessions");
    expect(census.status).toBe(200);
    const { instances } = census.json as { instances: { instance: string; legacy: { count: number; sessions: { subscriptions: string[] }[] } }[] };
    // Every broker answered (on Redis, the other one over the bus), each URI shortened for the view.
    expect(instances.length).toBe(brokers.length);
    const listed = instances.flatMap((i) => i.legacy.sessions).find((s) => s.subscriptions.length === 60);
    expect(listed?.subscriptions[0]).toHaveLength(513);
    expect(census.body.length).toBeLessThan(brokers.length * 1024 * 1024);
    expect((await raw(new URL("/healthz", first().url).href, { method: "GET" })).status).toBe(200);
    for (let i = 0; i < 60; i++) await legacy.unsubscribeResource({ uri: huge(i) });
  }, 60_000);

  it("feeds updates cluster-wide and list changes with their diffs live, and shows each resource's last update", async () => {
    const feed = await openFeed(first());
    try {
      const legacy = await connectClient(last().url, "legacy");
      clients.push(legacy);
      await legacy.subscribeResource({ uri: `push+test://items/fed-${engine}` });
      // The watcher copies updates for the feed once it heard the console (it announces itself at once).
      await eventually(async () => {
        await legacy.callTool({ name: "push__emit_update", arguments: { uri: `test://items/fed-${engine}` } });
        await new Promise((resolve) => setTimeout(resolve, 300));
        return feed.events.some((e) => e.event === "update");
      }, "an update in the feed");
      const update = feed.events.find((e) => e.event === "update")?.data as { instance: string; updates: { backend: string; uri: string; at: number }[]; dropped: number };
      expect(update.updates[0]).toEqual({ backend: "push", uri: `push+test://items/fed-${engine}`, at: expect.any(Number) });
      expect(update.dropped).toBe(0);
      const shown = await row(`push+test://items/fed-${engine}`);
      expect(shown).toMatchObject({ subscribers: 1, upstream: "subscribed", lastUpdate: expect.any(Number) });
      expect((shown as Row & { lastUpdate: number }).lastUpdate).toBeGreaterThanOrEqual(update.updates[0]!.at);
      // Never updated since its watch began: no time.
      expect(await row("push+test://static/b")).not.toHaveProperty("lastUpdate");
      await legacy.callTool({ name: "push__add_tool", arguments: { name: `fed_${engine}` } });
      await eventually(() => feed.events.some((e) => e.event === "list_changed"), "a list change in the feed");
      expect(feed.events.find((e) => e.event === "list_changed")?.data).toEqual({ list: "tools", at: expect.any(Number), changes: { tools: { added: [`push__fed_${engine}`], removed: [], changed: [] } } });
      await legacy.callTool({ name: "push__remove_tool", arguments: { name: `fed_${engine}` } });
      await legacy.unsubscribeResource({ uri: `push+test://items/fed-${engine}` });
    } finally {
      feed.close();
    }
  });

  it("shows each backend's state and the instance that watches it for the cluster", async () => {
    const { instance } = (await (await fetch(new URL("/readyz", first().url))).json()) as { instance: string };
    const { backends } = (await api(first(), "backends")).json as { backends: { id: string; state: string; watcher?: string; watching: boolean }[] };
    expect(backends.map((b) => b.id)).toEqual(["push", "poll"]);
    for (const backend of backends) {
      expect(backend.state).toBe("connected");
      expect(backend.watcher).toEqual(expect.any(String));
      expect(backend.watching).toBe(backend.watcher === instance);
    }
  });
});

/** Reads a console feed's Server-Sent Events as they come. */
async function openFeed(running: RunningBroker, headers: Record<string, string> = {}): Promise<{ status: number; events: { event: string; data: unknown }[]; close: () => void }> {
  const controller = new AbortController();
  const response = await fetch(new URL("/console/api/feed", running.url), { headers, signal: controller.signal });
  const events: { event: string; data: unknown }[] = [];
  if (response.ok && response.body !== null) {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    void (async () => {
      let buffer = "";
      for (;;) {
        const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
        if (done) return;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const event = /^event: (.*)$/m.exec(frame)?.[1];
          const data = /^data: (.*)$/m.exec(frame)?.[1];
          if (event !== undefined && data !== undefined) events.push({ event, data: JSON.parse(data) });
        }
      }
    })();
  }
  return { status: response.status, events, close: () => controller.abort() };
}

describe("console API access", () => {
  let backend: HttpBackend;
  const running: RunningBroker[] = [];

  beforeAll(async () => {
    backend = await startLegacyHttpBackend(createTestServer({ name: "b" }));
  });

  afterAll(async () => {
    await Promise.all(running.map((r) => r.close()));
    await backend?.close();
  });

  async function broker(console?: { enabled: boolean; adminKeys?: string[] }): Promise<RunningBroker> {
    const started = await startBroker({ backends: [{ id: "b", url: backend.url, era: "legacy" }], ...(console !== undefined && { console }) });
    running.push(started);
    return started;
  }

  it("shows the aggregated catalog with each item's backend, and the tools held back", async () => {
    const started = await startBroker({ backends: [{ id: "b", url: backend.url, era: "legacy", pinnedTools: { add: "AAAAAAAAAAAAAAAAAAAAAA" } }], console: { enabled: true } });
    await eventually(async () => ((await api(started, "catalog")).json as { held: unknown[] }).held.length > 0, "the gate to hold the backend's tools");
    running.push(started);
    const { json } = await api(started, "catalog");
    const catalog = json as { tools: { name: string; backend: string }[]; resources: { uri: string; backend: string }[]; resourceTemplates: { uriTemplate: string }[]; held: { exposedName: string; name: string; backendId: string }[] };
    // With pinnedTools only pinned definitions pass: none of b's tools here (the pin matches nothing).
    expect(catalog.tools.filter((tool) => tool.backend === "b")).toEqual([]);
    expect(catalog.tools).toContainEqual(expect.objectContaining({ name: "search_resources" }));
    expect(catalog.held).toContainEqual(expect.objectContaining({ exposedName: "b__echo", name: "echo", backendId: "b" }));
    expect(catalog.resources).toContainEqual(expect.objectContaining({ uri: "b+test://static/a", backend: "b" }));
    expect(catalog.resourceTemplates).toContainEqual(expect.objectContaining({ uriTemplate: "b+test://items/{id}" }));
    expect(catalog.held).toContainEqual(expect.objectContaining({ exposedName: "b__add", name: "add", backendId: "b" }));
  });

  it("is not served unless console.enabled", async () => {
    expect((await api(await broker(), "resources")).status).toBe(404);
  });

  it("without admin keys, answers this machine only: a forwarded request or another Host gets 403", async () => {
    const open = await broker({ enabled: true });
    expect((await api(open, "resources")).status).toBe(200);
    expect((await api(open, "resources", { "x-forwarded-for": "203.0.113.7" })).status).toBe(403);
    expect((await api(open, "resources", { forwarded: "for=203.0.113.7" })).status).toBe(403);
    expect((await api(open, "backends", { host: "evil.example.com" })).status).toBe(403);
    expect((await api(open, "nothing-here")).status).toBe(404);
  });

  it("serves its page at /console/ and the page's assets, nothing else", async () => {
    const open = await broker({ enabled: true });
    const get = (path: string) => raw(new URL(path, open.url).href, { method: "GET", headers: {} });
    const redirect = await get("/console");
    expect(redirect.status).toBe(308);
    expect(redirect.headers.location).toBe("/console/");
    const page = await get("/console/");
    expect(page.status).toBe(200);
    expect(page.headers["content-security-policy"]).toContain("default-src 'self'");
    expect(page.body).toContain('src="assets/app.js"');
    const script = await get("/console/assets/app.js");
    expect(script.status).toBe(200);
    expect(script.headers["content-type"]).toBe("text/javascript; charset=utf-8");
    expect((await get("/console/assets/app.css")).headers["content-type"]).toBe("text/css; charset=utf-8");
    for (const path of ["/console/assets/../../package.json", "/console/assets/%2e%2e%2fcli.js", "/console/assets/missing.js", "/console/index.html"]) expect((await get(path)).status).toBe(404);
    expect((await raw(new URL("/console/", open.url).href, { method: "POST", headers: {} })).status).toBe(405);
  });

  it("with admin keys, asks for one (Bearer) from anywhere, and its answers name no session", async () => {
    const keyed = await broker({ enabled: true, adminKeys: [ADMIN_KEY] });
    const client = await connectClient(keyed.url, "legacy");
    await client.subscribeResource({ uri: "b+test://static/a" });
    const sessionId = (client.transport as { sessionId?: string } | undefined)?.sessionId ?? "";
    expect(sessionId).not.toBe("");
    const missing = await api(keyed, "resources");
    expect(missing.status).toBe(401);
    expect(missing.body).not.toContain(sessionId);
    expect((await api(keyed, "resources", { authorization: "Bearer wrong-key-wrong-key-wrong" })).status).toBe(401);
    const allowed = await api(keyed, "resources", { authorization: `Bearer ${ADMIN_KEY}`, "x-forwarded-for": "203.0.113.7" });
    expect(allowed.status).toBe(200);
    expect(allowed.json).toMatchObject({ resources: expect.arrayContaining([expect.objectContaining({ uri: "b+test://static/a", subscribers: 1 })]) });
    expect(allowed.body).not.toContain(sessionId);
    // The sessions API names sessions: only with the key.
    const sessionsWithout = await api(keyed, "sessions");
    expect(sessionsWithout.status).toBe(401);
    expect(sessionsWithout.body).not.toContain(sessionId);
    expect((await api(keyed, "sessions", { authorization: `Bearer ${ADMIN_KEY}` })).body).toContain(sessionId);
    // The page and the feed too; a browser gets a Basic challenge and may give the key as its password.
    const page = await raw(new URL("/console/", keyed.url).href, { method: "GET", headers: {} });
    expect(page.status).toBe(401);
    expect(page.headers["www-authenticate"]).toMatch(/^Basic realm="mcp-broker console"/);
    expect(page.body).not.toContain(sessionId);
    expect((await openFeed(keyed)).status).toBe(401);
    const basic = (password: string) => ({ authorization: `Basic ${Buffer.from(`admin:${password}`).toString("base64")}` });
    expect((await raw(new URL("/console/", keyed.url).href, { method: "GET", headers: basic("wrong-key-wrong-key-wrong") })).status).toBe(401);
    const withKey = await raw(new URL("/console/", keyed.url).href, { method: "GET", headers: basic(ADMIN_KEY) });
    expect(withKey.status).toBe(200);
    expect(withKey.headers["content-type"]).toBe("text/html; charset=utf-8");
    const feed = await openFeed(keyed, basic(ADMIN_KEY));
    expect(feed.status).toBe(200);
    feed.close();
    await client.close();
  });
});

describe("console API: a subscribed resource whose backend is down", () => {
  it("says its upstream is unavailable, not polling, until the backend is back", async () => {
    const server = createTestServer({ name: "flaky" });
    let backend = await startLegacyHttpBackend(server);
    const port = new URL(backend.url).port;
    const running = await startBroker({
      backends: [{ id: "b", url: backend.url, era: "legacy", reconnect: { initialDelayMs: 50, maxDelayMs: 200 }, healthIntervalMs: 200 }],
      console: { enabled: true },
    });
    const client = await connectClient(running.url, "legacy");
    try {
      await client.subscribeResource({ uri: "b+test://static/a" });
      const upstream = async () => ((await api(running, "resources")).json as { resources: Row[] }).resources.find((r) => r.uri === "b+test://static/a")?.upstream;
      expect(await upstream()).toBe("subscribed");
      await backend.close();
      await eventually(() => running.broker.pool.get("b").state !== "connected", "the backend seen down");
      expect(await upstream()).toBe("unavailable");
      backend = await startLegacyHttpBackend(server, Number(port));
      await eventually(async () => (await upstream()) === "subscribed", "the backend back");
    } finally {
      await client.close();
      await running.close();
      await backend.close();
    }
  });
});
