import { BrokerError, MemoryJobQueue, type Clock } from "@mcp-broker/shared";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ancestorsOf, Catalog, isSubResource } from "../../src/catalog/catalog.js";
import { CatalogService, type ReloadJob } from "../../src/catalog/catalog-service.js";
import type { BackendConnection } from "../../src/upstream/backend-connection.js";
import type { BackendPool } from "../../src/upstream/backend-pool.js";

describe("catalog", () => {
  const catalog = () =>
    new Catalog([
      { id: "a", prefix: true },
      { id: "b", prefix: false },
      { id: "c", prefix: false },
    ]);

  it("namespaces, diffs by canonical hash and moves the version only on a real change", () => {
    const cat = catalog();
    const first = cat.replace("tools", "a", [{ name: "echo", inputSchema: { type: "object", properties: { x: {}, y: {} } } }, { name: "add" }]);
    expect(first).toEqual({ added: ["a__echo", "a__add"], removed: [], changed: [] });
    expect(cat.version("tools")).toBe(1);
    // Same definitions with keys in another order: no change, no new version.
    const same = cat.replace("tools", "a", [{ name: "add" }, { inputSchema: { properties: { y: {}, x: {} }, type: "object" }, name: "echo" }]);
    expect(same).toEqual({ added: [], removed: [], changed: [] });
    expect(cat.version("tools")).toBe(1);
    const changed = cat.replace("tools", "a", [{ name: "echo", description: "new" }]);
    expect(changed).toEqual({ added: [], removed: ["a__add"], changed: ["a__echo"] });
    expect(cat.version("tools")).toBe(2);
    expect(cat.list("tools").map((t) => t.exposed.name)).toEqual(["a__echo"]);
  });

  it("lets the first unprefixed backend win a name collision and reports it", () => {
    const cat = catalog();
    cat.replace("tools", "c", [{ name: "shared", description: "from c" }]);
    cat.replace("tools", "b", [{ name: "shared", description: "from b" }]);
    expect(cat.get("tools", "shared")?.backendId).toBe("b");
    expect(cat.collisions()).toEqual(["tools 'shared' of backend 'c' is hidden by backend 'b'"]);
    // A change to the hidden item changes nothing clients see: nothing to announce.
    const version = cat.version("tools");
    expect(cat.replace("tools", "c", [{ name: "shared", description: "from c, edited" }])).toEqual({ added: [], removed: [], changed: [] });
    expect(cat.version("tools")).toBe(version);
    // The winner leaving uncovers the hidden one: for clients, the item changed.
    expect(cat.clearBackend("b").get("tools")).toEqual({ added: [], removed: [], changed: ["shared"] });
    expect(cat.get("tools", "shared")?.backendId).toBe("c");
    expect(cat.collisions()).toEqual([]);
  });

  it("keeps a held tool's name: it is not listed or found, and an unprefixed twin does not take its place", () => {
    const cat = catalog();
    cat.replace("tools", "c", [{ name: "shared", description: "from c" }]);
    expect(cat.get("tools", "shared")?.backendId).toBe("c");
    const diff = cat.replace("tools", "b", [{ name: "shared", description: "from b, changed" }, { name: "fine" }], new Set(["shared"]));
    expect(diff).toEqual({ added: ["fine"], removed: ["shared"], changed: [] }); // for clients, c's twin went away
    expect(cat.get("tools", "shared")).toBeUndefined();
    expect(cat.list("tools").map((t) => t.exposedKey)).toEqual(["fine"]);
    expect(cat.collisions()).toEqual(["tools 'shared' of backend 'c' is hidden by backend 'b' (whose own is held)"]);
    // Pinned again: back in the list, still ahead of the twin.
    cat.replace("tools", "b", [{ name: "shared", description: "from b, changed" }, { name: "fine" }]);
    expect(cat.get("tools", "shared")?.backendId).toBe("b");
  });

  it("resolves listed resources, template matches, sub-resources and bare prefixes", () => {
    const cat = catalog();
    cat.replace("resources", "a", [{ uri: "file:///docs", name: "docs" }]);
    cat.replace("resourceTemplates", "a", [{ uriTemplate: "users://{id}/profile", name: "user" }]);
    cat.replace("resourceTemplates", "b", [{ uriTemplate: "weather://{city}{?units}", name: "weather" }]);
    expect(cat.resolveResource("a+file:///docs")).toEqual({ backendId: "a", uri: "file:///docs", match: "listed" });
    expect(cat.resolveResource("a+users://42/profile")).toEqual({ backendId: "a", uri: "users://42/profile", match: "template" });
    expect(cat.resolveResource("a+file:///docs/guide.md")).toEqual({ backendId: "a", uri: "file:///docs/guide.md", match: "sub-resource" });
    expect(cat.resolveResource("a+file:///docsx")).toEqual({ backendId: "a", uri: "file:///docsx", match: "prefix" });
    expect(cat.resolveResource("weather://paris?units=metric")).toEqual({ backendId: "b", uri: "weather://paris?units=metric", match: "template" });
    expect(cat.resolveResource("nope://x")).toBeUndefined();
    expect(cat.resolveResource("z+file:///docs")).toBeUndefined();
    // Sub-resources of listed resources of any length, as the lists change; an unprefixed twin's
    // hidden resource is no parent for its backend.
    const below = "a+file:///a/much/longer/root/x/y";
    cat.replace("resources", "a", [{ uri: "file:///docs", name: "docs" }, { uri: "file:///a/much/longer/root", name: "root" }]);
    expect(cat.resolveResource(below)).toMatchObject({ backendId: "a", match: "sub-resource" });
    cat.replace("resources", "a", [{ uri: "file:///docs", name: "docs" }]);
    expect(cat.resolveResource(below)).toMatchObject({ backendId: "a", match: "prefix" });
    cat.replace("resources", "b", [{ uri: "shared://r", name: "r" }]);
    cat.replace("resources", "c", [{ uri: "shared://r", name: "r" }, { uri: "own://c", name: "c" }]);
    expect(cat.resolveResource("shared://r/1")).toEqual({ backendId: "b", uri: "shared://r/1", match: "sub-resource" });
    expect(cat.resolveResource("own://c/1")).toEqual({ backendId: "c", uri: "own://c/1", match: "sub-resource" });
    cat.clearBackend("b");
    expect(cat.resolveResource("shared://r/1")).toEqual({ backendId: "c", uri: "shared://r/1", match: "sub-resource" });
  });

  it("translates URIs inside results for prefixed backends only", () => {
    const cat = catalog();
    const result = { contents: [{ uri: "file:///x", text: "t" }], content: [{ type: "resource_link", uri: "ui://w", name: "w" }] };
    expect(cat.exposeResult("a", result)).toEqual({ contents: [{ uri: "a+file:///x", text: "t" }], content: [{ type: "resource_link", uri: "a+ui://w", name: "w" }] });
    expect(cat.exposeResult("b", result)).toBe(result);
  });

  it("leaves out resource templates too long to match cheaply, and unparsable ones", () => {
    const cat = new Catalog([{ id: "a", prefix: true }]);
    const long = `x://${"{a}".repeat(400)}`;
    cat.replace("resourceTemplates", "a", [{ uriTemplate: long, name: "long" }, { uriTemplate: "x://{bad", name: "bad" }, { uriTemplate: "x://{id}", name: "ok" }]);
    expect(cat.list("resourceTemplates").map((t) => t.exposedKey)).toEqual(["a+x://{id}"]);
  });

  it("knows sub-resources by path", () => {
    expect(isSubResource("file:///a/b", "file:///a")).toBe(true);
    expect(isSubResource("file:///a/b", "file:///a/")).toBe(true);
    expect(isSubResource("file:///ab", "file:///a")).toBe(false);
    expect(isSubResource("file:///a", "file:///a")).toBe(false);
  });

  it("lists exactly the ancestors isSubResource accepts, nearest first", () => {
    expect(ancestorsOf("file:///a/b")).toEqual(["file:///a/", "file:///a", "file:///", "file://", "file:/", "file:"]);
    expect(ancestorsOf("file:///a/b", (length) => length === 9 || length === 6)).toEqual(["file:///a", "file:/"]);
    for (const uri of ["file:///a/b", "demo://files/x.txt", "ui://w//x/", "a/b/c", "/x", "urn:isbn:1", "test://odd/a%20b?x=1#frag/y", "s://h/", "x"]) {
      const expected = Array.from({ length: uri.length }, (_, n) => uri.slice(0, n)).filter((parent) => parent !== "" && isSubResource(uri, parent));
      expect([...ancestorsOf(uri)].sort(), uri).toEqual(expected.sort());
    }
  });
});

