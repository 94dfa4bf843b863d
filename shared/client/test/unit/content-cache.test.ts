import { describe, expect, it } from "vitest";
import { ContentCache, resourceEntry, templateEntry } from "../../src/cache/content-cache.js";
import { LatestEntryMap } from "../../src/cache/latest-entry-map.js";

const read = (text: string) => ({ contents: [{ uri: "x", text }] });

describe("LatestEntryMap", () => {
  it("keeps the result of the fetch that started last, whatever the order they finish in", () => {
    const map = new LatestEntryMap<string>();
    const older = map.begin("k");
    const newer = map.begin("k");
    expect(map.settle("k", newer, "new")).toBe(true);
    expect(map.settle("k", older, "old")).toBe(false);
    expect(map.get("k")).toBe("new");
  });

  it("ends a fetch without an outcome on abandon: the entry stays, older fetches stay void, nothing is left marked", () => {
    const map = new LatestEntryMap<string>();
    map.settle("k", map.begin("k"), "first");
    const older = map.begin("k");
    const newer = map.begin("k");
    expect(map.fetching).toBe(1);
    map.abandon("k", newer);
    expect(map.get("k")).toBe("first");
    expect(map.fetching).toBe(0);
    expect(map.settle("k", older, "old")).toBe(false);
    expect(map.get("k")).toBe("first");
  });

  it("does not let a fetch under way refill a cleared entry", () => {
    const map = new LatestEntryMap<string>();
    map.settle("k", map.begin("k"), "first");
    const underway = map.begin("k");
    map.clear("k");
    expect(map.settle("k", underway, "late")).toBe(false);
    expect(map.get("k")).toBeNull();
    const afterAll = map.begin("j");
    map.clearAll();
    expect(map.settle("j", afterAll, "late")).toBe(false);
  });
});

describe("ContentCache", () => {
  it("keeps resource and template entries apart, and answers null when absent", () => {
    const cache = new ContentCache();
    cache.resources.settle("demo://a", cache.resources.begin("demo://a"), resourceEntry("demo://a", read("direct"), new Date(1), undefined));
    expect(cache.getResourceTemplate("demo://a")).toBeNull();
    cache.templates.settle("demo://{id}", cache.templates.begin("demo://{id}"), templateEntry("demo://{id}", { id: "a" }, "demo://a", read("via template"), new Date(2), undefined));
    expect(cache.getResource("demo://a")?.content).toEqual(read("direct"));
    expect(cache.getResourceTemplate("demo://{id}")?.content).toEqual(read("via template"));
    expect(cache.templatesExpandingTo("demo://a").map((entry) => entry.uriTemplate)).toEqual(["demo://{id}"]);
    cache.clearResource("demo://a");
    expect(cache.getResource("demo://a")).toBeNull();
    expect(cache.getResourceTemplate("demo://{id}")).not.toBeNull();
    expect(cache.getPrompt("p")).toBeNull();
    expect(cache.getToolCallResult("t")).toBeNull();
  });

  it("after a reload keeps resources that are listed or match a listed template, and listed templates", () => {
    const cache = new ContentCache();
    for (const uri of ["demo://listed", "demo://files/a.txt", "demo://gone"]) {
      cache.resources.settle(uri, cache.resources.begin(uri), resourceEntry(uri, read(uri), new Date(1), undefined));
    }
    for (const uriTemplate of ["demo://files/{name}", "demo://old/{id}"]) {
      cache.templates.settle(uriTemplate, cache.templates.begin(uriTemplate), templateEntry(uriTemplate, {}, "demo://x", read(uriTemplate), new Date(1), undefined));
    }
    cache.retainResources([{ uri: "demo://listed", name: "listed" }], [{ uriTemplate: "demo://files/{name}", name: "files" }]);
    expect(cache.getResource("demo://listed")).not.toBeNull();
    expect(cache.getResource("demo://files/a.txt")).not.toBeNull();
    expect(cache.getResource("demo://gone")).toBeNull();
    expect(cache.getResourceTemplate("demo://files/{name}")).not.toBeNull();
    expect(cache.getResourceTemplate("demo://old/{id}")).toBeNull();
  });
});
