import { BrokerError, CHANNEL, MemoryBus, MemoryCatalogStore, MemoryJobQueue, MemoryPositions, MemoryUpdateLog, systemClock, type BackendConfig, type Clock } from "@mcp-broker/shared";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ancestorsOf, isSubResource } from "@mcp-broker/shared";
import { Catalog } from "../../src/catalog/catalog.js";
import { CatalogService } from "../../src/catalog/catalog-service.js";
import { BusBarrier } from "../../src/fanout/bus-barrier.js";
import { SessionResume } from "../../src/session/session-resume.js";
import { ListChanges, ListReloader, type ClusterJob, type ListedBackend } from "@mcp-broker/member";

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

  it("routes a URI of a colliding template to the template's winner, not to the backend whose template is hidden", () => {
    const cat = new Catalog([
      { id: "u", prefix: false },
      { id: "p", prefix: true },
    ]);
    // u (listed first) exposes p+tpl://{id} itself; p's tpl://{id} would be exposed as the same.
    cat.replace("resourceTemplates", "u", [{ uriTemplate: "p+tpl://{id}", name: "u's" }]);
    cat.replace("resourceTemplates", "p", [{ uriTemplate: "tpl://{id}", name: "p's" }]);
    expect(cat.collisions()).toEqual(["resourceTemplates 'p+tpl://{id}' of backend 'p' is hidden by backend 'u'"]);
    expect(cat.resolveResource("p+tpl://5")).toEqual({ backendId: "u", uri: "p+tpl://5", match: "template" });
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
    // A dot segment climbs out of the listed resource: not below it (a bare prefix match subscribes nothing).
    for (const climbs of ["a+file:///docs/../etc/passwd", "a+file:///docs/%2E%2e/x", "a+file:///docs/./..", "a+file:///docs/sub/../../x"]) {
      expect(cat.resolveResource(climbs), climbs).toMatchObject({ match: "prefix" });
    }
    expect(cat.resolveResource("a+file:///docs/.hidden/..x")).toMatchObject({ match: "sub-resource" });
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

/**
 * One member's catalog path on the memory engine, on fake timers: list_changed → a debounced reload
 * job → the cluster catalog → the announcement on the bus → this member's lists and their
 * list_changed. The backend is a fake that counts its list requests.
 */
describe("catalog: reload jobs, the cluster catalog and what members apply", () => {
  const clock: Clock = { now: () => Date.now(), setTimeout: (f, ms) => setTimeout(f, ms), clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout) };
  const config: BackendConfig = { id: "a", command: "x", args: [], prefix: true, era: "auto", timeoutMs: 1000, reconnect: { initialDelayMs: 1, maxDelayMs: 1, multiplier: 1 }, healthIntervalMs: 1000, toolChanges: "accept" };
  let lists: Record<string, unknown>;
  let calls: string[];
  let failures: number;
  let hold: Promise<void> | undefined;
  let backend: ListedBackend & { state: string; capabilities: Record<string, unknown> };
  let jobs: MemoryJobQueue<ClusterJob>;
  let catalog: CatalogService;
  let changes: ListChanges;
  let announced: string[];
  let bus: MemoryBus;
  let store: MemoryCatalogStore;

  beforeEach(async () => {
    vi.useFakeTimers();
    lists = { tools: [{ name: "one", inputSchema: { type: "object" } }], resources: [], resourceTemplates: [], prompts: [] };
    calls = [];
    failures = 0;
    hold = undefined;
    announced = [];
    backend = {
      id: "a",
      state: "connected",
      capabilities: { tools: { listChanged: true }, resources: { listChanged: true } },
      request: async (method: string) => {
        calls.push(method);
        const field = { "tools/list": "tools", "prompts/list": "prompts", "resources/list": "resources", "resources/templates/list": "resourceTemplates" }[method] ?? "";
        const snapshot = lists[field];
        if (hold !== undefined) await hold;
        if (failures > 0) {
          failures--;
          throw new BrokerError("BACKEND_TIMEOUT", "Backend 'a' did not answer within 1000 ms.");
        }
        return { [field]: snapshot };
      },
    };
    const logger = pino({ level: "silent" });
    bus = new MemoryBus();
    store = new MemoryCatalogStore(new MemoryPositions(), bus);
    jobs = new MemoryJobQueue<ClusterJob>({ clock, attempts: 3, backoffMs: 100 });
    const reloader = new ListReloader({ backends: [config], store, logger, instanceId: "me", backend: () => backend });
    jobs.process(async (_key, job) => (job.type === "reload" ? reloader.reload(job.backendId, job.list) : undefined));
    catalog = new CatalogService([config], { logger, store });
    catalog.onListChanged((list) => announced.push(list));
    changes = new ListChanges({ jobs, backends: [config], debounceMs: 1_000, relistIntervalMs: 60_000, watching: () => true, logger, now: () => clock.now() });
    await bus.subscribe(CHANNEL.catalog);
    bus.onMessage((_channel, message) => {
      if (message.kind === "catalog.changed") catalog.changed(message);
    });
    await catalog.backendConnected("a");
    changes.watching(backend);
    await vi.advanceTimersByTimeAsync(1);
  });

  afterEach(async () => {
    await jobs.close();
    vi.useRealTimers();
  });

  const listed = () => catalog.catalog.list("tools").map((t) => t.exposedKey);
  const toolLists = () => calls.filter((method) => method === "tools/list").length;

  it("loads every list when the member starts watching, and is ready once all are applied", () => {
    expect(catalog.ready("a")).toBe(true);
    expect(listed()).toEqual(["a__one"]);
    expect(announced).toEqual(["tools"]);
    // Resources and templates together; prompts (not offered) stored empty without a request.
    expect(calls.sort()).toEqual(["resources/list", "resources/templates/list", "tools/list"]);
  });

  it("leaves out a malformed item and a name listed twice, and keeps the rest of the list", async () => {
    const tool = (name: string, description: string) => ({ name, description, inputSchema: { type: "object" } });
    lists.tools = [tool("one", "first"), { name: "broken", inputSchema: { type: "string" } }, tool("two", "2"), tool("one", "again")];
    changes.listChanged("a", "tools");
    await vi.advanceTimersByTimeAsync(1_000);
    expect(listed()).toEqual(["a__one", "a__two"]);
    expect(catalog.catalog.get("tools", "a__one")?.original).toMatchObject({ description: "first" });
    // Stored once each, as the cluster catalog's diffs count them.
    expect((await store.get("a", "tools"))?.items.map((item) => item.name)).toEqual(["one", "two"]);
  });

  it("turns a burst into one reload, a change during a reload into exactly one more, and announces only real changes", async () => {
    lists.tools = [{ name: "one", inputSchema: { type: "object" } }, { name: "two", inputSchema: { type: "object" } }];
    for (let i = 0; i < 50; i++) changes.listChanged("a", "tools");
    await vi.advanceTimersByTimeAsync(999);
    expect(toolLists()).toBe(1);
    let release: () => void = () => undefined;
    hold = new Promise<void>((resolve) => (release = resolve));
    await vi.advanceTimersByTimeAsync(1);
    expect(toolLists()).toBe(2); // running, held open by the test

    lists.tools = [{ name: "one", inputSchema: { type: "object" } }, { name: "two", inputSchema: { type: "object" } }, { name: "three", inputSchema: { type: "object" } }];
    changes.listChanged("a", "tools");
    changes.listChanged("a", "tools");
    hold = undefined;
    release();
    await vi.advanceTimersByTimeAsync(0);
    expect(announced).toEqual(["tools", "tools"]);
    expect(listed()).toEqual(["a__one", "a__two"]);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(toolLists()).toBe(3);
    expect(announced).toEqual(["tools", "tools", "tools"]);
    expect(listed()).toEqual(["a__one", "a__two", "a__three"]);

    // list_changed without a real change: a reload, but nothing stored or announced.
    changes.listChanged("a", "tools");
    await vi.advanceTimersByTimeAsync(1_000);
    expect(toolLists()).toBe(4);
    expect(announced).toHaveLength(3);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(toolLists()).toBe(4);
  });

  it("reloads a backend's resources and templates together: one resources list_changed for both", async () => {
    lists.resources = [{ uri: "x://one", name: "one" }];
    lists.resourceTemplates = [{ uriTemplate: "x://{id}", name: "item" }];
    calls.length = 0;
    changes.listChanged("a", "resources");
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls.sort()).toEqual(["resources/list", "resources/templates/list"]);
    expect(announced).toEqual(["tools", "resources"]);
  });

  it("leaves list_changed to the backend's watcher when this member does not watch it", async () => {
    const bystander = new ListChanges({ jobs, backends: [config], debounceMs: 1_000, relistIntervalMs: 60_000, watching: () => false, logger: pino({ level: "silent" }), now: () => clock.now() });
    lists.tools = [{ name: "two", inputSchema: { type: "object" } }];
    bystander.listChanged("a", "tools");
    await vi.advanceTimersByTimeAsync(5_000);
    expect(toolLists()).toBe(1);
    expect(listed()).toEqual(["a__one"]);
  });

  it("logs a list_changed that starts a reload (info), one coalesced into it (debug), and warns of one the backend did not declare", async () => {
    const lines: { level: number; msg: string; backend?: string; list?: string }[] = [];
    const logger = pino({ level: "debug" }, { write: (line: string) => void lines.push(JSON.parse(line) as (typeof lines)[number]) });
    const logged = new ListChanges({ jobs, backends: [config], debounceMs: 1_000, relistIntervalMs: 60_000, watching: () => true, logger, now: () => clock.now() });
    logged.listChanged("a", "tools");
    logged.listChanged("a", "tools");
    logged.listChanged("a", "prompts", "undeclared");
    await vi.advanceTimersByTimeAsync(1_000);
    logged.listChanged("a", "tools");
    logged.listChanged("a", "resources", "gap");
    expect(lines.map((l) => [l.level, l.msg, l.backend, l.list])).toEqual([
      [30, "list_changed: reloading the list", "a", "tools"],
      [20, "list_changed coalesced into the pending reload", "a", "tools"],
      [40, "list_changed from a backend that did not declare listChanged for this list; reloading it anyway", "a", "prompts"],
      [30, "list_changed: reloading the list", "a", "prompts"],
      [30, "list_changed: reloading the list", "a", "tools"],
      [30, "the backend's notification stream was down: reloading the list", "a", "resources"],
    ]);
  });

  it("keeps the last good version when a backend answers a list with garbage, and retries the job", async () => {
    lists.tools = "not a list";
    changes.listChanged("a", "tools");
    await vi.advanceTimersByTimeAsync(1_000);
    expect(toolLists()).toBe(2);
    expect(listed()).toEqual(["a__one"]);
    lists.tools = [{ name: "one", inputSchema: { type: "object" } }, { name: "fixed", inputSchema: { type: "object" } }];
    await vi.advanceTimersByTimeAsync(100); // the first retry's backoff
    expect(toolLists()).toBe(3);
    expect(listed()).toEqual(["a__one", "a__fixed"]);
  });

  it("retries a reload that failed, with backoff, until one succeeds", async () => {
    lists.tools = [{ name: "one", inputSchema: { type: "object" } }, { name: "two", inputSchema: { type: "object" } }];
    failures = 2;
    changes.listChanged("a", "tools");
    await vi.advanceTimersByTimeAsync(1_000);
    expect(toolLists()).toBe(2);
    await vi.advanceTimersByTimeAsync(100);
    expect(toolLists()).toBe(3);
    expect(listed()).toEqual(["a__one"]);
    await vi.advanceTimersByTimeAsync(200);
    expect(toolLists()).toBe(4);
    expect(listed()).toEqual(["a__one", "a__two"]);
  });

  it("takes a backend's items out while this member's connection is down, and back from the store without listing it", async () => {
    backend.state = "backoff";
    catalog.backendDisconnected("a");
    await vi.advanceTimersByTimeAsync(0);
    expect(listed()).toEqual([]);
    expect(catalog.ready("a")).toBe(false);
    backend.state = "connected";
    await catalog.backendConnected("a");
    expect(listed()).toEqual(["a__one"]);
    expect(catalog.ready("a")).toBe(true);
    expect(toolLists()).toBe(1);
    expect(announced).toEqual(["tools", "tools", "tools"]);
  });

  it("applies a stored version once, however often and in whatever order it is announced", async () => {
    lists.tools = [{ name: "one", inputSchema: { type: "object" } }, { name: "two", inputSchema: { type: "object" } }];
    changes.listChanged("a", "tools");
    await vi.advanceTimersByTimeAsync(1_000);
    expect(announced).toEqual(["tools", "tools"]);
    catalog.changed({ kind: "catalog.changed", v: 1, origin: "other", backendId: "a", lists: [{ kind: "tools", body: { items: [{ name: "stale" }] }, version: 1 }], position: 1 });
    catalog.changed({ kind: "catalog.changed", v: 1, origin: "other", backendId: "a", lists: [{ kind: "tools", body: { items: [{ name: "stale" }] }, version: 2 }], position: 2 });
    await catalog.resync();
    expect(announced).toEqual(["tools", "tools"]);
  });

  it("re-lists a backend that does not announce changes on a schedule, one repetition per list", async () => {
    backend.capabilities = { tools: {} };
    changes.watching(backend);
    changes.watching(backend); // a second watch start does not add a second repetition
    await vi.advanceTimersByTimeAsync(1);
    const before = toolLists();
    lists.tools = [{ name: "one", inputSchema: { type: "object" } }, { name: "relisted", inputSchema: { type: "object" } }];
    await vi.advanceTimersByTimeAsync(60_000);
    await vi.advanceTimersByTimeAsync(1); // the run the repetition scheduled (a 0 ms timer waits 1 ms)
    expect(toolLists()).toBe(before + 1);
    await vi.advanceTimersByTimeAsync(60_000);
    await vi.advanceTimersByTimeAsync(1);
    expect(toolLists()).toBe(before + 2);
    expect(listed()).toEqual(["a__one", "a__relisted"]);
  });
});

