import { ProtocolError, SdkError } from "@modelcontextprotocol/client";
import { afterEach, describe, expect, it } from "vitest";
import type { ContentCache } from "../../src/cache/content-cache.js";
import { BrokerClientError, type BrokerClient } from "../../src/index.js";
import { firstText, nextEvent, record } from "../helpers/events.js";
import { unitSetup } from "../helpers/unit-client.js";

/** The client's own cache, behind its public view (to check that no fetch stays marked under way). */
const internals = (client: BrokerClient): ContentCache => (client as unknown as { contents: ContentCache }).contents;
const fetchesUnderWay = (client: BrokerClient): number => {
  const { resources, templates, prompts, toolCalls } = internals(client);
  return resources.fetching + templates.fetching + prompts.fetching + toolCalls.fetching;
};

describe.each(["legacy", "modern"] as const)("content cache (%s)", (era) => {
  let client: BrokerClient | undefined;
  afterEach(async () => {
    await client?.disconnect();
  });

  it("fills from every fetch, with a timestamp and the params, and announces each entry", async () => {
    const { clock, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    const resourceChange = nextEvent(c, "resourceContentChange");
    const read = await c.readResource("test://one");
    expect(firstText(read)).toBe("one v1");
    expect(await resourceChange).toMatchObject({ cause: "read", source: "resource", uri: "test://one", entry: { content: read } });
    expect(c.cache.getResource("test://one")).toEqual({ uri: "test://one", result: read, content: read, timestamp: new Date(clock.now()) });

    const promptChange = nextEvent(c, "promptContentChange");
    const prompt = await c.getPrompt("greet", { who: "Ada" });
    expect((await promptChange).entry).toEqual({ name: "greet", params: { who: "Ada" }, result: prompt, timestamp: new Date(clock.now()) });
    expect(c.cache.getPrompt("greet")?.result).toEqual(prompt);

    const toolChange = nextEvent(c, "toolCallResultChange");
    const result = await c.callTool("echo", { x: 1 });
    expect((await toolChange).entry).toEqual({ name: "echo", toolName: "echo", params: { x: 1 }, result, success: true, timestamp: new Date(clock.now()) });
  });

  it("stamps each entry with a Date of the injected clock's time", async () => {
    const { clock, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.readResource("test://one");
    await clock.advance(5_000);
    await c.readResourceFromTemplate("test://items/{id}", { id: "1" });
    const direct = c.cache.getResource("test://one")?.timestamp;
    const viaTemplate = c.cache.getResourceTemplate("test://items/{id}")?.timestamp;
    expect(direct).toBeInstanceOf(Date);
    expect(direct?.getTime()).toBe(clock.now() - 5_000);
    expect(viaTemplate?.getTime()).toBe(clock.now());
  });

  it("expands a template (RFC 6570) and caches per template, apart from the resource cache", async () => {
    const { client: c } = unitSetup(era);
    client = c;
    await c.connect();
    const change = nextEvent(c, "resourceContentChange");
    const read = await c.readResourceFromTemplate("test://items/{id}", { id: "a b" });
    expect(firstText(read)).toBe("item a%20b");
    const entry = c.cache.getResourceTemplate("test://items/{id}");
    expect(entry).toMatchObject({ uriTemplate: "test://items/{id}", params: { id: "a b" }, uri: "test://items/a%20b", content: read.result });
    expect(await change).toMatchObject({ cause: "read", source: "template", uri: "test://items/a%20b", uriTemplate: "test://items/{id}" });
    expect(c.cache.getResource("test://items/a%20b")).toBeNull();
  });

  it("keeps one entry per resource, template, prompt and tool: the newest replaces the older", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.readResource("test://one");
    backend.texts.set("test://one", "one v2");
    await c.readResource("test://one");
    expect(firstText(c.cache.getResource("test://one")?.content)).toBe("one v2");

    await c.readResourceFromTemplate("test://items/{id}", { id: "1" });
    await c.readResourceFromTemplate("test://items/{id}", { id: "2" });
    expect(c.cache.getResourceTemplate("test://items/{id}")).toMatchObject({ params: { id: "2" }, uri: "test://items/2" });

    await c.getPrompt("greet", { who: "Ada" });
    await c.getPrompt("greet", { who: "Grace" });
    expect(c.cache.getPrompt("greet")?.params).toEqual({ who: "Grace" });

    await c.callTool("echo", { x: 1 });
    await c.callTool("echo", { x: 2 });
    expect(c.cache.getToolCallResult("echo")).toMatchObject({ params: { x: 2 }, success: true });
    expect(firstText(c.cache.getToolCallResult("echo")?.result)).toBe('echo {"x":2}');

  });

  it("keeps the fetch started last when fetches overlap, whichever answers last", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    // The first call's answer is held until the second one has been answered.
    const calls = backend.count("tools/call");
    const releaseCall = backend.holdNext("tools/call");
    const first = c.callTool("echo", { x: 3 });
    await backend.whenReceived("tools/call", calls + 1);
    await c.callTool("echo", { x: 4 });
    const announced = record(c, "toolCallResultChange");
    releaseCall();
    await first;
    expect(c.cache.getToolCallResult("echo")?.params).toEqual({ x: 4 });
    expect(announced).toEqual([]);

    const reads = backend.count("resources/read");
    const releaseRead = backend.holdNext("resources/read");
    const older = c.readResource("test://one");
    await backend.whenReceived("resources/read", reads + 1);
    backend.texts.set("test://one", "one v2");
    await c.readResource("test://one");
    backend.texts.set("test://one", "one v3"); // what the held read answers when released
    releaseRead();
    expect(firstText(await older)).toBe("one v3");
    expect(firstText(c.cache.getResource("test://one")?.content)).toBe("one v2");
    expect(fetchesUnderWay(c)).toBe(0);
  });

  it("sends every fetch to the server, even when the server marks results cacheable", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    backend.cacheTtlMs = 60_000;
    await c.connect();
    const count = (method: string): number => backend.count(method);
    const before = { read: count("resources/read"), prompt: count("prompts/get"), list: count("tools/list") };
    await c.readResource("test://one");
    await c.readResource("test://one");
    await c.readResourceFromTemplate("test://items/{id}", { id: "1" });
    await c.readResourceFromTemplate("test://items/{id}", { id: "1" });
    await c.getPrompt("greet");
    await c.getPrompt("greet");
    await c.reloadLists();
    await c.reloadLists();
    expect({ read: count("resources/read"), prompt: count("prompts/get"), list: count("tools/list") }).toEqual({
      read: before.read + 4,
      prompt: before.prompt + 2,
      list: before.list + 2,
    });
  });

  it("keeps an entry whose fetch gets no answer, and says nothing", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.readResource("test://one");
    await c.readResourceFromTemplate("test://items/{id}", { id: "1" });
    await c.getPrompt("greet", { who: "Ada" });

    const events = [...(["resourceContentChange", "promptContentChange"] as const)].map((type) => record(c, type));
    backend.holdNext("resources/read");
    backend.holdNext("prompts/get");
    const reads = backend.count("resources/read");
    const prompts = backend.count("prompts/get");
    const pendingRead = c.readResource("test://one").catch((error: unknown) => error);
    const pendingPrompt = c.getPrompt("greet", { who: "Grace" }).catch((error: unknown) => error);
    await backend.whenReceived("resources/read", reads + 1);
    await backend.whenReceived("prompts/get", prompts + 1);
    // The connection goes away under the fetches: they end without an answer.
    await c.sdkClient?.close();
    expect(await pendingRead).toBeInstanceOf(SdkError);
    expect(await pendingPrompt).toBeInstanceOf(SdkError);
    expect(firstText(c.cache.getResource("test://one")?.content)).toBe("one v1");
    expect(c.cache.getPrompt("greet")?.params).toEqual({ who: "Ada" });
    expect(events.flat()).toEqual([]);
    expect(fetchesUnderWay(c)).toBe(0);
  });

  it("drops entries whose fetch the server answers with an error, and announces it", async () => {
    const { backend, clock, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.readResource("test://one");
    await c.readResourceFromTemplate("test://items/{id}", { id: "1" });
    await c.getPrompt("greet", { who: "Ada" });
    const contents = record(c, "resourceContentChange");
    const prompts = record(c, "promptContentChange");

    backend.texts.delete("test://one");
    const read = await c.readResource("test://one").catch((error: unknown) => error);
    expect(read).toBeInstanceOf(ProtocolError);
    backend.templateText = () => undefined;
    const viaTemplate = await c.readResourceFromTemplate("test://items/{id}", { id: "2" }).catch((error: unknown) => error);
    backend.prompts.delete("greet");
    const prompt = await c.getPrompt("greet").catch((error: unknown) => error);

    expect([c.cache.getResource("test://one"), c.cache.getResourceTemplate("test://items/{id}"), c.cache.getPrompt("greet")]).toEqual([null, null, null]);
    const timestamp = new Date(clock.now());
    expect(contents).toEqual([
      { cause: "read", source: "resource", uri: "test://one", entry: null, content: null, timestamp, error: read },
      { cause: "read", source: "template", uri: "test://items/2", uriTemplate: "test://items/{id}", entry: null, content: null, timestamp, error: viaTemplate },
    ]);
    expect(prompts).toEqual([{ name: "greet", entry: null, content: null, timestamp, error: prompt }]);
    // With nothing cached, a failed fetch changes nothing and says nothing.
    await expect(c.readResource("test://nope")).rejects.toBeInstanceOf(ProtocolError);
    expect(contents).toHaveLength(2);
    expect(fetchesUnderWay(c)).toBe(0);
  });

  it("hands out a read-only cache: frozen copies, no way to the internals", async () => {
    const { client: c } = unitSetup(era);
    client = c;
    await c.connect();
    const read = await c.readResource("test://one");
    const result = await c.callTool("echo", { x: 1 });
    const entry = c.cache.getResource("test://one");
    // What the call returned is the caller's own: changing it does not change the cache.
    expect(entry?.content).toEqual(read);
    expect(entry?.content).not.toBe(read);
    (read.contents[0] as { text: string }).text = "changed by the caller";
    expect(firstText(c.cache.getResource("test://one")?.content)).toBe("one v1");
    // The entries cannot be changed (ESM test code is strict: assignments throw).
    expect(Object.isFrozen(entry)).toBe(true);
    expect(() => ((entry?.content.contents[0] as { text: string }).text = "x")).toThrow(TypeError);
    const call = c.cache.getToolCallResult("echo");
    expect(call?.result).toEqual(result);
    expect(() => ((call as { params: Record<string, unknown> }).params.x = 2)).toThrow(TypeError);
    // Only the documented methods: the fetch maps behind it are out of reach.
    expect(Object.keys(c.cache).sort()).toEqual(
      ["clearAll", "clearPrompt", "clearResource", "clearResourceAndResourceTemplate", "clearResourceTemplate", "clearToolCallResult", "getPrompt", "getResource", "getResourceTemplate", "getToolCallResult"],
    );
    expect("resources" in c.cache).toBe(false);
    expect(Object.isFrozen(c.cache)).toBe(true);
  });

  it("caches failed tool calls with success: false and the error", async () => {
    const { clock, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    // The tool ran and reported isError: resolved like the SDK does, cached as a failure.
    const failed = await c.callTool("fail");
    expect(failed.isError).toBe(true);
    const toolError = c.cache.getToolCallResult("fail");
    expect(toolError).toMatchObject({ success: false, result: failed, params: {} });
    expect(toolError?.success === false && toolError.error).toBeInstanceOf(BrokerClientError);
    expect(toolError?.success === false && (toolError.error as BrokerClientError).code).toBe("TOOL_ERROR");

    // The call itself failed (a JSON-RPC error): thrown, and cached.
    const change = nextEvent(c, "toolCallResultChange", (d) => d.name === "missing");
    const thrown = await c.callTool("missing", { a: 1 }).catch((error: unknown) => error);
    expect(thrown).toBeInstanceOf(ProtocolError);
    expect((await change).entry).toMatchObject({ name: "missing", params: { a: 1 }, success: false, error: thrown });
    expect(c.cache.getToolCallResult("missing")).toMatchObject({ success: false, error: thrown });
    expect(c.cache.getToolCallResult("missing")?.timestamp).toEqual(new Date(clock.now()));
  });

  it("preserves the content of items that still exist across a list reload, and drops the rest", async () => {
    const { backend, clock, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.readResource("test://one");
    await c.readResource("test://two");
    await c.readResourceFromTemplate("test://items/{id}", { id: "7" });
    await c.getPrompt("greet");
    await c.getPrompt("summarize");
    await c.callTool("echo");
    await c.callTool("fail");

    backend.texts.delete("test://two");
    backend.prompts.delete("summarize");
    backend.tools.delete("fail");
    const reloaded = Promise.all([nextEvent(c, "resourcesChange"), nextEvent(c, "promptsChange"), nextEvent(c, "toolsChange")]);
    for (const kind of ["resources", "prompts", "tools"] as const) backend.listChanged(kind);
    await clock.timerSet(100, 3);
    await clock.advance(100);
    await reloaded;

    expect(c.cache.getResource("test://one")).not.toBeNull();
    expect(c.cache.getResource("test://two")).toBeNull();
    expect(c.cache.getResourceTemplate("test://items/{id}")).not.toBeNull();
    expect(c.cache.getPrompt("greet")).not.toBeNull();
    expect(c.cache.getPrompt("summarize")).toBeNull();
    expect(c.cache.getToolCallResult("echo")).not.toBeNull();
    expect(c.cache.getToolCallResult("fail")).toBeNull();
  });

  it("keeps the content when a reload fails (the server's list is unknown then)", async () => {
    const { backend, clock, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.callTool("echo");
    backend.failing.add("tools/list");
    const change = nextEvent(c, "toolsChange");
    backend.listChanged("tools");
    await clock.timerSet(100);
    await clock.advance(100);
    expect((await change).error).toBeDefined();
    expect(c.cache.getToolCallResult("echo")).not.toBeNull();
  });

  it("is cleared, with the subscriptions and lists, on disconnect", async () => {
    const { client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.readResource("test://one");
    await c.readResourceFromTemplate("test://items/{id}", { id: "1" });
    await c.getPrompt("greet");
    await c.callTool("echo");
    await c.subscribeToResource("test://one");
    const subscriptions = record(c, "resourceSubscriptionsChange");
    await c.disconnect();
    expect(c.state).toBe("disconnected");
    expect(c.cache.getResource("test://one")).toBeNull();
    expect(c.cache.getResourceTemplate("test://items/{id}")).toBeNull();
    expect(c.cache.getPrompt("greet")).toBeNull();
    expect(c.cache.getToolCallResult("echo")).toBeNull();
    expect(c.getSubscribedResources()).toEqual([]);
    expect(subscriptions).toEqual([{ uris: [], pending: [] }]);
    expect(c.getTools()).toEqual([]);
    await expect(c.readResource("test://one")).rejects.toMatchObject({ code: "NOT_CONNECTED" });
  });

  it("clears single entries and everything on request", async () => {
    const { client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.readResource("test://one");
    await c.readResourceFromTemplate("test://items/{id}", { id: "1" });
    await c.getPrompt("greet");
    await c.callTool("echo");
    await c.callTool("fail");
    c.cache.clearResource("test://one");
    c.cache.clearResourceTemplate("test://items/{id}");
    c.cache.clearPrompt("greet");
    c.cache.clearToolCallResult("echo");
    expect([c.cache.getResource("test://one"), c.cache.getResourceTemplate("test://items/{id}"), c.cache.getPrompt("greet"), c.cache.getToolCallResult("echo")]).toEqual([
      null,
      null,
      null,
      null,
    ]);
    expect(c.cache.getToolCallResult("fail")).not.toBeNull();
    c.cache.clearAll();
    expect(c.cache.getToolCallResult("fail")).toBeNull();
  });
});
