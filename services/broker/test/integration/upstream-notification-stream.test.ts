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
});