describe("catalog service: debounced reloads on fake timers", () => {
  const clock: Clock = { now: () => Date.now(), setTimeout: (f, ms) => setTimeout(f, ms), clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout) };
  let tools: Record<string, unknown>[];
  let listCalls: number;
  let release: (() => void) | undefined;
  let backend: BackendConnection;
  let service: CatalogService;
  let announced: string[];

  beforeEach(() => {
    vi.useFakeTimers();
    tools = [{ name: "one" }];
    listCalls = 0;
    release = undefined;
    announced = [];
    backend = {
      id: "a",
      state: "connected",
      capabilities: { tools: { listChanged: true } },
      request: async (method: string) => {
        if (method !== "tools/list") return {};
        listCalls++;
        const snapshot = [...tools];
        if (release === undefined && listCalls === 2) await new Promise<void>((r) => (release = r));
        return { tools: snapshot };
      },
    } as unknown as BackendConnection;
    service = new CatalogService([{ id: "a", command: "x", args: [], prefix: true, era: "auto", timeoutMs: 1000, reconnect: { initialDelayMs: 1, maxDelayMs: 1, multiplier: 1 }, healthIntervalMs: 1000, toolChanges: "accept" }], {
      logger: pino({ level: "silent" }),
      clock,
      jobs: new MemoryJobQueue<ReloadJob>({ clock }),
      debounceMs: 1_000,
      relistIntervalMs: 60_000,
      onListChanged: (list) => announced.push(list),
    });
    service.attach({ get: () => backend } as unknown as BackendPool);
  });

  afterEach(() => {
    service.close();
    vi.useRealTimers();
  });

  it("turns a burst into one reload, a change during a reload into exactly one more, and announces only real changes", async () => {
    await service.backendConnected(backend);
    expect(listCalls).toBe(1);
    expect(announced).toEqual(["tools"]);

    tools = [{ name: "one" }, { name: "two" }];
    for (let i = 0; i < 50; i++) service.listChanged(backend, "tools");
    await vi.advanceTimersByTimeAsync(999);
    expect(listCalls).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(listCalls).toBe(2); // running, held open by the test

    tools = [{ name: "one" }, { name: "two" }, { name: "three" }];
    service.listChanged(backend, "tools");
    service.listChanged(backend, "tools");
    release?.();
    await vi.advanceTimersByTimeAsync(0);
    expect(announced).toEqual(["tools", "tools"]);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(listCalls).toBe(3);
    expect(announced).toEqual(["tools", "tools", "tools"]);
    expect(service.catalog.list("tools").map((t) => t.exposedKey)).toEqual(["a__one", "a__two", "a__three"]);

    // list_changed without a real change: a reload, but nothing announced.
    service.listChanged(backend, "tools");
    await vi.advanceTimersByTimeAsync(1_000);
    expect(listCalls).toBe(4);
    expect(announced).toHaveLength(3);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(listCalls).toBe(4);
  });

  it("reloads a backend's resources and templates together: one resources list_changed for both", async () => {
    let resources = [{ uri: "x://one", name: "one" }];
    let templates = [{ uriTemplate: "x://{id}", name: "item" }];
    const calls: string[] = [];
    backend = {
      id: "a",
      state: "connected",
      capabilities: { resources: { listChanged: true } },
      request: async (method: string) => {
        calls.push(method);
        return method === "resources/list" ? { resources } : method === "resources/templates/list" ? { resourceTemplates: templates } : {};
      },
    } as unknown as BackendConnection;
    await service.backendConnected(backend);
    expect(announced).toEqual(["resources"]);
    resources = [...resources, { uri: "x://two", name: "two" }];
    templates = [{ uriTemplate: "x://{id}/v2", name: "item" }];
    calls.length = 0;
    service.listChanged(backend, "resources");
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls.sort()).toEqual(["resources/list", "resources/templates/list"]);
    expect(announced).toEqual(["resources", "resources"]);
  });

  it("does not store a list fetched before the backend reconnected", async () => {
    await service.backendConnected(backend); // call 1
    tools = [{ name: "stale" }];
    const stale = service.backendConnected(backend); // call 2, held open
    await vi.advanceTimersByTimeAsync(0);
    service.backendDisconnected(backend);
    tools = [{ name: "fresh" }];
    await service.backendConnected(backend); // call 3
    release?.();
    await stale;
    expect(service.catalog.list("tools").map((t) => t.exposedKey)).toEqual(["a__fresh"]);
  });
});

