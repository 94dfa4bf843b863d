import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PreparedNotification } from "../../src/fanout/prepared-notification.js";
import { connectClient, eventually, startBroker, type RunningBroker } from "../helpers/harness.js";
import { openSse, raw } from "../helpers/raw-http.js";

async function openModernListen(url: string): Promise<{ close(): void }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: "POST", headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen" } }, (res) => {
      if (!(res.headers["content-type"] ?? "").includes("text/event-stream")) reject(new Error(`listen answered ${res.statusCode}`));
      resolve({ close: () => req.destroy() });
    });
    req.on("error", () => undefined);
    req.end(JSON.stringify({ jsonrpc: "2.0", id: 5, method: "subscriptions/listen", params: { notifications: { toolsListChanged: true }, _meta: MODERN_META } }));
  });
}

const initialize = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
const KEY_A = "key-for-team-a-0123456789";
const KEY_B = "key-for-team-b-0123456789";
const MODERN_META = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };

describe("HTTP edge", () => {
  let running: RunningBroker;

  beforeAll(async () => {
    running = await startBroker({
      backends: [],
      server: { maxBodyBytes: 10_000, allowedOrigins: ["app.example.com"], corsOrigins: ["https://app.example.com"], requestTimeoutMs: 500 },
      auth: { apiKeys: [{ key: KEY_A, principal: "team-a" }, { key: KEY_B, principal: "team-b" }] },
      metaTools: false, // no tools at all: the lists are empty
    });
  });

  afterAll(async () => {
    await running?.close();
  });

  const auth = (key: string) => ({ authorization: `Bearer ${key}` });

  it("answers 401 without a valid API key and serves SDK clients that send one", async () => {
    expect((await raw(running.url, { body: initialize })).status).toBe(401);
    const wrong = await raw(running.url, { body: initialize, headers: auth("not-a-key-at-all-xxxxx") });
    expect(wrong.status).toBe(401);
    expect(wrong.headers["www-authenticate"]).toContain("invalid_token");
    const client = await connectClient(running.url, "legacy", { headers: auth(KEY_A) });
    expect((await client.listTools()).tools).toEqual([]);
    await client.close();
    const modern = await connectClient(running.url, "modern", { headers: auth(KEY_B) });
    expect((await modern.listTools()).tools).toEqual([]);
    await modern.close();
  });

  it("binds sessions to their principal: another key gets 404 for it", async () => {
    const init = await raw(running.url, { body: initialize, headers: auth(KEY_A) });
    const sessionId = String(init.headers["mcp-session-id"]);
    const ping = JSON.stringify({ jsonrpc: "2.0", id: 2, method: "ping" });
    expect((await raw(running.url, { body: ping, headers: { ...auth(KEY_A), "mcp-session-id": sessionId } })).status).toBe(200);
    expect((await raw(running.url, { body: ping, headers: { ...auth(KEY_B), "mcp-session-id": sessionId } })).status).toBe(404);
    expect((await raw(running.url, { method: "DELETE", headers: { ...auth(KEY_B), "mcp-session-id": sessionId } })).status).toBe(404);
    expect((await raw(running.url, { method: "GET", headers: { ...auth(KEY_B), "mcp-session-id": sessionId, accept: "text/event-stream" } })).status).toBe(404);
    expect((await raw(running.url, { method: "DELETE", headers: { ...auth(KEY_A), "mcp-session-id": sessionId } })).status).toBe(200);
    expect((await raw(running.url, { body: ping, headers: { ...auth(KEY_A), "mcp-session-id": sessionId } })).status).toBe(404);
  });

  it("rejects foreign Origin and Host headers with 403, accepts configured and local ones", async () => {
    expect((await raw(running.url, { body: initialize, headers: { ...auth(KEY_A), origin: "http://evil.example" } })).status).toBe(403);
    expect((await raw(running.url, { body: initialize, headers: { ...auth(KEY_A), origin: "https://app.example.com" } })).status).toBe(200);
    expect((await raw(running.url, { body: initialize, headers: { ...auth(KEY_A), origin: "http://localhost:5173" } })).status).toBe(200);
    expect((await raw(running.url, { body: initialize, headers: { ...auth(KEY_A), host: "attacker.example:80" } })).status).toBe(403);
  });

  it("lets browser pages on the configured CORS origins in: preflights answered, session id readable", async () => {
    const preflight = await raw(running.url, { method: "OPTIONS", headers: { origin: "https://app.example.com", "access-control-request-method": "POST", "access-control-request-headers": "authorization, mcp-session-id" } });
    expect(preflight.status).toBe(204);
    expect(preflight.headers["access-control-allow-origin"]).toBe("https://app.example.com");
    expect(preflight.headers["access-control-allow-headers"]).toEqual(expect.stringContaining("mcp-session-id"));
    expect(preflight.headers["access-control-allow-methods"]).toBe("GET, POST, DELETE");
    expect((await raw(running.url, { method: "OPTIONS", headers: { origin: "http://evil.example", "access-control-request-method": "POST" } })).status).toBe(403);
    // CORS is opt-in and exact: an Origin that merely passes the rebinding check (localhost, any
    // port; the same host on another scheme) gets no CORS grant.
    for (const origin of ["http://localhost:9999", "http://app.example.com"]) {
      const other = await raw(running.url, { method: "OPTIONS", headers: { origin, "access-control-request-method": "POST" } });
      expect(other.status).not.toBe(204);
      expect(other.headers["access-control-allow-origin"]).toBeUndefined();
    }
    const init = await raw(running.url, { body: initialize, headers: { ...auth(KEY_A), origin: "https://app.example.com" } });
    expect(init.status).toBe(200);
    expect(init.headers["access-control-allow-origin"]).toBe("https://app.example.com");
    expect(init.headers["access-control-expose-headers"]).toEqual(expect.stringContaining("mcp-session-id"));
    // No Origin (not a browser): no CORS headers, and OPTIONS is not a method of the endpoint.
    expect((await raw(running.url, { body: initialize, headers: auth(KEY_A) })).headers["access-control-allow-origin"]).toBeUndefined();
    expect((await raw(running.url, { method: "OPTIONS", headers: auth(KEY_A) })).status).toBe(405);
  });

  it("bounds bodies and rejects malformed input with the right status and code", async () => {
    const big = await raw(running.url, { body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping", params: { pad: "x".repeat(20_000) } }), headers: auth(KEY_A) });
    expect(big.status).toBe(413);
    const junk = await raw(running.url, { body: "{not json", headers: auth(KEY_A) });
    expect(junk.status).toBe(400);
    expect(JSON.parse(junk.body)).toMatchObject({ id: null, error: { code: -32700 } });
    expect((await raw(running.url, { body: "[]", headers: auth(KEY_A) })).status).toBe(400);
    // Nesting is bounded too (4000 levels fit in the size limit and would overflow a recursive
    // walk), before the body is parsed; the refusal names the request, even with its id last.
    const deep = await raw(running.url, { body: `{"method":"ping","params":{"s":"\\"[[[","a":${"[".repeat(4_000)}${"]".repeat(4_000)}},"jsonrpc":"2.0","id":"deep-1"}`, headers: auth(KEY_A) });
    expect(deep.status).toBe(400);
    expect(JSON.parse(deep.body)).toEqual({ jsonrpc: "2.0", id: "deep-1", error: { code: -32600, message: expect.stringContaining("deeper than 100") } });
    // Never parsed: a deep body that is cut short gets the depth refusal, not a parse error.
    const cut = await raw(running.url, { body: `{"jsonrpc":"2.0","id":2,"method":"ping","params":{"a":${"[".repeat(4_000)}`, headers: auth(KEY_A) });
    expect(JSON.parse(cut.body)).toEqual({ jsonrpc: "2.0", id: 2, error: { code: -32600, message: expect.stringContaining("deeper than 100") } });
    const fine = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: { x: JSON.parse(`${"[".repeat(90)}${"]".repeat(90)}`) as unknown }, clientInfo: { name: "raw", version: "1" } } });
    expect((await raw(running.url, { body: fine, headers: auth(KEY_A) })).status).toBe(200);
    expect((await raw(running.url, { body: initialize, headers: { ...auth(KEY_A), "content-type": "text/plain" } })).status).toBe(415);
    expect((await raw(running.url, { body: initialize, headers: { ...auth(KEY_A), "content-type": "text/plain; x=application/json" } })).status).toBe(415);
    expect((await raw(running.url, { body: initialize, headers: { ...auth(KEY_A), "content-type": "application/jsonx" } })).status).toBe(415);
    expect((await raw(running.url, { body: initialize, headers: { ...auth(KEY_A), "content-type": "Application/JSON; charset=utf-8" } })).status).toBe(200);
    expect((await raw(running.url, { method: "PUT", headers: auth(KEY_A) })).status).toBe(405);
    const noSession = await raw(running.url, { body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }), headers: auth(KEY_A) });
    expect(noSession.status).toBe(400);
    const unknown = await raw(running.url, { body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }), headers: { ...auth(KEY_A), "mcp-session-id": "no-such-session" } });
    expect(unknown.status).toBe(404);
  });

  it("answers 406 to a POST whose Accept lists neither application/json nor text/event-stream, and serves one without Accept", async () => {
    const ping = JSON.stringify({ jsonrpc: "2.0", id: 3, method: "ping" });
    const init = await raw(running.url, { body: initialize, headers: auth(KEY_A) });
    const session = { ...auth(KEY_A), "mcp-session-id": String(init.headers["mcp-session-id"]) };
    for (const accept of ["text/html", "image/*", "application/xml, text/plain", "application/json;q=0, text/event-stream; q=0.000", "application/jsonx"]) {
      const refused = await raw(running.url, { body: ping, headers: { ...session, accept } });
      expect({ status: refused.status, body: JSON.parse(refused.body) as unknown }, accept).toEqual({
        status: 406,
        body: { jsonrpc: "2.0", id: null, error: { code: -32600, message: expect.stringMatching(/^Not Acceptable: Accept must list application\/json and text\/event-stream/) } },
      });
    }
    for (const accept of [undefined, "", "application/json", "text/event-stream", "Application/JSON; charset=utf-8", "*/*", "application/*", "text/*;q=0.5", "text/html, */*;q=0.1"]) {
      const served = await raw(running.url, { body: ping, headers: { ...session, accept } });
      expect({ status: served.status, body: JSON.parse(served.body) as unknown }, String(accept)).toEqual({ status: 200, body: { jsonrpc: "2.0", id: 3, result: {} } });
    }
  });

  it("answers modern header/body disagreement with 400 and -32020", async () => {
    const body = JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "tools/list",
      params: { _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } },
    });
    const mismatch = await raw(running.url, { body, headers: { ...auth(KEY_A), "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call" } });
    expect(mismatch.status).toBe(400);
    expect(JSON.parse(mismatch.body)).toMatchObject({ error: { code: -32020 } });
    const ok = await raw(running.url, { body, headers: { ...auth(KEY_A), "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list" } });
    expect(JSON.parse(ok.body)).toMatchObject({ result: { tools: [], resultType: "complete", ttlMs: 0, cacheScope: "private" } });
  });

  it("answers a modern request for a method it does not have 404 and -32601, as the 2026-07-28 transport does, and a legacy one in-band", async () => {
    const modern = async (method: string) => {
      const body = JSON.stringify({ jsonrpc: "2.0", id: 7, method, params: { _meta: MODERN_META } });
      const response = await raw(running.url, { body, headers: { ...auth(KEY_A), "mcp-protocol-version": "2026-07-28", "mcp-method": method } });
      return { status: response.status, body: JSON.parse(response.body) as unknown };
    };
    // Unknown, of the other era only (no ping in 2026-07-28), or an Object.prototype name.
    for (const method of ["nope/nope", "ping", "resources/subscribe", "logging/setLevel", "constructor"]) {
      expect(await modern(method), method).toEqual({ status: 404, body: { jsonrpc: "2.0", id: 7, error: { code: -32601, message: expect.any(String), data: { method } } } });
    }
    expect(await modern("tools/list")).toMatchObject({ status: 200, body: { result: { tools: [] } } });
    const init = await raw(running.url, { body: initialize, headers: auth(KEY_A) });
    const session = { ...auth(KEY_A), "mcp-session-id": String(init.headers["mcp-session-id"]) };
    const legacy = await raw(running.url, { body: JSON.stringify({ jsonrpc: "2.0", id: 8, method: "server/discover" }), headers: session });
    expect({ status: legacy.status, body: JSON.parse(legacy.body) as unknown }).toMatchObject({ status: 200, body: { id: 8, error: { code: -32601 } } });
  });

  it("requires the modern standard headers, and an Mcp-Name that names what the body names", async () => {
    const call = JSON.stringify({ jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "a__b", arguments: {}, _meta: MODERN_META } });
    const std = { ...auth(KEY_A), "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call" };
    const answer = async (headers: Record<string, string>, body = call) => {
      const response = await raw(running.url, { body, headers });
      return { status: response.status, error: (JSON.parse(response.body) as { error?: { code: number; message: string } }).error };
    };
    const { "mcp-method": _method, ...noMethod } = std;
    const { "mcp-protocol-version": _version, ...noVersion } = std;
    for (const headers of [std, noMethod, noVersion, { ...std, "mcp-name": "other__tool" }, { ...std, "mcp-name": "=?base64?not base64?=" }]) {
      expect(await answer(headers)).toMatchObject({ status: 400, error: { code: -32020 } });
    }
    // Plain or Base64-encoded, a matching name passes the headers and reaches routing (no such tool here).
    expect(await answer({ ...std, "mcp-name": "a__b" })).toMatchObject({ status: 200, error: { code: -32602 } });
    expect(await answer({ ...std, "mcp-name": `=?base64?${Buffer.from("a__b").toString("base64")}?=` })).toMatchObject({ status: 200, error: { code: -32602 } });
    const read = JSON.stringify({ jsonrpc: "2.0", id: 4, method: "resources/read", params: { uri: "x+demo://a", _meta: MODERN_META } });
    expect(await answer({ ...std, "mcp-method": "resources/read", "mcp-name": "x+demo://b" }, read)).toMatchObject({ status: 400, error: { code: -32020 } });
    // A revision this broker does not speak.
    const future = JSON.stringify({ jsonrpc: "2.0", id: 5, method: "tools/list", params: { _meta: { ...MODERN_META, "io.modelcontextprotocol/protocolVersion": "2099-01-01" } } });
    const unsupported = await answer({ ...auth(KEY_A), "mcp-protocol-version": "2099-01-01", "mcp-method": "tools/list" }, future);
    expect(unsupported.status).toBe(400);
    expect(unsupported.error?.message).toContain("2099-01-01");
    // It lists what server/discover lists: the revision a modern request can retry with (the conformance suite checks that).
    const discover = JSON.stringify({ jsonrpc: "2.0", id: 6, method: "server/discover", params: { _meta: MODERN_META } });
    const discovered = await raw(running.url, { body: discover, headers: { ...auth(KEY_A), "mcp-protocol-version": "2026-07-28", "mcp-method": "server/discover" } });
    expect((unsupported.error as { data?: unknown } | undefined)?.data).toEqual({ supported: ["2026-07-28"], requested: "2099-01-01" });
    expect((JSON.parse(discovered.body) as { result: { supportedVersions: string[] } }).result.supportedVersions).toEqual(["2026-07-28"]);
  });

  it("answers an MCP-Protocol-Version that neither era speaks with 400 and the unsupported-version error, on a legacy session's requests too", async () => {
    const init = await raw(running.url, { body: initialize, headers: auth(KEY_A) });
    const session = { ...auth(KEY_A), "mcp-session-id": String(init.headers["mcp-session-id"]) };
    const ping = JSON.stringify({ jsonrpc: "2.0", id: 7, method: "ping" });
    for (const version of ["2099-01-01", "bogus", "2025-01-01"]) {
      const answered = await raw(running.url, { body: ping, headers: { ...session, "mcp-protocol-version": version } });
      expect(answered.status).toBe(400);
      // Before: a legacy request with a version the SDK takes for a later modern one was told to add the modern envelope (-32602).
      expect(JSON.parse(answered.body)).toMatchObject({ id: 7, error: { code: -32022, data: { supported: expect.arrayContaining(["2026-07-28", "2025-11-25"]), requested: version } } });
      for (const method of ["GET", "DELETE"]) {
        expect((await raw(running.url, { method, headers: { ...session, accept: "text/event-stream", "mcp-protocol-version": version } })).status).toBe(400);
      }
    }
    // The session is still there, for its own version.
    expect((await raw(running.url, { body: ping, headers: { ...session, "mcp-protocol-version": "2025-11-25" } })).status).toBe(200);
  });

  it("takes the Mcp-Name of the longest URI it allows: Base64-encoded, over Node's default 16 KB for all headers", async () => {
    const defaults = await startBroker({ backends: [] });
    try {
      // 16 383 bytes, non-ASCII: its Mcp-Name is Base64 (~22 KB).
      const uri = `x+demo://${"é".repeat(8_187)}`;
      const body = JSON.stringify({ jsonrpc: "2.0", id: 6, method: "resources/read", params: { uri, _meta: MODERN_META } });
      const headers = { "mcp-protocol-version": "2026-07-28", "mcp-method": "resources/read", "mcp-name": `=?base64?${Buffer.from(uri).toString("base64")}?=` };
      const response = await raw(defaults.url, { body, headers });
      expect(response.status).toBe(200);
      // Routing answers: no such resource here.
      expect(JSON.parse(response.body)).toMatchObject({ id: 6, error: { code: -32602 } });
    } finally {
      await defaults.close();
    }
  });

  it("serves one standalone GET stream per session and 406/400 for bad GETs", async () => {
    const init = await raw(running.url, { body: initialize, headers: auth(KEY_A) });
    const sessionId = String(init.headers["mcp-session-id"]);
    const headers = { ...auth(KEY_A), "mcp-session-id": sessionId, accept: "text/event-stream" };
    expect((await raw(running.url, { method: "GET", headers: { ...headers, accept: "application/json" } })).status).toBe(406);
    expect((await raw(running.url, { method: "GET", headers: { ...auth(KEY_A), accept: "text/event-stream" } })).status).toBe(400);
    const stream = await raw(running.url, { method: "GET", headers });
    expect(stream.status).toBe(200);
    expect(stream.headers["content-type"]).toContain("text/event-stream");
  });

  it("answers initialize with bad params -32602 without opening a session, and Object.prototype method names -32601", async () => {
    const bad = await raw(running.url, { body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25" } }), headers: auth(KEY_A) });
    expect(JSON.parse(bad.body)).toMatchObject({ id: 1, error: { code: -32602 } });
    expect(bad.headers["mcp-session-id"]).toBeUndefined();
    const init = await raw(running.url, { body: initialize, headers: auth(KEY_A) });
    const session = { ...auth(KEY_A), "mcp-session-id": String(init.headers["mcp-session-id"]) };
    for (const [i, method] of ["__proto__", "constructor", "toString", "hasOwnProperty"].entries()) {
      const answer = await raw(running.url, { body: JSON.stringify({ jsonrpc: "2.0", id: 10 + i, method }), headers: session });
      expect(JSON.parse(answer.body), method).toMatchObject({ id: 10 + i, error: { code: -32601 } });
    }
  });

  it("answers malformed listen params with -32602 instead of an empty stream", async () => {
    const listen = (notifications: unknown) =>
      raw(running.url, {
        body: JSON.stringify({ jsonrpc: "2.0", id: 5, method: "subscriptions/listen", params: { notifications, _meta: MODERN_META } }),
        headers: { ...auth(KEY_A), "mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen" },
      });
    for (const bad of [undefined, { resourceSubscriptions: "x" }, { resourceSubscriptions: [1] }, { toolsListChanged: "yes" }]) {
      const answer = await listen(bad);
      expect(JSON.parse(answer.body), JSON.stringify(bad)).toMatchObject({ id: 5, error: { code: -32602 } });
    }
    const good = await listen({ toolsListChanged: true });
    expect(good.headers["content-type"]).toContain("text/event-stream");
    // Its answer is an event stream: a client that accepts only JSON gets 406.
    const jsonOnly = await raw(running.url, {
      body: JSON.stringify({ jsonrpc: "2.0", id: 6, method: "subscriptions/listen", params: { notifications: { toolsListChanged: true }, _meta: MODERN_META } }),
      headers: { ...auth(KEY_A), "mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen", accept: "application/json" },
    });
    expect(jsonOnly.status).toBe(406);
    expect(JSON.parse(jsonOnly.body)).toMatchObject({ id: 6, error: { code: -32600, message: expect.stringContaining("text/event-stream") } });
  });

  it("applies Origin and API key checks to GET and DELETE too", async () => {
    const init = await raw(running.url, { body: initialize, headers: auth(KEY_A) });
    const sessionId = String(init.headers["mcp-session-id"]);
    const get = { "mcp-session-id": sessionId, accept: "text/event-stream" };
    expect((await raw(running.url, { method: "GET", headers: get })).status).toBe(401);
    expect((await raw(running.url, { method: "GET", headers: { ...get, ...auth(KEY_A), origin: "http://evil.example" } })).status).toBe(403);
    expect((await raw(running.url, { method: "DELETE", headers: { "mcp-session-id": sessionId } })).status).toBe(401);
    expect((await raw(running.url, { method: "DELETE", headers: { ...auth(KEY_A), "mcp-session-id": sessionId, origin: "http://evil.example" } })).status).toBe(403);
    expect((await raw(running.url, { method: "DELETE", headers: { ...auth(KEY_A), "mcp-session-id": sessionId } })).status).toBe(200);
  });

  it("answers a request whose body never finishes with 408", async () => {
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(running.url, { method: "POST", headers: { ...auth(KEY_A), "content-type": "application/json", "content-length": "100" } }, (res) => {
        resolve(res.statusCode ?? 0);
        res.resume();
      });
      req.on("error", reject);
      req.write('{"jsonrpc":'); // and nothing more
    });
    expect(status).toBe(408);
  });

  it("lets a new GET stream replace the old one, flushes what was sent before it, and keeps it open past the request timeout", async () => {
    const init = await raw(running.url, { body: initialize, headers: auth(KEY_A) });
    const sessionId = String(init.headers["mcp-session-id"]);
    const session = running.broker.sessions.legacySession(sessionId, "team-a");
    session?.deliver(PreparedNotification.listChanged("tools", running.broker.fanout.events.next())); // before any GET stream
    const headers = { ...auth(KEY_A), "mcp-session-id": sessionId, accept: "text/event-stream" };
    const first = await openSse(running.url, headers);
    await eventually(() => first.events.length === 1, "the event sent before the stream");
    expect(first.events[0]).toMatchObject({ id: expect.stringMatching(/^\d+(\.\d+)?$/), data: { method: "notifications/tools/list_changed" } });

    // A replacing GET that says what it saw gets only what followed.
    const second = await openSse(running.url, { ...headers, "last-event-id": String(first.events[0]?.id) });
    await first.ended;
    await new Promise((r) => setTimeout(r, 700)); // past requestTimeoutMs (500)
    session?.deliver(PreparedNotification.listChanged("prompts", running.broker.fanout.events.next()));
    await eventually(() => second.events.length === 1, "the event on the new stream");
    expect(second.events[0]).toMatchObject({ data: { method: "notifications/prompts/list_changed" } });
    expect(Number(second.events[0]?.id)).toBeGreaterThan(Number(first.events[0]?.id));
    expect(first.events).toHaveLength(1);
    second.close();
  });

  it("caps sessions and listen streams per principal with -32011, and frees a slot when one ends", async () => {
    const small = await startBroker({ backends: [], server: { maxSessionsPerPrincipal: 2 } });
    try {
      const first = await raw(small.url, { body: initialize });
      const listen = await openModernListen(small.url);
      const refused = await raw(small.url, { body: initialize });
      expect(JSON.parse(refused.body)).toMatchObject({ id: 1, error: { code: -32011, data: { max: 2 } } });
      const refusedListen = await raw(small.url, {
        body: JSON.stringify({ jsonrpc: "2.0", id: 6, method: "subscriptions/listen", params: { notifications: {}, _meta: MODERN_META } }),
        headers: { "mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen" },
      });
      expect(JSON.parse(refusedListen.body)).toMatchObject({ id: 6, error: { code: -32011 } });
      // At the limit, a session id that does not exist is still unknown (404, initialize again), not the limit.
      const gone = { "mcp-session-id": "00000000-0000-4000-8000-000000000000", "mcp-protocol-version": "2025-11-25" };
      expect((await raw(small.url, { body: JSON.stringify({ jsonrpc: "2.0", id: 7, method: "ping" }), headers: gone })).status).toBe(404);
      expect((await raw(small.url, { method: "DELETE", headers: gone })).status).toBe(404);
      listen.close();
      await raw(small.url, { method: "DELETE", headers: { "mcp-session-id": String(first.headers["mcp-session-id"]) } });
      await eventually(async () => (await raw(small.url, { body: initialize })).headers["mcp-session-id"] !== undefined, "a free slot");
    } finally {
      await small.close();
    }
  });

  it("reports health and readiness", async () => {
    const base = running.url.replace(/\/mcp$/, "");
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    const ready = await fetch(`${base}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: "ready", engine: "memory", instance: expect.any(String), backends: [] });
    // Backend states and failures are not for a rebinding page: /readyz checks Host like /mcp.
    expect((await raw(`${base}/readyz`, { method: "GET", headers: { host: "attacker.example" } })).status).toBe(403);
  });
});
