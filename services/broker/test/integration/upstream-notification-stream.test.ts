import { describe, expect, it } from "vitest";
import { startLegacyHttpBackend } from "../fixtures/http-backends.js";
import { startFaultProxy } from "../fixtures/fault-proxy.js";
import { createTestServer } from "../fixtures/test-server.js";
import { collectUpdates, connectClient, eventually, startBroker } from "../helpers/harness.js";

/**
 * A legacy HTTP backend's notifications come on its standalone GET stream, which the SDK transport
 * reopens only a few times before giving up silently. The broker must notice and reconnect.
 */
describe("upstream: a legacy backend's notification stream", () => {
  it("cut for longer than the SDK's own retries last, is recovered by a reconnect that re-subscribes", async () => {
    const server = createTestServer({ name: "cut-stream" });
    const backend = await startLegacyHttpBackend(server);
    const proxy = await startFaultProxy(backend.url);
    const running = await startBroker({
      // No health probe during the test: only the stream watch can notice.
      backends: [{ id: "leg", url: proxy.url, era: "legacy", reconnect: { initialDelayMs: 50, maxDelayMs: 200 }, healthIntervalMs: 60_000 }],
      subscriptions: { releaseGraceMs: 0 },
    });
    const client = await connectClient(running.url, "legacy");
    try {
      const received = collectUpdates(client);
      await client.subscribeResource({ uri: "leg+test://static/a" });
      await eventually(() => proxy.openStandaloneStreams() === 1, "the broker's notification stream");

      // Longer than the SDK's default reopen attempts (1 s, then 2 s, then it gives up).
      proxy.cutStandaloneStreams(3_500);
      await new Promise((r) => setTimeout(r, 3_600));

      await eventually(
        async () => {
          server.emitUpdate("test://static/a");
          await new Promise((r) => setTimeout(r, 50));
          return received.length > 0;
        },
        "an update after the stream came back",
        5_000,
      );
      expect(new Set(received)).toEqual(new Set(["leg+test://static/a"]));
      expect(proxy.stats.refusedGets).toBeGreaterThan(2);
      expect(running.broker.pool.ready()).toBe(true);
    } finally {
      await client.close();
      await running.close();
      await proxy.close();
      await backend.close();
    }
  });

  it("cut briefly and reopened by the SDK itself, counts as a gap: lists are reloaded and watched resources re-notified", async () => {
    const server = createTestServer({ name: "short-cut" });
    const backend = await startLegacyHttpBackend(server);
    const proxy = await startFaultProxy(backend.url);
    const running = await startBroker({
      backends: [{ id: "leg", url: proxy.url, era: "legacy", reconnect: { initialDelayMs: 50, maxDelayMs: 200 }, healthIntervalMs: 60_000 }],
      subscriptions: { releaseGraceMs: 0 },
      lists: { debounceMs: 10 },
    });
    const client = await connectClient(running.url, "legacy");
    try {
      const received = collectUpdates(client);
      let listChanges = 0;
      client.setNotificationHandler("notifications/tools/list_changed", () => {
        listChanges++;
      });
      await client.subscribeResource({ uri: "leg+test://static/a" });
      await eventually(() => proxy.openStandaloneStreams() === 1, "the broker's notification stream");
      const sessions = backend.sessionIds();

      // Well within the SDK's own reopen attempts: the connection is never dropped.
      proxy.cutStandaloneStreams(300);
      await eventually(() => proxy.stats.refusedGets > 0, "a refused reopen: the stream is down");
      // Announced to nobody: the backend has no stream to send them on.
      server.addTool("added_in_gap");
      server.emitUpdate("test://static/a");

      await eventually(() => received.length > 0, "the watched resource re-notified after the gap");
      expect(new Set(received)).toEqual(new Set(["leg+test://static/a"]));
      await eventually(() => listChanges > 0, "tools/list_changed after the gap");
      const tools = await client.listTools();
      expect(tools.tools.map((t) => t.name)).toContain("leg__added_in_gap");
      expect(proxy.openStandaloneStreams()).toBe(1);
      expect(backend.sessionIds()).toEqual(sessions); // the same upstream session: no reconnect
    } finally {
      await client.close();
      await running.close();
      await proxy.close();
      await backend.close();
    }
  });
});
