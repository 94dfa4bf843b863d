import { afterEach, describe, expect, it } from "vitest";
import { BrokerClientError, type BrokerClient } from "../../src/index.js";
import { nextEvent } from "../helpers/events.js";
import { unitSetup } from "../helpers/unit-client.js";

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
});
