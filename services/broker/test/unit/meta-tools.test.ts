import { describe, expect, it } from "vitest";
import { Catalog } from "../../src/catalog/catalog.js";
import { META_TOOL_DEFINITIONS, MetaTools, type UpdatesMode } from "../../src/routing/meta-tools.js";

/** Two backends, one prefixed ("docs") and one not ("wiki"), with resources and a template. */
function setup() {
  const catalog = new Catalog([
    { id: "docs", prefix: true },
    { id: "wiki", prefix: false },
  ]);
  catalog.replace("resources", "docs", [
    { uri: "file:///guide/install.md", name: "install", title: "Installation guide", description: "How to install the product on Linux", mimeType: "text/markdown", size: 1200 },
    { uri: "file:///guide/upgrade.md", name: "upgrade", title: "Upgrading", description: "Moving to a new major version", mimeType: "text/markdown" },
    { uri: "file:///data/prices.csv", name: "prices", mimeType: "text/csv" },
  ]);
  catalog.replace("resources", "wiki", [{ uri: "wiki://pages/kubernetes", name: "kubernetes", description: "Running on Kubernetes clusters" }]);
  catalog.replace("resourceTemplates", "docs", [{ uriTemplate: "file:///tickets/{id}", name: "ticket", description: "One support ticket", mimeType: "application/json" }]);
  const counts = new Map<string, number>([["docs file:///guide/install.md", 3]]);
  const updates: Record<string, UpdatesMode> = { docs: "push", wiki: "poll" };
  const tools = new MetaTools({ catalog, subscribers: async (backendId, uri) => counts.get(`${backendId} ${uri}`) ?? 0, updates: (backendId) => updates[backendId] ?? "none" });
  const call = async (name: string, args?: unknown) => {
    const result = (await tools.call(name, args)) as { content: { type: string; text: string }[]; structuredContent?: Record<string, unknown>; isError?: boolean };
    if (result.isError !== true) expect(JSON.parse(result.content[0]?.text ?? "null")).toEqual(result.structuredContent);
    return result;
  };
  return { catalog, call, updates };
}

const uris = (result: { structuredContent?: Record<string, unknown> }) => (result.structuredContent?.resources as { uri: string }[]).map((r) => r.uri);

