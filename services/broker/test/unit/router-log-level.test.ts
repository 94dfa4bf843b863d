import { describe, expect, it } from "vitest";
import { Catalog } from "../../src/catalog/catalog.js";
import type { RequestContext } from "../../src/routing/request-context.js";
import { Router } from "../../src/routing/router.js";
import type { BackendConnection } from "@mcp-broker/member";
import type { BackendPool } from "@mcp-broker/member";

describe("backend log level", () => {
  function setup() {
    const sent: unknown[] = [];
    const backend = {
      id: "b",
      era: "legacy",
      state: "connected",
      capabilities: { logging: {} },
      requestsInFlight: 0,
      request: async (method: string, params: Record<string, unknown>) => {
        sent.push([method, params]);
        return {};
      },
    };
    const pool = { get: () => backend, all: () => [backend] } as unknown as BackendPool;
    const router = new Router(new Catalog([{ id: "b", prefix: true }]), pool, { pageSize: 10 });
    const ctx = { era: "legacy", principal: "p", signal: new AbortController().signal, notify: () => undefined } as unknown as RequestContext;
    return { sent, backend: backend as unknown as BackendConnection, router, ctx };
  }

  it("is the most verbose any client asked for, and is set again when the backend reconnects", async () => {
    const { sent, backend, router, ctx } = setup();
    await router.setLogLevel("warning", ctx);
    await router.setLogLevel("debug", ctx);
    await router.setLogLevel("error", ctx); // asks for less: the backend stays at debug
    expect(sent).toEqual([
      ["logging/setLevel", { level: "warning" }],
      ["logging/setLevel", { level: "debug" }],
      ["logging/setLevel", { level: "debug" }],
    ]);
    router.backendConnected(backend);
    await Promise.resolve();
    expect(sent.at(-1)).toEqual(["logging/setLevel", { level: "debug" }]);
    expect(sent).toHaveLength(4);
  });

  it("sets nothing on reconnect when no client asked for a level", () => {
    const { sent, backend, router } = setup();
    router.backendConnected(backend);
    expect(sent).toEqual([]);
  });
});
