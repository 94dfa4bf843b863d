import { afterEach, describe, expect, it } from "vitest";
import { ProtocolError } from "@modelcontextprotocol/client";
import { BrokerClientError, type BrokerClient } from "../../src/index.js";
import { nextEvent, record } from "../helpers/events.js";
import { toolListChangeHeard, unitSetup } from "../helpers/unit-client.js";

/** What the InspectorClient-shaped API adds to BrokerClient; see README "InspectorClient compatibility". */
describe.each(["legacy", "modern"] as const)("InspectorClient compatibility (%s)", (era) => {
  let client: BrokerClient | undefined;
  afterEach(async () => {
    await client?.disconnect();
  });

  it("reads only from a listed template, failing as InspectorClient does without asking the server", async () => {
    const { backend, clock, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    const reads = backend.count("resources/read");
    const thrown = await c.readResourceFromTemplate("test://nope/{id}", { id: "1" }).catch((error: unknown) => error);
    expect(thrown).toBeInstanceOf(BrokerClientError);
    expect(thrown).toMatchObject({ code: "TEMPLATE_NOT_FOUND", message: 'Resource template with uriTemplate "test://nope/{id}" not found', data: { uriTemplate: "test://nope/{id}" } });
    expect(backend.count("resources/read")).toBe(reads);

    // Once the server no longer lists it, a template that was readable is refused too.
    backend.templates = [];
    const reloaded = nextEvent(c, "resourceTemplatesChange");
    backend.listChanged("resources");
    await clock.timerSet(100);
    await clock.advance(100);
    await reloaded;
    await expect(c.readResourceFromTemplate("test://items/{id}", { id: "1" })).rejects.toMatchObject({ code: "TEMPLATE_NOT_FOUND" });
  });

  it("resolves a template read with { contents, uri, uriTemplate } and the fields of InspectorClient's invocation", async () => {
    const { clock, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    const read = await c.readResourceFromTemplate("test://items/{id}", { id: "7" }, { trace: "t" });
    const contents = [{ uri: "test://items/7", mimeType: "text/plain", text: "item 7" }];
    expect(read).toMatchObject({
      contents,
      uri: "test://items/7",
      uriTemplate: "test://items/{id}",
      expandedUri: "test://items/7",
      params: { id: "7" },
      result: { contents },
      timestamp: new Date(clock.now()),
      metadata: { trace: "t" },
    });
    expect(read.contents).toBe(read.result.contents);
  });

  it("takes prompt arguments as JSON values and sends them as strings, converted as InspectorClient converts them", async () => {
    const { client: c } = unitSetup(era);
    client = c;
    await c.connect();
    const result = await c.getPrompt("greet", { text: "Ada", count: 3, flag: false, none: null, missing: undefined, list: [1, "2"], object: { a: { b: null } } });
    const sent = { text: "Ada", count: "3", flag: "false", none: "null", missing: "undefined", list: '[1,"2"]', object: '{"a":{"b":null}}' };
    expect(result.messages[0]?.content).toEqual({ type: "text", text: `greet ${JSON.stringify(sent)}` });
    expect(c.cache.getPrompt("greet")?.params).toEqual(sent);
  });

  it("clears one prompt's content or every prompt's, leaving the other caches", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.getPrompt("greet");
    await c.getPrompt("summarize");
    await c.readResource("test://one");
    c.clearPromptContent("greet");
    expect(c.cache.getPrompt("greet")).toBeNull();
    expect(c.cache.getPrompt("summarize")).not.toBeNull();

    // A fetch under way when everything is cleared does not refill it.
    const gets = backend.count("prompts/get");
    const release = backend.holdNext("prompts/get");
    const underway = c.getPrompt("greet");
    await backend.whenReceived("prompts/get", gets + 1);
    c.clearAllPromptContent();
    release();
    await underway;
    expect(c.cache.getPrompt("greet")).toBeNull();
    expect(c.cache.getPrompt("summarize")).toBeNull();
    expect(c.cache.getResource("test://one")).not.toBeNull();
  });

  it("clears a URI's resource entry and the template entries that expanded to it, and no other", async () => {
    const { client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.readResource("test://items/1");
    await c.readResourceFromTemplate("test://items/{id}", { id: "2" });
    c.cache.clearResourceAndResourceTemplate("test://items/1");
    expect(c.cache.getResource("test://items/1")).toBeNull();
    expect(c.cache.getResourceTemplate("test://items/{id}")).not.toBeNull();
    await c.readResource("test://items/2");
    c.cache.clearResourceAndResourceTemplate("test://items/2");
    expect(c.cache.getResource("test://items/2")).toBeNull();
    expect(c.cache.getResourceTemplate("test://items/{id}")).toBeNull();
  });

  it("empties a list on clearTools(), clearResources(), clearResourceTemplates() and clearPrompts() until it loads again", async () => {
    const setup = unitSetup(era);
    const c = (client = setup.client);
    await c.connect();
    await c.callTool("echo");
    const events = { tools: record(c, "toolsChange"), resources: record(c, "resourcesChange"), templates: record(c, "resourceTemplatesChange"), prompts: record(c, "promptsChange") };
    c.clearTools();
    c.clearResources();
    c.clearResourceTemplates();
    c.clearPrompts();
    expect([c.getTools(), c.getResources(), c.getResourceTemplates(), c.getPrompts()]).toEqual([[], [], [], []]);
    expect(events).toEqual({ tools: [{ tools: [] }], resources: [{ resources: [] }], templates: [{ resourceTemplates: [] }], prompts: [{ prompts: [] }] });
    await expect(c.readResourceFromTemplate("test://items/{id}", { id: "1" })).rejects.toMatchObject({ code: "TEMPLATE_NOT_FOUND" });
    expect(c.cache.getToolCallResult("echo")).not.toBeNull();
    await toolListChangeHeard(setup);
    expect(c.getTools().map((tool) => tool.name)).toEqual(["echo", "fail"]);
  });

  it("gives cache entries and content events InspectorClient's fields too", async () => {
    const { backend, clock, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.subscribeToResource("test://items/1");
    const contents = record(c, "resourceContentChange");
    const templates = record(c, "resourceTemplateContentChange");
    const prompts = record(c, "promptContentChange");

    await c.readResource("test://one");
    const direct = c.cache.getResource("test://one");
    expect(direct?.result).toBe(direct?.content);
    expect(contents.at(-1)).toMatchObject({ entry: direct, content: direct, timestamp: direct?.timestamp });

    await c.readResourceFromTemplate("test://items/{id}", { id: "1" });
    const viaTemplate = c.cache.getResourceTemplate("test://items/{id}");
    expect(viaTemplate).toMatchObject({ uri: "test://items/1", expandedUri: "test://items/1", result: viaTemplate?.content });
    expect(contents.at(-1)).toMatchObject({ source: "template", content: viaTemplate, timestamp: viaTemplate?.timestamp });
    expect(templates).toEqual([{ uriTemplate: "test://items/{id}", content: viaTemplate, params: { id: "1" }, timestamp: new Date(clock.now()) }]);

    // A re-read after an update is new template content too; a failed read is not.
    const reread = nextEvent(c, "resourceTemplateContentChange");
    backend.updated("test://items/1");
    expect((await reread).content).toBe(c.cache.getResourceTemplate("test://items/{id}"));
    backend.templateText = () => undefined;
    await expect(c.readResourceFromTemplate("test://items/{id}", { id: "2" })).rejects.toBeInstanceOf(ProtocolError);
    expect(templates).toHaveLength(2);

    await c.getPrompt("greet");
    const prompt = c.cache.getPrompt("greet");
    expect(prompts).toEqual([{ name: "greet", entry: prompt, content: prompt, timestamp: prompt?.timestamp }]);
  });

  it("announces each tool call outcome with InspectorClient's flat payload beside the entry", async () => {
    const { clock, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    const calls = record(c, "toolCallResultChange");
    const timestamp = new Date(clock.now());

    const result = await c.callTool("echo", { x: 1 }, { trace: "t" });
    expect(c.cache.getToolCallResult("echo")?.toolName).toBe("echo");
    expect(calls[0]).toEqual({ name: "echo", entry: c.cache.getToolCallResult("echo"), toolName: "echo", params: { x: 1 }, result, timestamp, success: true, metadata: { trace: "t" } });

    const failed = await c.callTool("fail");
    expect(calls[1]).toMatchObject({ toolName: "fail", params: {}, result: failed, timestamp, success: false, error: "Tool fail reported an error: it broke" });

    const thrown = await c.callTool("missing").catch((error: unknown) => error);
    expect(calls[2]).toMatchObject({ toolName: "missing", result: null, success: false, error: (thrown as Error).message });
    expect(calls[2]).not.toHaveProperty("metadata");
  });

  it("answers InspectorClient's getters for status, capabilities and server info", async () => {
    const { client: c } = unitSetup(era);
    client = c;
    expect([c.getStatus(), c.getCapabilities(), c.getServerInfo()]).toEqual(["disconnected", undefined, undefined]);
    await c.connect();
    expect(c.getStatus()).toBe("connected");
    expect(c.getCapabilities()).toMatchObject({ tools: { listChanged: true }, resources: { subscribe: true } });
    expect(c.getServerInfo()).toMatchObject({ name: "test-backend", version: "1.0.0" });
  });
});