describe("the broker's meta tools", () => {
  it("define the four tools with input and output schemas, read-only", () => {
    expect(META_TOOL_DEFINITIONS.map((tool) => tool.name)).toEqual(["catalog_resources", "describe_resource", "search_resources", "catalog_resource_templates"]);
    for (const tool of META_TOOL_DEFINITIONS) {
      expect(tool.inputSchema).toMatchObject({ type: "object" });
      expect(tool.outputSchema).toMatchObject({ type: "object" });
      expect(tool).toMatchObject({ annotations: { readOnlyHint: true } });
    }
  });

  it("catalog_resources lists every resource as a card with the broker's URIs, by backend and MIME type on request", async () => {
    const { call } = setup();
    const all = await call("catalog_resources");
    expect(all.structuredContent?.resources).toEqual([
      { uri: "docs+file:///guide/install.md", name: "install", mimeType: "text/markdown", size: 1200, serverId: "docs" },
      { uri: "docs+file:///guide/upgrade.md", name: "upgrade", mimeType: "text/markdown", serverId: "docs" },
      { uri: "docs+file:///data/prices.csv", name: "prices", mimeType: "text/csv", serverId: "docs" },
      { uri: "wiki://pages/kubernetes", name: "kubernetes", serverId: "wiki" },
    ]);
    expect(uris(await call("catalog_resources", { serverId: "wiki" }))).toEqual(["wiki://pages/kubernetes"]);
    expect(uris(await call("catalog_resources", { mimeType: "text/markdown" }))).toEqual(["docs+file:///guide/install.md", "docs+file:///guide/upgrade.md"]);
    expect(uris(await call("catalog_resources", { serverId: "nope" }))).toEqual([]);
  });

  it("describe_resource tells a listed resource's fields, its cluster-wide subscribers and how its updates arrive", async () => {
    const { call, updates } = setup();
    expect((await call("describe_resource", { uri: "docs+file:///guide/install.md" })).structuredContent).toEqual({
      uri: "docs+file:///guide/install.md",
      name: "install",
      title: "Installation guide",
      description: "How to install the product on Linux",
      mimeType: "text/markdown",
      size: 1200,
      serverId: "docs",
      match: "listed",
      subscribers: 3,
      updates: "push",
    });
    expect((await call("describe_resource", { uri: "wiki://pages/kubernetes" })).structuredContent).toMatchObject({ subscribers: 0, updates: "poll", match: "listed" });
    updates.wiki = "none";
    expect((await call("describe_resource", { uri: "wiki://pages/kubernetes" })).structuredContent).toMatchObject({ updates: "none" });
  });

  it("describe_resource describes a template match by its template and a sub-resource by its URI", async () => {
    const { call } = setup();
    expect((await call("describe_resource", { uri: "docs+file:///tickets/42" })).structuredContent).toEqual({
      uri: "docs+file:///tickets/42",
      name: "ticket",
      description: "One support ticket",
      mimeType: "application/json",
      serverId: "docs",
      match: "template",
      uriTemplate: "docs+file:///tickets/{id}",
      subscribers: 0,
      updates: "push",
    });
    expect((await call("describe_resource", { uri: "wiki://pages/kubernetes/history" })).structuredContent).toEqual({
      uri: "wiki://pages/kubernetes/history",
      name: "wiki://pages/kubernetes/history",
      serverId: "wiki",
      match: "sub-resource",
      subscribers: 0,
      updates: "poll",
    });
  });

  it("answers an unknown URI and bad arguments with a tool error that says what is wrong", async () => {
    const { call } = setup();
    // A prefixed URI of a backend that is down: its resources are not known now, and the answer says so.
    const { call: callDown, updates, catalog } = setup();
    updates.docs = "none";
    catalog.clearBackend("docs");
    expect(await callDown("describe_resource", { uri: "docs+file:///guide/install.md" })).toMatchObject({ isError: true, content: [{ text: expect.stringContaining("not connected") }] });
    const unknown = await call("describe_resource", { uri: "nowhere://x" });
    expect(unknown).toMatchObject({ isError: true, content: [{ type: "text", text: expect.stringContaining("Unknown resource 'nowhere://x'") }] });
    expect(unknown.structuredContent).toBeUndefined();
    expect(await call("describe_resource", {})).toMatchObject({ isError: true, content: [{ text: expect.stringContaining("uri") }] });
    // Held to the limits of every method that takes a URI: resources/subscribe refuses these too.
    expect(await call("describe_resource", { uri: `wiki://pages/${"a/".repeat(200)}` })).toMatchObject({ isError: true, content: [{ text: expect.stringContaining("URI too long") }] });
    expect(await call("describe_resource", { uri: `wiki://pages/${"a".repeat(20_000)}` })).toMatchObject({ isError: true, content: [{ text: expect.stringContaining("URI too long") }] });
    expect(await call("search_resources", { query: "x", limit: 0 })).toMatchObject({ isError: true, content: [{ text: expect.stringContaining("limit") }] });
    expect(await call("search_resources", { query: 7 })).toMatchObject({ isError: true, content: [{ text: expect.stringContaining("query") }] });
    expect(await call("search_resources", { query: "k".repeat(1_001) })).toMatchObject({ isError: true, content: [{ text: expect.stringContaining("query") }] });
    expect(await call("search_resources", { query: "k".repeat(1_000) })).toMatchObject({ structuredContent: { resources: [] } });
    expect(await call("catalog_resources", "not an object")).toMatchObject({ isError: true });
  });

  it("answers a describe whose subscriber count cannot be read (Redis away) with a tool error that says to retry", async () => {
    const catalog = new Catalog([{ id: "docs", prefix: true }]);
    catalog.replace("resources", "docs", [{ uri: "file:///a", name: "a" }]);
    const tools = new MetaTools({ catalog, subscribers: () => Promise.reject(new Error("Connection is closed.")), updates: () => "push" });
    expect(await tools.call("describe_resource", { uri: "docs+file:///a" })).toEqual({
      content: [{ type: "text", text: "The cluster-wide subscriber count of 'docs+file:///a' could not be read (Connection is closed.); retry later." }],
      isError: true,
    });
  });

  it("search_resources matches names, titles, descriptions and URIs, by prefix and with typos, best match first", async () => {
    const { call } = setup();
    expect(uris(await call("search_resources", { query: "install" }))[0]).toBe("docs+file:///guide/install.md");
    expect(uris(await call("search_resources", { query: "instal" }))).toContain("docs+file:///guide/install.md"); // prefix
    expect(uris(await call("search_resources", { query: "kubernetse" }))).toEqual(["wiki://pages/kubernetes"]); // a typo
    expect(uris(await call("search_resources", { query: "major version" }))).toEqual(["docs+file:///guide/upgrade.md"]); // description
    expect(uris(await call("search_resources", { query: "prices csv" }))[0]).toBe("docs+file:///data/prices.csv");
    expect(uris(await call("search_resources", { query: "guide", mimeType: "text/markdown", limit: 1 }))).toHaveLength(1);
    expect(uris(await call("search_resources", { query: "guide", mimeType: "text/csv" }))).toEqual([]);
    expect(uris(await call("search_resources", { query: "zzzz" }))).toEqual([]);
  });

  it("search_resources looks up the first 16 distinct words of a query (each is a search of the whole index), one-letter words exactly", async () => {
    const { call } = setup();
    const junk = Array.from({ length: 16 }, (_, i) => `junk${i}`).join(" ");
    expect(uris(await call("search_resources", { query: `kubernetes ${junk}` }))).toEqual(["wiki://pages/kubernetes"]);
    expect(uris(await call("search_resources", { query: `${junk} kubernetes` }))).toEqual([]);
    // Repeated words count once: 400 of them are one lookup, and the 17th distinct word still counts as the 2nd.
    expect(uris(await call("search_resources", { query: `${"1 ".repeat(400)}kubernetes` }))).toEqual(["wiki://pages/kubernetes"]);
    // One letter is not a prefix of everything.
    expect(uris(await call("search_resources", { query: "k" }))).toEqual([]);
  });

  it("search_resources follows list changes: a new resource is found, a removed one is not", async () => {
    const { call, catalog } = setup();
    expect(uris(await call("search_resources", { query: "helm" }))).toEqual([]);
    catalog.replace("resources", "wiki", [{ uri: "wiki://pages/helm", name: "helm", description: "Helm charts" }]);
    expect(uris(await call("search_resources", { query: "helm" }))).toEqual(["wiki://pages/helm"]);
    expect(uris(await call("search_resources", { query: "kubernetes" }))).toEqual([]);
  });

  it("catalog_resource_templates lists the templates with the broker's URIs, by backend on request", async () => {
    const { call } = setup();
    const templates = [{ uriTemplate: "docs+file:///tickets/{id}", name: "ticket", description: "One support ticket", serverId: "docs" }];
    expect((await call("catalog_resource_templates")).structuredContent).toEqual({ templates });
    expect((await call("catalog_resource_templates", { serverId: "wiki" })).structuredContent).toEqual({ templates: [] });
  });
});
