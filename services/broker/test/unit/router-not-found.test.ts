import { ProtocolError, ResourceNotFoundError } from "@modelcontextprotocol/client";
import { BrokerError } from "@mcp-broker/shared";
import { describe, expect, it } from "vitest";
import { Catalog } from "../../src/catalog/catalog.js";
import type { RequestContext } from "../../src/routing/request-context.js";
import { Router } from "../../src/routing/router.js";
import type { BackendPool } from "@mcp-broker/member";

/** The router in front of one backend whose reads fail with `error` (SDK errors, as BackendConnection passes them on). */
async function readFailing(error: Error, uri = "fx+fixture://zzz/1"): Promise<unknown> {
  const backend = { id: "fx", era: "legacy", state: "connected", requestsInFlight: 0, request: () => Promise.reject(error) };
  const pool = { get: () => backend, all: () => [backend] } as unknown as BackendPool;
  const router = new Router(new Catalog([{ id: "fx", prefix: true }]), pool, { pageSize: 10 });
  const ctx: RequestContext = { era: "legacy", principal: "p", sessionId: undefined, signal: new AbortController().signal, progressToken: undefined, logLevel: undefined, notify: () => undefined };
  return router.readResource({ uri }, ctx).then(
    () => undefined,
    (failure: unknown) => failure,
  );
}

describe("router: a backend's resource not found", () => {
  it("recognises every SDK's shape for the URI asked, and answers it as UNKNOWN_RESOURCE with the broker's URI", async () => {
    const shapes = [
      new ProtocolError(-32602, "MCP error -32602: Resource fixture://zzz/1 not found"), // SDK v1 McpServer
      new ResourceNotFoundError("fixture://zzz/1"), // SDK v2
      new ProtocolError(-32602, "Resource not found", { uri: "fixture://zzz/1" }),
      new ProtocolError(-32002, "Resource not found", { uri: "fixture://zzz/1" }), // the spec's code
    ];
    for (const shape of shapes) {
      const failure = await readFailing(shape);
      expect(failure, shape.message).toBeInstanceOf(BrokerError);
      expect(failure).toMatchObject({ code: "UNKNOWN_RESOURCE", data: { uri: "fx+fixture://zzz/1" }, message: expect.not.stringContaining("'fixture://") as unknown });
    }
    // SDK v1 names the URI as a WHATWG URL serialises it.
    expect(await readFailing(new ProtocolError(-32602, "MCP error -32602: Resource fixture://zzz/a%20b not found"), "fx+fixture://zzz/a b")).toMatchObject({
      code: "UNKNOWN_RESOURCE",
      data: { uri: "fx+fixture://zzz/a b" },
    });
  });

  it("passes any other -32602 through: the v1 message must be exactly the one for the URI asked", async () => {
    for (const other of [
      new ProtocolError(-32602, "MCP error -32602: Resource fixture://zzz/2 not found"),
      new ProtocolError(-32602, "MCP error -32602: Resource fixture://zzz/1 not found (yet)"),
      new ProtocolError(-32602, "Resource fixture://zzz/1 not found"),
      new ProtocolError(-32602, "MCP error -32602: Resource fixture://zzz/1 not found", { reason: "x" }),
      new ProtocolError(-32602, "MCP error -32602: Resource fixture://zzz/1 disabled"),
    ]) {
      expect(await readFailing(other), other.message).toBe(other);
    }
  });
});
