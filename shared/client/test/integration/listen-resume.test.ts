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
function listenControls(): { fetch: FetchLike; listens: Record<string, unknown>[]; cut(): void; hold(): () => void; offline(on: boolean): void; discovers(): number } {
  const listens: Record<string, unknown>[] = [];
  const open = new Set<AbortController>();
  let gate: Promise<void> | undefined;
  let down = false;
  let discovers = 0;
  const fetchLike: FetchLike = async (url, init) => {
    if (down) throw new TypeError("fetch failed (offline in the test)");
    const body = typeof init?.body === "string" ? (JSON.parse(init.body) as { method?: string; params?: { _meta?: Record<string, unknown> } }) : undefined;
    if (body?.method === "server/discover") discovers++;
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
    offline: (on) => (down = on),
    discovers: () => discovers,
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

/** A modern client (through `listenControls`) on a fresh demo broker; everything is closed after `run`. */
async function withControlledClient(
  reconnect: Record<string, number>,
  run: (scenario: { demo: Awaited<ReturnType<typeof startDemoBroker>>; controls: ReturnType<typeof listenControls>; client: BrokerClient }) => Promise<void>,
): Promise<void> {
  const files = await tempFilesDir();
  const demo = await startDemoBroker(files.dir);
  const controls = listenControls();
  const client = new BrokerClient({ url: demo.url, era: "modern", fetch: controls.fetch, listChangedDebounceMs: 20, reconnect: { heartbeatIntervalMs: 0, ...reconnect } });
  try {
    await run({ demo, controls, client });
  } finally {
    await client.disconnect();
    await demo.close();
    await files.remove();
  }
}

describe("BrokerClient listen cursor against the broker (modern era)", () => {
  it("reopens a cut listen stream from its cursor: the updates missed meanwhile arrive as notifications, with no resync", async () => {
    await withControlledClient({}, async ({ controls, client }) => {
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
    });
  });

  it("reopens a stream cut before its first notification from the acknowledgement's cursor, and changes its filter without one", async () => {
    await withControlledClient({}, async ({ controls, client }) => {
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
    });
  });

  it("does not report a URI subscribed while the stream was away as updated: the stream resumes with what it held, then grows", async () => {
    await withControlledClient({}, async ({ controls, client }) => {
      await client.connect();
      await client.subscribeToResource("demo+demo://counter");
      const updated = record(client, "resourceUpdated");
      const changes = record(client, "resourceContentChange");
      const before = controls.listens.length;
      const probes = controls.discovers();
      controls.cut();
      // Seen as dropped: the client probes the server, and waits out a backoff (125-250 ms) before it reopens.
      await eventually(() => controls.discovers() > probes, "the probe after the drop");
      await client.subscribeToResource("demo+demo://clock");
      // Resumed with the counter (the cursor), then grown by the clock (none).
      expect(controls.listens.slice(before).map((meta) => typeof meta[CURSOR])).toEqual(["string", "undefined"]);
      await client.callTool("demo__bump_counter");
      await eventually(() => updated.some((u) => u.uri === "demo+demo://counter") || changes.some((c) => c.uri === "demo+demo://counter"), "the counter's update");
      expect(updated.filter((u) => u.uri === "demo+demo://clock" && u.reason !== "notification")).toEqual([]);
      expect(updated.filter((u) => u.reason === "resync")).toEqual([]);
      expect(updated.filter((u) => u.uri === "demo+demo://clock").length).toBeLessThanOrEqual(updated.filter((u) => u.uri === "demo+demo://counter").length + 1);
    });
  });

  it("reports a gap when the stream it replaced to add a URI had broken before the client noticed (nothing resumed it)", async () => {
    await withControlledClient({}, async ({ controls, client }) => {
      await client.connect();
      await client.subscribeToResource("demo+demo://counter");
      const updated = record(client, "resourceUpdated");
      const before = controls.listens.length;
      // Cut, and in the same turn a subscribe replaces the stream (without a cursor: it looked open).
      controls.cut();
      await client.subscribeToResource("demo+demo://clock");
      expect(controls.listens.slice(before).map((meta) => typeof meta[CURSOR])).toEqual(["undefined"]);
      // The cut stream ends before the new one is acknowledged (a drop, then the new stream ends it, with no resumption):
      // what was sent in between is lost, and each subscription is reported once.
      await eventually(() => updated.some((u) => u.uri === "demo+demo://counter" && u.reason === "resync"), "the counter resynced");
    });
  });

  it("does not resync after a reconnect whose listen stream the broker resumed exactly: what changed meanwhile arrives as notifications", async () => {
    await withControlledClient({ initialDelayMs: 50, maxDelayMs: 200 }, async ({ demo, controls, client }) => {
      const other = new BrokerClient({ url: demo.url, era: "modern", reconnect: { heartbeatIntervalMs: 0 } });
      try {
        await client.connect();
        await other.connect();
        await client.subscribeToResource("demo+demo://counter");
        expect(firstText(await client.readResource("demo+demo://counter"))).toBe("0");
        const changes = record(client, "resourceContentChange");
        const updated = record(client, "resourceUpdated");
        const reconnecting = nextEvent(client, "connectionChange", (d) => d.state === "reconnecting");
        controls.offline(true);
        controls.cut();
        await reconnecting;
        await other.callTool("demo__bump_counter");
        const connected = nextEvent(client, "connectionChange", (d) => d.state === "connected");
        controls.offline(false);
        await connected;
        await eventually(() => changes.some((c) => firstText(c.entry?.content) === "1"), "the update made while the client was away");
        expect(controls.listens.at(-1)?.[CURSOR]).toMatch(/^1:/);
        expect([...changes.map((c) => (c.cause === "update" ? c.reason : c.cause)), ...updated.map((u) => u.reason)].filter((reason) => reason === "resync")).toEqual([]);
      } finally {
        await other.disconnect();
      }
    });
  });

  it("reports a listen stream the broker refuses (the principal's session limit) as an error, and hears list changes once a reopen gets through", async () => {
    const files = await tempFilesDir();
    const demo = await startDemoBroker(files.dir, 0, {}, { maxSessionsPerPrincipal: 1 });
    const holder = new BrokerClient({ url: demo.url, era: "legacy", reconnect: { heartbeatIntervalMs: 0 } });
    const client = new BrokerClient({ url: demo.url, era: "modern", listChangedDebounceMs: 20, reconnect: { heartbeatIntervalMs: 0 } });
    try {
      await holder.connect();
      const refused = nextEvent(client, "error", (e) => e.operation === "listen");
      await client.connect();
      expect((await refused).error).toMatchObject({ code: -32011 });
      await holder.disconnect();
      // The stream is reopened after a backoff (at most 10 s): then the broker holds it, and a change is heard.
      await eventually(() => demo.broker.sessions.listenCount() === 1, "the listen stream to be reopened", 20_000);
      const tools = client.getTools().length;
      const changed = nextEvent(client, "toolsChange", (e) => e.tools.length > tools);
      await client.callTool("demo__toggle_extra_tool");
      await changed;
    } finally {
      await client.disconnect();
      await holder.disconnect();
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
