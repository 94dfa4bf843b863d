import { afterEach, describe, expect, it } from "vitest";
import type { BrokerClient } from "../../src/index.js";
import { nextEvent } from "../helpers/events.js";
import { unitSetup } from "../helpers/unit-client.js";
import type { TestBackend } from "../helpers/test-backend.js";

const LIST_METHODS = ["tools/list", "prompts/list", "resources/list", "resources/templates/list"];

/** The `_meta` of the last request of `method` the backend answered. */
const lastMeta = (backend: TestBackend, method: string): unknown => backend.metas.get(method)?.at(-1);

describe.each(["legacy", "modern"] as const)("request metadata (%s)", (era) => {
  let client: BrokerClient | undefined;
  afterEach(async () => {
    await client?.disconnect();
  });

  it("sends no _meta when neither the client nor the call has metadata", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.readResource("test://one");
    await c.readResourceFromTemplate("test://items/{id}", { id: "1" });
    await c.getPrompt("greet");
    await c.callTool("echo");
    for (const method of [...LIST_METHODS, "resources/read", "prompts/get", "tools/call"]) expect(lastMeta(backend, method), method).toBeUndefined();
    expect(c.cache.getResource("test://one")).not.toHaveProperty("metadata");
  });

  it("sends defaultMetadata with every list load and fetch, the call's metadata merged over it, and records what was sent", async () => {
    const { backend, client: c } = unitSetup(era, { defaultMetadata: { tenant: "acme", trace: "default" } });
    client = c;
    await c.connect();
    for (const method of LIST_METHODS) expect(lastMeta(backend, method), method).toEqual({ tenant: "acme", trace: "default" });

    await c.readResource("test://one", { trace: "read" });
    expect(lastMeta(backend, "resources/read")).toEqual({ tenant: "acme", trace: "read" });
    expect(c.cache.getResource("test://one")?.metadata).toEqual({ tenant: "acme", trace: "read" });

    await c.readResourceFromTemplate("test://items/{id}", { id: "1" }, { page: "2" });
    expect(lastMeta(backend, "resources/read")).toEqual({ tenant: "acme", trace: "default", page: "2" });
    expect(c.cache.getResourceTemplate("test://items/{id}")?.metadata).toEqual({ tenant: "acme", trace: "default", page: "2" });

    await c.getPrompt("greet", {}, { trace: "prompt" });
    expect(lastMeta(backend, "prompts/get")).toEqual({ tenant: "acme", trace: "prompt" });
    expect(c.cache.getPrompt("greet")?.metadata).toEqual({ tenant: "acme", trace: "prompt" });
  });

  it("merges a tool call's metadata as InspectorClient does: default, then general, then tool-specific", async () => {
    const { backend, client: c } = unitSetup(era, { defaultMetadata: { a: "default", b: "default", c: "default" } });
    client = c;
    await c.connect();
    await c.callTool("echo", {}, { b: "general", c: "general" }, { c: "tool" });
    expect(lastMeta(backend, "tools/call")).toEqual({ a: "default", b: "general", c: "tool" });
    expect(c.cache.getToolCallResult("echo")?.metadata).toEqual({ a: "default", b: "general", c: "tool" });

    await c.callTool("fail", {}, undefined, { only: "tool" });
    expect(lastMeta(backend, "tools/call")).toEqual({ a: "default", b: "default", c: "default", only: "tool" });
  });

  it("re-reads updated content with the default metadata only, and records that", async () => {
    const { backend, client: c } = unitSetup(era, { defaultMetadata: { tenant: "acme" } });
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    await c.subscribeToResource("test://items/1");
    await c.readResource("test://one", { trace: "read" });
    await c.readResourceFromTemplate("test://items/{id}", { id: "1" }, { trace: "template" });
    for (const uri of ["test://one", "test://items/1"]) {
      const reread = nextEvent(c, "resourceContentChange", (d) => d.cause === "update" && d.uri === uri);
      backend.updated(uri);
      await reread;
      expect(lastMeta(backend, "resources/read")).toEqual({ tenant: "acme" });
    }
    expect(c.cache.getResource("test://one")?.metadata).toEqual({ tenant: "acme" });
    expect(c.cache.getResourceTemplate("test://items/{id}")?.metadata).toEqual({ tenant: "acme" });
  });
});
