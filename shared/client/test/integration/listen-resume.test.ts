import { describe, expect, it } from "vitest";
import type { FetchLike } from "@modelcontextprotocol/client";
import { BrokerClient } from "../../src/index.js";
import { startDemoBroker, tempFilesDir } from "../helpers/demo-broker.js";
import { eventually, firstText, nextEvent, record } from "../helpers/events.js";

const CURSOR = "io.mcp-broker/cursor";

/**
 * A fetch that lets the test cut the open listen stream (as a proxy's idle timeout would) and
 * hold the reopening, and records the `_meta` of every `subscriptions/listen` request.
 */
function listenControls(): { fetch: FetchLike; listens: Record<string, unknown>[]; cut(): void; hold(): () => void } {
  const listens: Record<string, unknown>[] = [];
  const open = new Set<AbortController>();
  let gate: Promise<void> | undefined;
  const fetchLike: FetchLike = async (url, init) => {
    const body = typeof init?.body === "string" ? (JSON.parse(init.body) as { method?: string; params?: { _meta?: Record<string, unknown> } }) : undefined;
    if (body?.method !== "subscriptions/listen") return fetch(url, init);
    listens.push(body.params?._meta ?? {});
    await gate;
    const controller = new AbortController();
    open.add(controller);
    const signals = [controller.signal, ...(init?.signal ? [init.signal] : [])];
    return fetch(url, { ...init, signal: AbortSignal.any(signals) });
  };
  return {
    fetch: fetchLike,
    listens,
    cut: () => {
      for (const controller of open) controller.abort(new Error("cut by the test"));
      open.clear();
    },
    hold: () => {
      let release = (): void => undefined;
      gate = new Promise<void>((resolve) => (release = resolve));
      return () => {
        gate = undefined;
        release();
      };
    },
  };
}

/** Cuts the open listen stream and holds its reopening while `meanwhile` runs. */
async function whileCut(controls: ReturnType<typeof listenControls>, meanwhile: () => Promise<unknown>): Promise<void> {
  const release = controls.hold();
  const reopening = controls.listens.length + 1;
  controls.cut();
  await eventually(() => controls.listens.length === reopening, "the listen stream to be reopened");
  await meanwhile();
  release();
}

describe("BrokerClient listen cursor against the broker (modern era)", () => {
  it("reopens a cut listen stream from its cursor: the updates missed meanwhile arrive as notifications, with no resync", async () => {
    const files = await tempFilesDir();
    const demo = await startDemoBroker(files.dir);
    const controls = listenControls();
    const client = new BrokerClient({ url: demo.url, era: "modern", fetch: controls.fetch, listChangedDebounceMs: 20, reconnect: { heartbeatIntervalMs: 0 } });
    try {
      await client.connect();
      await client.subscribeToResource("demo+demo://counter");
      expect(firstText(await client.readResource("demo+demo://counter"))).toBe("0");
      const one = nextEvent(client, "resourceContentChange", (d) => firstText(d.entry?.content) === "1");
      await client.callTool("demo__bump_counter");
      expect(await one).toMatchObject({ cause: "update", reason: "notification" });
      const first = controls.listens.at(-1);
      expect(first?.[CURSOR]).toBeUndefined(); // no notification had been seen before it opened

      // The stream is cut; two updates happen while it is away; then it reopens.
      const changes = record(client, "resourceContentChange");
      const toolLoads = record(client, "toolsChange");
      await whileCut(controls, async () => {
        await client.callTool("demo__bump_counter");
        await client.callTool("demo__bump_counter");
      });

      await eventually(() => changes.some((c) => firstText(c.entry?.content) === "3"), "the missed updates to be delivered");
      expect(controls.listens.at(-1)?.[CURSOR]).toMatch(/^1:/);
      // Resumed exactly: every change came as the broker's notification, no list was reloaded.
      expect(changes.every((c) => c.cause === "update" && c.reason === "notification")).toBe(true);
      expect(toolLoads).toEqual([]);
    } finally {
      await client.disconnect();
      await demo.close();
      await files.remove();
    }
  });

  it("reopens a stream cut before its first notification from the acknowledgement's cursor, and changes its filter without one", async () => {
    const files = await tempFilesDir();
    const demo = await startDemoBroker(files.dir);
    const controls = listenControls();
    const client = new BrokerClient({ url: demo.url, era: "modern", fetch: controls.fetch, listChangedDebounceMs: 20, reconnect: { heartbeatIntervalMs: 0 } });
    try {
      await client.connect();
      await client.subscribeToResource("demo+demo://counter");
      expect(firstText(await client.readResource("demo+demo://counter"))).toBe("0");
      // Replacing the open stream to change the filter: no resumption (the open one covers the overlap).
      expect(controls.listens.map((meta) => meta[CURSOR])).toEqual([undefined, undefined]);

      const changes = record(client, "resourceContentChange");
      const toolLoads = record(client, "toolsChange");
      await whileCut(controls, () => client.callTool("demo__bump_counter"));

      await eventually(() => changes.some((c) => firstText(c.entry?.content) === "1"), "the missed update to be delivered");
      expect(controls.listens.at(-1)?.[CURSOR]).toMatch(/^1:/);
      expect(changes.every((c) => c.cause === "update" && c.reason === "notification")).toBe(true);
      expect(toolLoads).toEqual([]);
    } finally {
      await client.disconnect();
      await demo.close();
      await files.remove();
    }
  });

  it("rejects a subscription the broker leaves out of the listen filter with the broker's reason (data.error), as the legacy era gets it", async () => {
    const files = await tempFilesDir();
    const demo = await startDemoBroker(files.dir, 0, { maxPerSession: 1 });
    const client = new BrokerClient({ url: demo.url, era: "modern", reconnect: { heartbeatIntervalMs: 0 } });
    try {
      await client.connect();
      await client.subscribeToResource("demo+demo://counter");
      await expect(client.subscribeToResource("demo+demo://clock")).rejects.toMatchObject({
        name: "BrokerClientError",
        code: "SUBSCRIPTION_REFUSED",
        message: expect.stringContaining("at most 1 per session") as unknown,
        data: { uri: "demo+demo://clock", error: { code: -32010, data: { limit: "session", max: 1 } } },
      });
      expect(client.getSubscribedResources()).toEqual(["demo+demo://counter"]);
    } finally {
      await client.disconnect();
      await demo.close();
      await files.remove();
    }
  });
});
