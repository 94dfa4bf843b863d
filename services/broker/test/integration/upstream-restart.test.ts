import { describe, expect, it } from "vitest";
import { startModernHttpBackend } from "../fixtures/http-backends.js";
import { startFaultProxy } from "../fixtures/fault-proxy.js";
import { NotificationRecorder, updatedUri } from "../fixtures/notification-recorder.js";
import { createTestServer, type TestServer } from "../fixtures/test-server.js";
import { connectClient, eventually, startBroker } from "../helpers/harness.js";

const UPDATED = "notifications/resources/updated";
const TOOLS_CHANGED = "notifications/tools/list_changed";
const fast = { reconnect: { initialDelayMs: 50, maxDelayMs: 200 } };

function listensTo(server: TestServer, uri: string): boolean {
  return [...server.stats.openListens.values()].some((filter) => (filter.resourceSubscriptions ?? []).includes(uri));
}

/** A modern backend's one upstream listen stream survives the backend going away and coming back. */
describe("upstream: a modern backend's listen stream", () => {
  it("is reopened after the backend restarts (graceful close), and the backend's lists are reloaded", async () => {
    const server = createTestServer({ name: "restarting" });
    let backend = await startModernHttpBackend(server);
    const port = Number(new URL(backend.url).port);
    // No health probe during the test: the restart must be noticed through the listen stream alone.
    const running = await startBroker({
      backends: [{ id: "mod", url: backend.url, era: "modern", healthIntervalMs: 60_000, ...fast }],
      subscriptions: { releaseGraceMs: 0 },
      lists: { debounceMs: 20 },
    });
    const client = await connectClient(running.url, "modern");
    try {
      const notes = new NotificationRecorder(client, [UPDATED, TOOLS_CHANGED]);
      await client.listen({ resourceSubscriptions: ["mod+test://static/a"], toolsListChanged: true });
      expect(listensTo(server, "test://static/a")).toBe(true);

      await backend.close(); // graceful: the open listen stream gets its final result
      server.addTool("fresh"); // the restarted backend has another list, and nobody announces it
      backend = await startModernHttpBackend(server, port);

      await eventually(() => listensTo(server, "test://static/a"), "the broker to listen to the restarted backend", 5_000);
      // Nothing announced what changed during the gap: the subscriber is told once, conservatively.
      await notes.waitFor(UPDATED, (n) => updatedUri(n) === "mod+test://static/a");
      const mark = notes.mark();
      server.emitUpdate("test://static/a");
      await notes.waitFor(UPDATED, (n) => updatedUri(n) === "mod+test://static/a", { since: mark });
      await notes.waitFor(TOOLS_CHANGED);
      expect((await client.listTools()).tools.map((t) => t.name)).toContain("mod__fresh");
      expect(running.broker.pool.ready()).toBe(true);
    } finally {
      await client.close();
      await running.close();
      await backend.close();
    }
  });

  it("that stays down while the backend still answers health probes drops the connection, then recovers", async () => {
    const server = createTestServer({ name: "listen-refused" });
    const backend = await startModernHttpBackend(server);
    const proxy = await startFaultProxy(backend.url);
    const running = await startBroker({
      backends: [{ id: "mod", url: proxy.url, era: "modern", healthIntervalMs: 300, ...fast }],
      subscriptions: { releaseGraceMs: 0 },
    });
    const client = await connectClient(running.url, "modern");
    try {
      const notes = new NotificationRecorder(client, [UPDATED]);
      await client.listen({ resourceSubscriptions: ["mod+test://static/b"] });

      // server/discover still works; subscriptions/listen is cut and refused.
      proxy.refuseListens();
      await eventually(() => running.broker.pool.get("mod").state !== "connected", "the broker to treat the dead listen as a drop", 5_000);
      expect(running.broker.pool.ready()).toBe(false);

      proxy.restore();
      await eventually(
        async () => {
          server.emitUpdate("test://static/b");
          await new Promise((r) => setTimeout(r, 50));
          return notes.all(UPDATED, (n) => updatedUri(n) === "mod+test://static/b").length > 0;
        },
        "an update after the listen came back",
        10_000,
      );
      expect(running.broker.pool.get("mod").state).toBe("connected");
    } finally {
      await client.close();
      await running.close();
      await proxy.close();
      await backend.close();
    }
  });
});
