import { describe, expect, it } from "vitest";
import { classifyInboundRequest, PROTOCOL_VERSION_META_KEY } from "@modelcontextprotocol/server";
import { isPlainLegacyRequest } from "../../src/http/plain-legacy-request.js";

const classify = (body: unknown, protocolVersion?: string) => classifyInboundRequest({ httpMethod: "POST", protocolVersionHeader: protocolVersion, body });

describe("the plain legacy request shortcut", () => {
  const plain: [unknown, string | undefined][] = [
    [{ jsonrpc: "2.0", id: 1, method: "resources/subscribe", params: { uri: "demo+demo://counter" } }, "2025-11-25"],
    [{ jsonrpc: "2.0", id: "a", method: "tools/list" }, undefined],
    [{ jsonrpc: "2.0", id: 2, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "c", version: "1" } } }, undefined],
    [{ jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "x", _meta: { progressToken: 1 } } }, " 2025-03-26 "],
  ];
  const others: [unknown, string | undefined][] = [
    // Modern: an envelope claim, or a modern header.
    [{ jsonrpc: "2.0", id: 1, method: "tools/list", params: { _meta: { [PROTOCOL_VERSION_META_KEY]: "2026-07-28" } } }, undefined],
    [{ jsonrpc: "2.0", id: 1, method: "tools/list" }, "2026-07-28"],
    [{ jsonrpc: "2.0", id: 1, method: "initialize", params: {} }, "2026-07-28"],
    // Not a version this broker knows as legacy: the classifier decides.
    [{ jsonrpc: "2.0", id: 1, method: "tools/list" }, "2099-01-01"],
    // Responses, and a request that also carries a result.
    [{ jsonrpc: "2.0", id: 1, result: {} }, undefined],
    [{ jsonrpc: "2.0", id: 1, error: { code: 1, message: "m" } }, undefined],
    [{ jsonrpc: "2.0", id: 1, method: "ping", result: {} }, undefined],
    // Not a JSON-RPC request: notifications, bad ids, bad params, bad versions, not objects.
    [{ jsonrpc: "2.0", method: "notifications/initialized" }, undefined],
    [{ jsonrpc: "2.0", id: null, method: "ping" }, undefined],
    [{ jsonrpc: "2.0", id: { a: 1 }, method: "ping" }, undefined],
    [{ jsonrpc: "2.0", id: 1, method: "ping", params: 5 }, undefined],
    [{ jsonrpc: "2.0", id: 1, method: "ping", params: [1] }, undefined],
    [{ jsonrpc: "1.0", id: 1, method: "ping" }, undefined],
    [{ id: 1, method: "ping" }, undefined],
    [[{ jsonrpc: "2.0", id: 1, method: "ping" }], undefined],
    ["ping", undefined],
    [null, undefined],
  ];

  it("takes plain legacy requests, which the SDK's classifier routes to the legacy era as requests", () => {
    for (const [body, version] of plain) {
      expect(isPlainLegacyRequest(body, version)).toBe(true);
      expect(classify(body, version)).toMatchObject({ kind: "legacy", reason: expect.stringMatching(/^(no-claim|initialize)$/) });
    }
  });

  it("leaves everything else to the classifier", () => {
    for (const [body, version] of others) expect(isPlainLegacyRequest(body, version), JSON.stringify([body, version])).toBe(false);
  });
});
