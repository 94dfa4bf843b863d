import { deleteKeys, testRedisUrl, uniquePrefix } from "@mcp-broker/shared/testing";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, type LegacyHttpBackend } from "../fixtures/http-backends.js";
import { createTestServer, type TestServer } from "../fixtures/test-server.js";
import { eventually, post, startBroker, type RunningBroker } from "../helpers/harness.js";
import { openSse } from "../helpers/raw-http.js";

const MODERN = { "mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen" };
const MODERN_META = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
const ACK = "notifications/subscriptions/acknowledged";
const TOOLS = "notifications/tools/list_changed";
const PROMPTS = "notifications/prompts/list_changed";
const RESOURCES = "notifications/resources/list_changed";
const UPDATED = "notifications/resources/updated";

type Stream = Awaited<ReturnType<typeof openSse>>;

const methods = (s: Stream) => s.events.map((e) => (e.data as { method?: string }).method ?? "(response)");
const count = (s: Stream, method: string) => methods(s).filter((m) => m === method).length;
const metaOf = (event: { data: unknown } | undefined) => (event?.data as { params: { _meta: Record<string, unknown> } }).params._meta;

/**
 * A backend dropping or coming back changes the lists clients see, as a stored version does: a
 * stream resumed from before such a change is told the list changed, exactly once, and one resumed
 * from after it is not told again. On the memory engine and across brokers on Redis, for a listen
 * cursor and a legacy session's Last-Event-ID.
 */
