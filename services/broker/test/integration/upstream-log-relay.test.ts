import { describe, expect, it } from "vitest";
import { startLegacyHttpBackend } from "../fixtures/http-backends.js";
import { createTestServer } from "../fixtures/test-server.js";
import { connectClient, eventually, startBroker } from "../helpers/harness.js";

const ALICE = "alice-key-0123456789";
const BOB = "bob-key-0123456789ab";

/**
 * Backend log messages carry no request id: the broker forwards one only to a caller whose request
 * is the only one the backend is serving, counting the broker's own requests (polls, subscribes,
 * list reloads, health probes), which no client's call accounts for.
 */
describe("upstream: backend log messages", () => {
  it("do not reach a caller while the broker polls a resource on another principal's behalf", async () => {
    // No resources/subscribe: a subscription is served by polling, i.e. by reads of the broker's own.
    const server = createTestServer({ name: "log-relay", subscribe: false, logReads: true });
    const backend = await startLegacyHttpBackend(server);
    const running = await startBroker({
      backends: [{ id: "b", url: backend.url, era: "legacy", healthIntervalMs: 60_000, pollIntervalMs: 60_000 }],
      auth: {
        apiKeys: [
          { key: ALICE, principal: "alice" },
          { key: BOB, principal: "bob" },
        ],
      },
    });
    const alice = await connectClient(running.url, "legacy", { headers: { authorization: `Bearer ${ALICE}` } });
    const bob = await connectClient(running.url, "legacy", { headers: { authorization: `Bearer ${BOB}` } });
    try {
      const aliceLogs: string[] = [];
      alice.setNotificationHandler("notifications/message", (n) => {
        aliceLogs.push(String(n.params.data));
      });
      await alice.setLoggingLevel("debug");

      // With a progress token the slow tool logs once as it starts: alice's own log, which she gets.
      let aliceDone = false;
      const call = alice.callTool({ name: "b__slow", arguments: { ms: 1_500 } }, { onprogress: () => undefined }).finally(() => (aliceDone = true));
      await eventually(() => aliceLogs.some((line) => line.startsWith("slow: waiting")), "alice's own log");

      // Bob's subscription makes the broker read the resource (its first poll) while alice's call runs.
      await bob.subscribeResource({ uri: "b+test://static/b" });
      expect(aliceDone).toBe(false);
      await call;
      expect(aliceLogs.filter((line) => line.includes("test://static/b"))).toEqual([]);
    } finally {
      await alice.close();
      await bob.close();
      await running.close();
      await backend.close();
    }
  });
});
