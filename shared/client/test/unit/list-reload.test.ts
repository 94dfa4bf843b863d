import { ProtocolError } from "@modelcontextprotocol/client";
import { afterEach, describe, expect, it } from "vitest";
import type { BrokerClient } from "../../src/index.js";
import { nextEvent, record } from "../helpers/events.js";
import { unitSetup } from "../helpers/unit-client.js";

describe.each(["legacy", "modern"] as const)("list auto-reload (%s)", (era) => {
  let client: BrokerClient | undefined;
  afterEach(async () => {
    await client?.disconnect();
  });

  it("loads every list on connect and announces each", async () => {
    const setup = unitSetup(era);
    client = setup.client;
    const tools = record(client, "toolsChange");
    const templates = record(client, "resourceTemplatesChange");
    await client.connect();
    expect(client.state).toBe("connected");
    expect(client.era).toBe(era);
    expect(client.getTools().map((t) => t.name)).toEqual(["echo", "fail"]);
    expect(client.getPrompts().map((p) => p.name)).toEqual(["greet", "summarize"]);
    expect(client.getResources().map((r) => r.uri)).toEqual(["test://one", "test://two"]);
    expect(client.getResourceTemplates().map((t) => t.uriTemplate)).toEqual(["test://items/{id}"]);
    expect(tools).toHaveLength(1);
    expect(templates).toHaveLength(1);
  });

  it("reloads once per burst of list_changed, debounceMs after the first one", async () => {
    const { backend, clock, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    const changes = record(c, "toolsChange");
    const loads = backend.count("tools/list");
    backend.tools.set("added", { name: "added", run: () => ({ content: [] }) });
    backend.listChanged("tools");
    await clock.timerSet(100);
    await clock.advance(40);
    backend.listChanged("tools");
    await clock.advance(40);
    backend.listChanged("tools");
    await clock.advance(19);
    expect(changes).toHaveLength(0);
    expect(backend.count("tools/list")).toBe(loads);
    const change = nextEvent(c, "toolsChange");
    await clock.advance(1);
    expect((await change).tools.map((t) => t.name)).toEqual(["echo", "fail", "added"]);
    expect(c.getTools().map((t) => t.name)).toContain("added");
    expect(backend.count("tools/list")).toBe(loads + 1);
    // Nothing else was queued by the burst.
    await clock.advance(1_000);
    expect(changes).toHaveLength(1);
  });

  it("never loses a change that arrives during a reload: exactly one more reload follows", async () => {
    const { backend, clock, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    const changes = record(c, "toolsChange");
    const loads = backend.count("tools/list");
    const release = backend.hold("tools/list");
    backend.listChanged("tools");
    await clock.timerSet(100);
    await clock.advance(100);
    await backend.whenReceived("tools/list", loads + 1);
    // The list changes again while the first reload is under way, twice; both notifications are
    // heard (modern: over the in-process SSE stream) while the reload is held.
    backend.tools.set("late", { name: "late", run: () => ({ content: [] }) });
    const heard = Promise.all([backend.delivered("notifications/tools/list_changed"), backend.delivered("notifications/tools/list_changed")]);
    backend.listChanged("tools");
    backend.listChanged("tools");
    await heard;
    expect(backend.count("tools/list")).toBe(loads + 1);
    const first = nextEvent(c, "toolsChange");
    release();
    await first;
    expect(changes).toHaveLength(1);
    const second = nextEvent(c, "toolsChange");
    await clock.advance(100);
    expect((await second).tools.map((t) => t.name)).toContain("late");
    await clock.advance(1_000);
    expect(backend.count("tools/list")).toBe(loads + 2);
    expect(changes).toHaveLength(2);
  });

  it("a resources list_changed reloads both resources and templates", async () => {
    const { backend, clock, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    backend.texts.set("test://three", "three");
    backend.templates = ["test://items/{id}", "test://other/{x}"];
    const resources = nextEvent(c, "resourcesChange");
    const templates = nextEvent(c, "resourceTemplatesChange");
    backend.listChanged("resources");
    await clock.timerSet(100);
    await clock.advance(100);
    expect((await resources).resources.map((r) => r.uri)).toContain("test://three");
    expect((await templates).resourceTemplates).toHaveLength(2);
  });

  it("still announces a reload that failed, with the error and the previous list", async () => {
    const { backend, clock, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    backend.failing.add("prompts/list");
    backend.prompts.set("new", {});
    const change = nextEvent(c, "promptsChange");
    backend.listChanged("prompts");
    await clock.timerSet(100);
    await clock.advance(100);
    const { prompts, error } = await change;
    expect(error).toBeInstanceOf(ProtocolError);
    expect(prompts.map((p) => p.name)).toEqual(["greet", "summarize"]);
    expect(c.getPrompts().map((p) => p.name)).toEqual(["greet", "summarize"]);
  });

  it("ignores the list_changed kinds turned off in listChangedNotifications", async () => {
    const { backend, clock, client: c } = unitSetup(era, { listChangedNotifications: { tools: false } });
    client = c;
    await c.connect();
    if (era === "modern") expect(backend.listenFilters.at(-1)).toEqual({ promptsListChanged: true, resourcesListChanged: true });
    const changes = record(c, "toolsChange");
    const loads = backend.count("tools/list");
    backend.listChanged("tools");
    backend.listChanged("prompts"); // as a witness that notifications do arrive
    await clock.timerSet(100);
    await clock.advance(1_000);
    expect(changes).toHaveLength(0);
    expect(backend.count("tools/list")).toBe(loads);
  });

  it("applies only the load started last when loads of one kind overlap; the older is discarded", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    const loads = backend.count("tools/list");
    // The first reload's tools/list is held; it answers with the list as it is when released.
    const release = backend.holdNext("tools/list");
    const older = c.reloadLists();
    await backend.whenReceived("tools/list", loads + 1);
    backend.tools.set("newer", { name: "newer", run: () => ({ content: [] }) });
    const changes = record(c, "toolsChange");
    await c.reloadLists();
    expect(c.getTools().map((t) => t.name)).toContain("newer");
    backend.tools.delete("newer");
    release();
    await older;
    expect(c.getTools().map((t) => t.name)).toContain("newer");
    expect(changes).toHaveLength(1);
  });

  it("reloadLists() reloads on demand", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    backend.tools.delete("fail");
    await c.reloadLists();
    expect(c.getTools().map((t) => t.name)).toEqual(["echo"]);
  });
});