describe("catalog service: failed list loads are retried with the backend's backoff", () => {
  const clock: Clock = { now: () => Date.now(), setTimeout: (f, ms) => setTimeout(f, ms), clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout) };
  // Delays lie in [d/2, d]: attempt 0 in [50, 100] ms, attempt 1 in [100, 200], then [200, 400]. Each
  // step below advances 1 ms past the latest moment it waits for, so the run's promises settle too.
  const reconnect = { initialDelayMs: 100, maxDelayMs: 400, multiplier: 2 };
  let tools: Record<string, unknown>[];
  let listCalls: number;
  let failures: number;
  let backend: { id: string; state: string; capabilities: unknown; request: (method: string) => Promise<Record<string, unknown>> };
  let service: CatalogService;
  let announced: string[];

  const listed = () => service.catalog.list("tools").map((t) => t.exposedKey);

  beforeEach(() => {
    vi.useFakeTimers();
    tools = [{ name: "one" }];
    listCalls = 0;
    failures = 0;
    announced = [];
    backend = {
      id: "a",
      state: "connected",
      capabilities: { tools: { listChanged: true } },
      request: async (method: string) => {
        if (method !== "tools/list") return {};
        listCalls++;
        if (failures > 0) {
          failures--;
          throw new BrokerError("BACKEND_TIMEOUT", "Backend 'a' did not answer within 1000 ms.");
        }
        return { tools: [...tools] };
      },
    };
    service = new CatalogService([{ id: "a", command: "x", args: [], prefix: true, era: "auto", timeoutMs: 1000, reconnect, healthIntervalMs: 1000, toolChanges: "accept" }], {
      logger: pino({ level: "silent" }),
      clock,
      jobs: new MemoryJobQueue<ReloadJob>({ clock }),
      debounceMs: 10,
      relistIntervalMs: 60_000,
      onListChanged: (list) => announced.push(list),
    });
    service.attach({ get: () => backend } as unknown as BackendPool);
  });

  afterEach(() => {
    service.close();
    vi.useRealTimers();
  });

  const connection = () => backend as unknown as BackendConnection;

  it("reloads a list whose reload failed, with growing delays, until one succeeds", async () => {
    await service.backendConnected(connection());
    expect(listed()).toEqual(["a__one"]);

    tools = [{ name: "one" }, { name: "two" }];
    failures = 2;
    service.listChanged(connection(), "tools");
    await vi.advanceTimersByTimeAsync(11);
    expect(listCalls).toBe(2); // failed at 10 ms; retried in [60, 110]
    await vi.advanceTimersByTimeAsync(100);
    expect(listCalls).toBe(3); // failed again; retried in [160, 310]
    await vi.advanceTimersByTimeAsync(200);
    expect(listCalls).toBe(4);
    expect(listed()).toEqual(["a__one", "a__two"]);
    expect(announced).toEqual(["tools", "tools"]);

    // Loaded: nothing more, and the next failure starts the backoff over.
    await vi.advanceTimersByTimeAsync(10_000);
    expect(listCalls).toBe(4);
    failures = 1;
    service.listChanged(connection(), "tools");
    await vi.advanceTimersByTimeAsync(11 + 100);
    expect(listCalls).toBe(6);
  });

  it("retries a list that failed while loading at connect", async () => {
    failures = 1;
    await service.backendConnected(connection());
    expect(listed()).toEqual([]);
    await vi.advanceTimersByTimeAsync(101);
    expect(listCalls).toBe(2);
    expect(listed()).toEqual(["a__one"]);
    expect(announced).toEqual(["tools"]);
  });

  it("keeps the job queue's contract: a list_changed during the backoff reloads after the debounce, and the retry is then dropped", async () => {
    await service.backendConnected(connection());
    failures = 1;
    service.listChanged(connection(), "tools");
    await vi.advanceTimersByTimeAsync(11);
    expect(listCalls).toBe(2); // failed at 10 ms; a retry waits until [60, 110]
    tools = [{ name: "one" }, { name: "three" }];
    service.listChanged(connection(), "tools");
    await vi.advanceTimersByTimeAsync(11);
    expect(listCalls).toBe(3);
    expect(listed()).toEqual(["a__one", "a__three"]);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(listCalls).toBe(3);
  });

  it("stops retrying when the backend drops (its reconnect loads everything anyway)", async () => {
    await service.backendConnected(connection());
    failures = Number.POSITIVE_INFINITY;
    service.listChanged(connection(), "tools");
    await vi.advanceTimersByTimeAsync(11 + 100 + 200);
    expect(listCalls).toBe(4); // the next retry comes at 360 ms at the earliest
    backend.state = "backoff";
    service.backendDisconnected(connection());
    await vi.advanceTimersByTimeAsync(10_000);
    expect(listCalls).toBe(4);
  });
});
