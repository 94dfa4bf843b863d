import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFaultProxy, type FaultProxy } from "../fixtures/fault-proxy.js";
import { startModernHttpBackend, type HttpBackend } from "../fixtures/http-backends.js";
import { createTestServer } from "../fixtures/test-server.js";
import { connectClient, eventually, startBroker, type RunningBroker } from "../helpers/harness.js";

/**
 * What a 2026-07-28 backend answers is an answer: a method it does not serve gets HTTP 404 with
 * -32601 (the modern transport's status, not a lost session), and a health probe it answers in a
 * form the SDK would not take still shows it alive. Neither drops the connection.
 */
describe("upstream: a modern backend's answers that are not results", () => {
  let backend: HttpBackend;
  let proxy: FaultProxy;
  let running: RunningBroker;

  beforeAll(async () => {
    backend = await startModernHttpBackend(createTestServer({ name: "modern-answers" }));
    proxy = await startFaultProxy(backend.url);
    // It declares resources but does not serve the templates list: 404 and -32601, as the 2026-07-28 transport has it.
    proxy.answer("resources/templates/list", (id) => Response.json({ jsonrpc: "2.0", id, error: { code: -32601, message: "Method not found" } }, { status: 404 }));
    running = await startBroker({ backends: [{ id: "mod", url: proxy.url, era: "modern", healthIntervalMs: 200 }] });
  }, 60_000);

  afterAll(async () => {
    await running?.close();
    await proxy?.close();
    await backend?.close();
  });

  it("takes a 404 with -32601 for that list's answer (it has none), and a health probe answered without resultType for a live backend", async () => {
    const connection = running.broker.pool.get("mod");
    expect(connection.state).toBe("connected");
    expect(connection.reconnects).toBe(0);
    const client = await connectClient(running.url, "modern");
    try {
      expect((await client.listResourceTemplates()).resourceTemplates).toEqual([]);
      expect((await client.listTools()).tools.map((t) => t.name)).toContain("mod__echo");
      // From now on the health probe (server/discover) is answered in a form the SDK refuses.
      let probes = 0;
      proxy.answer("server/discover", (id) => {
        probes++;
        return Response.json({ jsonrpc: "2.0", id, result: { supportedVersions: ["2026-07-28"], capabilities: {}, serverInfo: { name: "x", version: "1" } } });
      });
      await eventually(() => probes >= 3, "three health probes answered so");
      expect(connection.state).toBe("connected");
      expect(connection.reconnects).toBe(0);
      expect((await client.listTools()).tools.map((t) => t.name)).toContain("mod__echo");
    } finally {
      proxy.answer("server/discover", undefined);
      await client.close();
    }
  });
});