/**
 * What a backend connecting or dropping on this member does to the lists takes a position of its
 * own in the cluster's order, as a stored version does: a resumption from before it is told the
 * list changed, one from it or later is not. Memory engine, the member's barrier and bus.
 */
describe("catalog: a backend's items leaving and coming back, in the cluster's order", () => {
  const config: BackendConfig = { id: "a", command: "x", args: [], prefix: true, era: "auto", timeoutMs: 1000, reconnect: { initialDelayMs: 1, maxDelayMs: 1, multiplier: 1 }, healthIntervalMs: 1000, toolChanges: "accept" };

  async function member() {
    const bus = new MemoryBus();
    const positions = new MemoryPositions();
    const updates = new MemoryUpdateLog(bus, positions);
    const store = new MemoryCatalogStore(positions, bus);
    const barrier = new BusBarrier({ updates, instanceId: "me", clock: systemClock });
    const redis = { away: false };
    const catalog = new CatalogService([config], {
      logger: pino({ level: "silent" }),
      store,
      place: (run) => (redis.away ? Promise.reject(new Error("Redis is not connected")) : barrier.place(run)),
    });
    const heard: { list: string; position: number | undefined }[] = [];
    catalog.onListChanged((list, _diffs, position) => heard.push({ list, position }));
    bus.onMessage((_channel, message) => {
      if (message.kind === "catalog.changed") catalog.changed(message);
      else if (message.kind === "bus.barrier") barrier.received(message);
    });
    await bus.subscribe(CHANNEL.catalog);
    await bus.subscribe(CHANNEL.replies("me"));
    const resume = new SessionResume({ updates, listPosition: (list) => catalog.changedPosition(list), caughtUp: () => barrier.caughtUp() });
    positions.next(); // (a position before the stored version, for the resumptions below)
    const stored = (await store.put("a", [{ kind: "tools", expected: 0, body: { items: [{ name: "one", inputSchema: { type: "object" } }] } }], "reloader"))?.[0];
    return { catalog, heard, resume, redis, storedAt: stored?.position ?? 0, tools: () => catalog.catalog.list("tools").map((tool) => tool.exposedKey) };
  }

  /** A member that has served without backend "a" past its startup wait: "a" connecting is a change its clients see. */
  async function servingWithout() {
    const m = await member();
    m.catalog.serving();
    // Its lists lacked "a": they got a position of their own.
    await vi.waitFor(() => expect(m.catalog.changedPosition("tools")).toBeGreaterThan(0));
    return m;
  }

  it("before it serves, applies the cluster's stored versions at their own positions: a resumption from after them is told nothing", async () => {
    const { catalog, heard, resume, storedAt } = await member();
    const afterStored = await resume.current();
    await catalog.backendConnected("a");
    expect(heard).toEqual([{ list: "tools", position: undefined }]);
    expect(catalog.changedPosition("tools")).toBe(storedAt);
    expect((await resume.since([], afterStored)).lists).toEqual([]);
    expect((await resume.since([], storedAt - 1)).lists).toEqual([{ list: "tools", position: storedAt }]);
    // Serving now: a drop is placed.
    catalog.serving();
    catalog.backendDisconnected("a");
    await vi.waitFor(() => expect(heard).toHaveLength(2));
    expect(heard[1]?.position).toBeGreaterThan(afterStored);
  });

  it("announces each at a position reserved after what clients saw before, and tells a resumption from before it, not one from it", async () => {
    const { catalog, heard, resume, tools } = await servingWithout();
    const beforeConnect = await resume.current();
    await catalog.backendConnected("a");
    expect(tools()).toEqual(["a__one"]);
    const connected = heard.at(-1)?.position ?? 0;
    expect(heard).toEqual([{ list: "tools", position: connected }]);
    // The stored version's position is older than the connect: a client between the two missed the tools arriving.
    expect(connected).toBeGreaterThan(beforeConnect);
    expect((await resume.since([], beforeConnect)).lists).toEqual([{ list: "tools", position: connected }]);

    catalog.backendDisconnected("a");
    await vi.waitFor(() => expect(heard).toHaveLength(2));
    expect(tools()).toEqual([]);
    const dropped = heard[1]?.position ?? 0;
    expect(heard[1]).toEqual({ list: "tools", position: dropped });
    expect(dropped).toBeGreaterThan(connected);
    // The position a resumption compares with never goes down when a backend's entry goes.
    expect(catalog.changedPosition("tools")).toBe(dropped);
    expect((await resume.since([], connected)).lists).toEqual([{ list: "tools", position: dropped }]);
    expect((await resume.since([], dropped)).lists).toEqual([]);

    await catalog.backendConnected("a");
    const back = heard[2]?.position ?? 0;
    expect(heard).toHaveLength(3);
    expect(back).toBeGreaterThan(dropped);
    expect((await resume.since([], dropped)).lists).toEqual([{ list: "tools", position: back }]);
    expect((await resume.since([], back)).lists).toEqual([]);
    // Lists the backend has nothing in did not change since the member began to serve without it.
    expect(catalog.changedPosition("prompts")).toBeLessThanOrEqual(beforeConnect);
  });

  it("makes a change it cannot place (Redis away) at once, and resumes nothing as exact until a later position stands for it", async () => {
    const { catalog, heard, resume, redis, tools } = await servingWithout();
    const before = await resume.current();
    redis.away = true;
    await catalog.backendConnected("a");
    expect(tools()).toEqual(["a__one"]);
    expect(heard).toEqual([{ list: "tools", position: undefined }]);
    expect(catalog.changedPosition("tools")).toBeUndefined();
    await expect(resume.since([], before)).rejects.toThrow(/cannot place/);

    redis.away = false;
    await catalog.resync();
    await vi.waitFor(() => expect(catalog.changedPosition("tools")).toBeGreaterThan(before));
    const standsFor = catalog.changedPosition("tools") ?? 0;
    expect((await resume.since([], before)).lists).toEqual([{ list: "tools", position: standsFor }]);
    expect((await resume.since([], standsFor)).lists).toEqual([]);
    // Nothing was announced again.
    expect(heard).toHaveLength(1);
  });
});
