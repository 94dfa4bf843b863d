import { describe, expect, it } from "vitest";
import { Catalog } from "../../src/catalog/catalog.js";
import type { RequestContext } from "../../src/routing/request-context.js";
import { Router } from "../../src/routing/router.js";
import type { BackendPool } from "@mcp-broker/member";

/** A backend whose calls finish when the test says so, and that counts them as `BackendConnection` does. */
function setup() {
  const finishers: (() => void)[] = [];
  let inFlight = 0;
  const backend = {
    id: "b",
    era: "legacy",
    state: "connected",
    get requestsInFlight() {
      return inFlight;
    },
    request: () => {
      inFlight++;
      return new Promise<Record<string, unknown>>((resolve) =>
        finishers.push(() => {
          inFlight--;
          resolve({ content: [] });
        }),
      );
    },
  };
  const pool = { get: () => backend, all: () => [backend] } as unknown as BackendPool;
  const catalog = new Catalog([{ id: "b", prefix: true }]);
  catalog.replace("tools", "b", [{ name: "t", inputSchema: { type: "object" } }]);
  const router = new Router(catalog, pool, { pageSize: 10 });
  const caller = (principal: string) => {
    const logs: unknown[] = [];
    const sent: Record<string, unknown>[] = [];
    const ctx: RequestContext = {
      era: "legacy",
      principal,
      sessionId: undefined,
      signal: new AbortController().signal,
      progressToken: undefined,
      logLevel: "debug",
      notify: (_method, params) => {
        logs.push(params.data);
        sent.push(params);
      },
    };
    return { ctx, logs, sent, call: () => router.callTool({ name: "b__t" }, ctx) };
  };
  const log = (data: string, more: Record<string, unknown> = {}) => router.relayLog("b", { level: "info", data, ...more });
  const finish = async (i: number) => {
    finishers[i]?.();
    await new Promise((r) => setImmediate(r));
  };
  /** A request of the broker's own (a poll, a subscribe, a list reload): it does not pass through the router. */
  const internal = () => void backend.request();
  return { caller, log, finish, internal };
}

describe("backend log relay", () => {
  it("passes a log on as the backend said it, `_meta` included; only the logger names the backend", () => {
    const { caller, log } = setup();
    const a = caller("p");
    void a.call();
    log("one", { logger: "db", _meta: { "example.com/trace": "t-1" } });
    log("two");
    expect(a.sent).toEqual([
      { level: "info", data: "one", logger: "b/db", _meta: { "example.com/trace": "t-1" } },
      { level: "info", data: "two", logger: "b" },
    ]);
  });

  it("gives a log to the only caller in flight, and to nobody when several are", async () => {
    const { caller, log, finish } = setup();
    const a = caller("p");
    const b = caller("p");
    void a.call();
    log("one");
    void b.call();
    log("two");
    await finish(0);
    log("three");
    expect(a.logs).toEqual(["one"]);
    expect(b.logs).toEqual(["three"]);
  });

  it("never gives a log to a caller whose request overlapped another principal's", async () => {
    const { caller, log, finish } = setup();
    const mine = caller("team-a");
    const theirs = caller("team-b");
    void theirs.call();
    void mine.call();
    await finish(0); // team-b's call is done; team-a's is alone now, but was not always
    log("maybe team-b's");
    expect(mine.logs).toEqual([]);
    await finish(1);
    const later = caller("team-a");
    void later.call();
    log("certainly team-a's");
    expect(later.logs).toEqual(["certainly team-a's"]);
  });

  it("gives a log to nobody while a request of the broker's own runs beside the only caller's", async () => {
    const { caller, log, finish, internal } = setup();
    const mine = caller("team-a");
    void mine.call();
    log("team-a's");
    internal(); // e.g. a poll of a resource only team-b subscribed to
    log("maybe caused by the poll");
    await finish(1);
    log("team-a's again");
    expect(mine.logs).toEqual(["team-a's", "team-a's again"]);
  });
});
