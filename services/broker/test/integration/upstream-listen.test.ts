import type { Client } from "@modelcontextprotocol/client";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startModernHttpBackend, type HttpBackend } from "../fixtures/http-backends.js";
import { startFaultProxy, type FaultProxy } from "../fixtures/fault-proxy.js";
import { createTestServer, type TestServer } from "../fixtures/test-server.js";
import { collectUpdates, connectClient, eventually, startBroker, type RunningBroker } from "../helpers/harness.js";

/** The one upstream `subscriptions/listen` stream of a modern backend: few reopens, and only honored URIs count. */
describe("upstream: the listen stream towards a modern backend", () => {
  let server: TestServer;
  let backend: HttpBackend;
  let proxy: FaultProxy;
  let running: RunningBroker;
  let clients: Client[] = [];

  beforeAll(async () => {
    server = createTestServer({ name: "listen-upstream" });
    backend = await startModernHttpBackend(server);
    proxy = await startFaultProxy(backend.url);
    running = await startBroker({
      backends: [{ id: "mod", url: proxy.url, era: "modern", reconnect: { initialDelayMs: 50, maxDelayMs: 200 } }],
      subscriptions: { releaseGraceMs: 50 },
    });
  }, 60_000);

  afterEach(async () => {
    proxy.narrowListens(undefined);
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
    clients = [];
  });

  afterAll(async () => {
    await running?.close();
    await proxy?.close();
    await backend?.close();
  });

  async function client(era: "legacy" | "modern"): Promise<Client> {
    const c = await connectClient(running.url, era);
    clients.push(c);
    return c;
  }

  const wantedUpstream = (): string[] => [...server.stats.openListens.values()].flatMap((f) => f.resourceSubscriptions ?? []);

  it("coalesces the filter changes of a 100-URI listen, and of its close, into a handful of upstream listen requests", async () => {
    const c = await client("modern");
    const uris = Array.from({ length: 100 }, (_, i) => `mod+test://items/${i}`);
    server.stats.resetCounters();
    const listen = await c.listen({ resourceSubscriptions: uris });
    expect(listen.honoredFilter.resourceSubscriptions).toHaveLength(100);
    await eventually(() => {
      const upstream = new Set(wantedUpstream());
      return uris.every((uri) => upstream.has(uri.slice("mod+".length)));
    }, "all 100 URIs in the upstream filter");
    // The broker subscribes a listen's URIs 16 at a time, each waiting for the upstream acknowledgement.
    expect(server.stats.listenCalls).toBeLessThanOrEqual(10);

    const beforeClose = server.stats.listenCalls;
    await listen.close();
    // Checked on the broker's side: under load the test backend (SDK handler behind the web
    // adapter) now and then keeps an aborted listen request on its books after the broker closed it.
    await eventually(() => running.broker.upstream.watched("mod").length === 0, "every URI released upstream");
    await eventually(() => {
      const streams = running.broker.pool.get("mod").listenStreams();
      return streams.length === 1 && streams[0]?.length === 0;
    }, "one upstream listen left, carrying no URIs");
    // One reopen when the releases land in one coalescing window; a loaded machine may spread them
    // over a few (before coalescing it was one per URI: 100).
    expect(server.stats.listenCalls - beforeClose).toBeLessThanOrEqual(3);
  });

  it("honors a client's subscription only once the backend's acknowledgement does, and refuses what the backend left out", async () => {
    proxy.narrowListens((uri) => !uri.includes("secret"));
    const modern = await client("modern");
    const listen = await modern.listen({ resourceSubscriptions: ["mod+test://static/a", "mod+test://items/secret-1"] });
    expect(listen.honoredFilter.resourceSubscriptions).toEqual(["mod+test://static/a"]);

    const legacy = await client("legacy");
    await expect(legacy.subscribeResource({ uri: "mod+test://items/secret-2" })).rejects.toMatchObject({ code: -32000 });
    await legacy.subscribeResource({ uri: "mod+test://static/b" });

    // The refused ones are not watched upstream.
    expect(running.broker.upstream.watched("mod").sort()).toEqual(["test://static/a", "test://static/b"]);
    await listen.close();
  });

  it("after a lost stream, re-notifies a URI once a stream honors it again, also when the first reopen left it out", async () => {
    const legacy = await client("legacy");
    const received = collectUpdates(legacy);
    await legacy.subscribeResource({ uri: "mod+test://static/a" });
    await legacy.subscribeResource({ uri: "mod+test://static/b" });
    const honored = (): string[] => running.broker.pool.get("mod").listenStreams().flat().sort();
    await eventually(() => honored().join() === "test://static/a,test://static/b", "one upstream listen carrying both");

    // The stream is cut; the backend honors only static/a on the reopens that follow.
    proxy.narrowListens((uri) => uri !== "test://static/b");
    proxy.refuseListens(0);
    await eventually(() => received.includes("mod+test://static/a"), "static/a re-notified after the gap");
    await eventually(() => honored().join() === "test://static/a", "a reopened stream without static/b");
    received.length = 0;
    server.emitUpdate("test://static/b"); // sent to no stream: nobody asked for it upstream now
    server.emitUpdate("test://static/a"); // a barrier: static/b, had it been sent, would be here by now
    await eventually(() => received.includes("mod+test://static/a"), "the barrier update");
    expect(received).not.toContain("mod+test://static/b");
    received.length = 0;

    proxy.narrowListens(undefined);
    await eventually(() => received.includes("mod+test://static/b"), "static/b re-notified once honored again");
    expect(honored()).toEqual(["test://static/a", "test://static/b"]);
  });
});
