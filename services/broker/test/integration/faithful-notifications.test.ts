import { resolve } from "node:path";
import type { Client, JSONRPCMessage } from "@modelcontextprotocol/client";
import { deleteKeys, testRedisUrl, uniquePrefix } from "@mcp-broker/shared/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, startModernHttpBackend, type HttpBackend } from "../fixtures/http-backends.js";
import { createTestServer } from "../fixtures/test-server.js";
import { connectClient, eventually, startBroker, type Era, type RunningBroker } from "../helpers/harness.js";

const BROKER_DIR = resolve(import.meta.dirname, "../..");
const STDIO_BACKEND = resolve(BROKER_DIR, "test/fixtures/stdio-backend.ts");
const UPDATED = "notifications/resources/updated";
const SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId";
const CURSOR = "io.mcp-broker/cursor";

/** The params of every `resources/updated` the client receives, as they came over the wire (before the SDK's parsing). */
function rawUpdates(client: Client): Record<string, unknown>[] {
  const seen: Record<string, unknown>[] = [];
  const transport = client.transport;
  const sdk = transport?.onmessage;
  if (transport === undefined || sdk === undefined) throw new Error("client not connected");
  transport.onmessage = (message: JSONRPCMessage, extra) => {
    if ("method" in message && message.method === UPDATED && !("id" in message)) seen.push(message.params ?? {});
    sdk.call(transport, message, extra);
  };
  return seen;
}

/**
 * A backend's `notifications/resources/updated` reaches clients as the backend said it: its `_meta`
 * and every other param kept, only the URI translated; a modern listen stream adds its own
 * subscription id and cursor to `_meta`, and the backend's own hop's (its listen stream's
 * subscription id) is not passed on. Every kind of backend transport (legacy HTTP, modern HTTP
 * listen, stdio), both client eras, both engines.
 */
describe.each(["memory", "redis"] as const)("faithful resources/updated on the %s engine", (engine) => {
  let legacyBackend: HttpBackend;
  let modernBackend: HttpBackend;
  let running: RunningBroker;
  let redisUrl: string | undefined;
  const prefix = uniquePrefix("faithful");
  let clients: Client[] = [];

  beforeAll(async () => {
    legacyBackend = await startLegacyHttpBackend(createTestServer({ name: "legacy-faithful" }));
    modernBackend = await startModernHttpBackend(createTestServer({ name: "modern-faithful" }));
    redisUrl = engine === "redis" ? await testRedisUrl() : undefined;
    running = await startBroker({
      backends: [
        { id: "leg", url: legacyBackend.url, era: "legacy" },
        { id: "mod", url: modernBackend.url, era: "modern" },
        { id: "std", command: process.execPath, args: ["--import", "tsx", STDIO_BACKEND], cwd: BROKER_DIR, env: { TEST_SERVER_NAME: "stdio-faithful" }, era: "legacy", timeoutMs: 30_000 },
      ],
      subscriptions: { releaseGraceMs: 50 },
      ...(redisUrl !== undefined && { redisUrl, redis: { keyPrefix: prefix } }),
    });
  }, 60_000);

  afterEach(async () => {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
    clients = [];
  });

  afterAll(async () => {
    await running?.close();
    await Promise.all([legacyBackend?.close(), modernBackend?.close()]);
    if (redisUrl !== undefined) await deleteKeys(redisUrl, prefix);
  });

  async function client(era: Era): Promise<Client> {
    const c = await connectClient(running.url, era);
    clients.push(c);
    return c;
  }

  it.each(["leg", "mod", "std"])("passes backend %s's params on to legacy and modern clients", async (backend) => {
    const uri = `${backend}+test://static/a`;
    const [legacy, modern] = [await client("legacy"), await client("modern")];
    const [toLegacy, toModern] = [rawUpdates(legacy), rawUpdates(modern)];
    await legacy.subscribeResource({ uri });
    await modern.listen({ resourceSubscriptions: [uri] });
    const meta = { "example.com/seq": 7, "example.com/trace": { id: "t-1", hops: [1, 2] } };
    await legacy.callTool({ name: `${backend}__emit_update`, arguments: { uri: "test://static/a", meta } });
    await eventually(() => toLegacy.length === 1 && toModern.length === 1, "the update at both clients");
    expect(toLegacy).toEqual([{ uri, _meta: meta }]);
    expect(toModern).toEqual([{ uri, _meta: { ...meta, [SUBSCRIPTION_ID]: expect.anything(), [CURSOR]: expect.any(String) } }]);

    // An update that says nothing but its URI stays just that.
    await legacy.callTool({ name: `${backend}__emit_update`, arguments: { uri: "test://static/a" } });
    await eventually(() => toLegacy.length === 2 && toModern.length === 2, "the second update at both clients");
    expect(toLegacy[1]).toEqual({ uri });
    expect(Object.keys(toModern[1]?._meta as object).sort()).toEqual([CURSOR, SUBSCRIPTION_ID]);
  });
});