describe("resuming after a backend dropped or came back", () => {
  let stayServer: TestServer;
  let flakyServer: TestServer;
  let stay: LegacyHttpBackend;
  let flaky: LegacyHttpBackend;
  let flakyPort: number;
  let brokers: RunningBroker[] = [];
  let streams: Stream[] = [];
  let redis: { url: string; prefix: string } | undefined;
  let added = 0;

  afterEach(async () => {
    for (const stream of streams) stream.close();
    await Promise.all(brokers.map((b) => b.close().catch(() => undefined)));
    await Promise.all([stay?.close(), flaky?.close()]);
    if (redis !== undefined) await deleteKeys(redis.url, redis.prefix);
    brokers = [];
    streams = [];
    redis = undefined;
  });

  async function backends(): Promise<void> {
    stayServer = createTestServer({ name: "stays" });
    flakyServer = createTestServer({ name: "comes-and-goes" });
    stay = await startLegacyHttpBackend(stayServer);
    flaky = await startLegacyHttpBackend(flakyServer);
    flakyPort = Number(new URL(flaky.url).port);
  }

  async function broker(): Promise<RunningBroker> {
    const running = await startBroker({
      backends: [
        { id: "stay", url: stay.url, era: "legacy" },
        { id: "flaky", url: flaky.url, era: "legacy", reconnect: { initialDelayMs: 50, maxDelayMs: 200 }, healthIntervalMs: 100 },
      ],
      lists: { debounceMs: 50 },
      subscriptions: { releaseGraceMs: 0 },
      ...(redis !== undefined && { redisUrl: redis.url, redis: { keyPrefix: redis.prefix } }),
    });
    brokers.push(running);
    return running;
  }

  const hasFlakyTools = (running: RunningBroker) => running.broker.catalog.catalog.list("tools").some((tool) => tool.exposedKey.startsWith("flaky__"));

  async function listen(url: string, cursor?: unknown): Promise<Stream> {
    const stream = await openSse(url, MODERN, {
      jsonrpc: "2.0",
      id: 5,
      method: "subscriptions/listen",
      params: { notifications: { toolsListChanged: true }, _meta: { ...MODERN_META, ...(cursor !== undefined && { "io.mcp-broker/cursor": cursor }) } },
    });
    streams.push(stream);
    return stream;
  }

  /**
   * A change after everything else (the stay backend's tools), once each stream is acknowledged
   * (what a resumption tells goes out with its acknowledgement): once a stream has it, it has all
   * it was told before it. Then each stream has had `expected` tools list_changed.
   */
  async function barrier(...waits: [Stream, number][]): Promise<void> {
    const before = waits.map(([stream]) => count(stream, TOOLS));
    stayServer.addTool(`later_${++added}`);
    for (const [i, [stream]] of waits.entries()) await eventually(() => count(stream, TOOLS) === (before[i] ?? 0) + 1, "the barrier change");
    expect(waits.map(([stream]) => count(stream, TOOLS))).toEqual(waits.map(([, expected]) => expected));
  }

  async function dropFlaky(running: readonly RunningBroker[]): Promise<void> {
    await flaky.close();
    await eventually(() => running.every((b) => !hasFlakyTools(b)), "the dropped backend's tools gone");
  }

  async function restartFlaky(running: readonly RunningBroker[]): Promise<void> {
    flaky = await startLegacyHttpBackend(flakyServer, flakyPort);
    await eventually(() => running.every(hasFlakyTools), "the backend's tools back", 15_000);
  }

  it("memory engine: a listen resumed from before the drop, then from before the return, is told the tools changed once; one resumed from the announcement, nothing", async () => {
    await backends();
    const running = await broker();
    const cursorOf = (event: { data: unknown } | undefined) => metaOf(event)["io.mcp-broker/cursor"];

    const first = await listen(running.url);
    await eventually(() => first.events.length === 1, "the acknowledgement");
    first.close();
    // A stream that stays open sees the drop live.
    const live = await listen(running.url);
    await eventually(() => live.events.length === 1, "the acknowledgement");
    await dropFlaky([running]);
    await eventually(() => count(live, TOOLS) === 1, "the live announcement");
    live.close();

    const resumed = await listen(running.url, cursorOf(first.events[0]));
    const afterDrop = await listen(running.url, cursorOf(live.events[1]));
    await eventually(() => resumed.events.length >= 1 && afterDrop.events.length >= 1, "the acknowledgements");
    expect([metaOf(resumed.events[0])["io.mcp-broker/resumed"], metaOf(afterDrop.events[0])["io.mcp-broker/resumed"]]).toEqual(["exact", "exact"]);
    await barrier([resumed, 2], [afterDrop, 1]);
    expect(methods(resumed)).toEqual([ACK, TOOLS, TOOLS]);
    // Resumed from the live announcement of the drop: not told it again.
    expect(methods(afterDrop)).toEqual([ACK, TOOLS]);
    const seen = cursorOf(afterDrop.events.at(-1));
    resumed.close();
    afterDrop.close();

    const live2 = await listen(running.url);
    await eventually(() => live2.events.length === 1, "the acknowledgement");
    await restartFlaky([running]);
    await eventually(() => count(live2, TOOLS) === 1, "the live announcement");
    live2.close();
    const back = await listen(running.url, seen);
    const afterReturn = await listen(running.url, cursorOf(live2.events[1]));
    await eventually(() => back.events.length >= 1 && afterReturn.events.length >= 1, "the acknowledgements");
    expect([metaOf(back.events[0])["io.mcp-broker/resumed"], metaOf(afterReturn.events[0])["io.mcp-broker/resumed"]]).toEqual(["exact", "exact"]);
    await barrier([back, 2], [afterReturn, 1]);
    expect(methods(back)).toEqual([ACK, TOOLS, TOOLS]);
    expect(methods(afterReturn)).toEqual([ACK, TOOLS]);
  }, 60_000);

  describe("on Redis, resumed on another broker", () => {
    beforeAll(async () => {
      await testRedisUrl();
    });

    const headersOf = (sessionId: string) => ({ "mcp-session-id": sessionId, "mcp-protocol-version": "2025-11-25" });

    it("a legacy session's stream resumed with Last-Event-ID after the drop gets one list_changed for each list the backend left, and nothing else", async () => {
      redis = { url: await testRedisUrl(), prefix: uniquePrefix("resume-lists") };
      await backends();
      const [one, two] = [await broker(), await broker()];
      const init = await post(one.url, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
      const sessionId = init.headers.get("mcp-session-id") ?? "";
      await post(one.url, { jsonrpc: "2.0", method: "notifications/initialized" }, headersOf(sessionId));
      // Subscribed: a resumption that could not tell would announce it updated.
      const uri = "stay+test://static/a";
      expect((await post(one.url, { jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri } }, headersOf(sessionId))).json).toMatchObject({ result: {} });
      const first = await openSse(one.url, { ...headersOf(sessionId), accept: "text/event-stream" });
      streams.push(first);
      stayServer.emitUpdate("test://static/a");
      await eventually(() => count(first, UPDATED) === 1, "an update with its id");
      const seen = first.events.at(-1)?.id;
      first.close();

      await dropFlaky([one, two]);
      const resumed = await openSse(two.url, { ...headersOf(sessionId), accept: "text/event-stream", "last-event-id": String(seen) });
      streams.push(resumed);
      // A live update after the resumption began (the stream is primed): what was told comes before it.
      await eventually(() => resumed.primedId !== undefined, "the priming event");
      stayServer.emitUpdate("test://static/a");
      await eventually(() => count(resumed, UPDATED) === 1, "the barrier update");
      const told = methods(resumed);
      expect(told.at(-1)).toBe(UPDATED);
      expect(told.slice(0, -1).sort()).toEqual([PROMPTS, RESOURCES, TOOLS]);
    }, 60_000);

    it("a stream resumed on a broker that started after its last event is told no list changed when none did (legacy and listen)", async () => {
      redis = { url: await testRedisUrl(), prefix: uniquePrefix("resume-lists") };
      await backends();
      const one = await broker();
      const init = await post(one.url, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
      const sessionId = init.headers.get("mcp-session-id") ?? "";
      await post(one.url, { jsonrpc: "2.0", method: "notifications/initialized" }, headersOf(sessionId));
      expect((await post(one.url, { jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri: "stay+test://static/a" } }, headersOf(sessionId))).json).toMatchObject({ result: {} });
      const first = await openSse(one.url, { ...headersOf(sessionId), accept: "text/event-stream" });
      streams.push(first);
      stayServer.emitUpdate("test://static/a");
      await eventually(() => count(first, UPDATED) === 1, "an update with its id");
      first.close();
      const listened = await listen(one.url);
      await eventually(() => listened.events.length === 1, "the acknowledgement");
      listened.close();

      // A broker started after both: its lists are the cluster's, as the client last saw them.
      const later = await broker();
      const resumed = await openSse(later.url, { ...headersOf(sessionId), accept: "text/event-stream", "last-event-id": String(first.events.at(-1)?.id) });
      streams.push(resumed);
      const reopened = await listen(later.url, metaOf(listened.events[0])["io.mcp-broker/cursor"]);
      await eventually(() => resumed.primedId !== undefined && reopened.events.length >= 1, "the resumptions");
      expect(metaOf(reopened.events[0])["io.mcp-broker/resumed"]).toBe("exact");
      stayServer.emitUpdate("test://static/a");
      await eventually(() => count(resumed, UPDATED) === 1, "the barrier update");
      await barrier([reopened, 1]);
      expect(methods(resumed)).toEqual([UPDATED, TOOLS]);
      expect(methods(reopened)).toEqual([ACK, TOOLS]);
    }, 60_000);

    it("a listen resumed from its cursor after the backend came back is told the tools changed, once", async () => {
      redis = { url: await testRedisUrl(), prefix: uniquePrefix("resume-lists") };
      await backends();
      const [one, two] = [await broker(), await broker()];
      await dropFlaky([one, two]);

      const first = await listen(one.url);
      await eventually(() => first.events.length === 1, "the acknowledgement");
      first.close();
      const live = await listen(one.url);
      await eventually(() => live.events.length === 1, "the acknowledgement");
      await restartFlaky([one, two]);
      await eventually(() => count(live, TOOLS) === 1, "the live announcement");
      live.close();
      const resumed = await listen(two.url, metaOf(first.events[0])["io.mcp-broker/cursor"]);
      await eventually(() => resumed.events.length >= 1, "the acknowledgement");
      expect(metaOf(resumed.events[0])["io.mcp-broker/resumed"]).toBe("exact");
      // Resumed from the live announcement on the broker that made it: not told again.
      const again = await listen(one.url, metaOf(live.events[1])["io.mcp-broker/cursor"]);
      await eventually(() => again.events.length >= 1, "the acknowledgement");
      expect(metaOf(again.events[0])["io.mcp-broker/resumed"]).toBe("exact");
      await barrier([resumed, 2], [again, 1]);
      expect(methods(resumed)).toEqual([ACK, TOOLS, TOOLS]);
      expect(methods(again)).toEqual([ACK, TOOLS]);
    }, 60_000);
  });
});
