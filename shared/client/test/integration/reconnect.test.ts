import { describe, expect, it } from "vitest";
import { BrokerClient } from "../../src/index.js";
import { startDemoBroker, tempFilesDir } from "../helpers/demo-broker.js";
import { eventually, firstText, nextEvent, noPendingSubscriptions, record } from "../helpers/events.js";

/**
 * A broker restart: the broker is closed and a new one starts on the same port. The client must
 * notice, reconnect with backoff, re-subscribe by itself (the new broker's backend may still be
 * starting: the subscription waits as pending until the broker knows the URI) and receive the
 * new broker's updates.
 */
describe.each(["legacy", "modern"] as const)("reconnect across a broker restart (%s)", (era) => {
  it("re-subscribes by itself and receives updates from the new broker", async () => {
    const files = await tempFilesDir();
    const first = await startDemoBroker(files.dir);
    const client = new BrokerClient({
      url: first.url,
      era,
      listChangedDebounceMs: 20,
      reconnect: { initialDelayMs: 50, maxDelayMs: 400 },
    });
    let second: Awaited<ReturnType<typeof startDemoBroker>> | undefined;
    try {
      await client.connect();
      await client.subscribeToResource("demo+demo://counter");
      await client.readResource("demo+demo://counter");
      const states = record(client, "connectionChange");

      const reconnecting = nextEvent(client, "connectionChange", (d) => d.state === "reconnecting");
      await first.close();
      expect((await reconnecting).error).toMatchObject({ code: "CONNECTION_LOST" });
      // Nothing is forgotten while the server is away.
      expect(client.getSubscribedResources()).toEqual(["demo+demo://counter"]);
      expect(firstText(client.cache.getResource("demo+demo://counter")?.content)).toBe("0");

      const connected = nextEvent(client, "connectionChange", (d) => d.state === "connected");
      second = await startDemoBroker(files.dir, first.port);
      const restarted = second;
      expect((await connected).era).toBe(era);
      await noPendingSubscriptions(client);
      await eventually(() => restarted.broker.upstream.watched("demo").includes("demo://counter"), "the new broker to watch the counter");
      expect(states.filter((s) => s.state === "reconnecting").length).toBeGreaterThanOrEqual(1);

      // The new broker listed no resources while its backend was starting, so the cached counter
      // was dropped (gone items lose their content); cache it again. The new backend's counter
      // starts at 0: two bumps give 2, which only an update from the new broker can bring.
      expect(firstText(await client.readResource("demo+demo://counter"))).toBe("0");
      const two = nextEvent(client, "resourceContentChange", (d) => firstText(d.entry?.content) === "2");
      await client.callTool("demo__bump_counter");
      await client.callTool("demo__bump_counter");
      await two;
      expect(client.getSubscribedResources()).toEqual(["demo+demo://counter"]);
    } finally {
      await client.disconnect();
      await second?.close();
      await files.remove();
    }
  });
});
