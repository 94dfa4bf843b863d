import { Client, StreamableHTTPClientTransport, type ClientCapabilities } from "@modelcontextprotocol/client";
import { deleteKeys, testRedisUrl, uniquePrefix } from "@mcp-broker/shared/testing";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, startModernHttpBackend, type HttpBackend, type LegacyHttpBackend } from "../fixtures/http-backends.js";
import { createTestServer } from "../fixtures/test-server.js";
import { eventually, post, startBroker, startEngineBrokers, type RunningBroker } from "../helpers/harness.js";
import { openSse } from "../helpers/raw-http.js";

/**
 * A backend's requests to the client during a call (sampling, elicitation, roots), legacy era on
 * both sides: each reaches the client that made the call, on that call's stream, and its answer
 * goes back to the backend; a client without the capability, a client that goes away, a request
 * tied to no call, and cancellations each end in an error for the backend, never in another
 * client's hands.
 */
function text(result: unknown): string {
  const content = (result as { content: { type: string; text: string }[] }).content;
  return content.map((part) => part.text).join("");
}

/** A client of `era` at `url` that accepts every elicitation with `content`, noting each question's message. */
async function answering(url: string, era: "legacy" | "modern", content: Record<string, string | boolean>): Promise<{ client: Client; asked: unknown[] }> {
  const client = new Client({ name: era, version: "1.0.0" }, { capabilities: { elicitation: {} }, versionNegotiation: { mode: era === "modern" ? { pin: "2026-07-28" } : "legacy" } });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const asked: unknown[] = [];
  client.setRequestHandler("elicitation/create", async (request) => {
    asked.push(request.params.message);
    return { action: "accept", content };
  });
  return { client, asked };
}

describe("interaction: a backend's requests during a call reach the calling client", () => {
  let backend: LegacyHttpBackend;
  let running: RunningBroker;
  const clients: Client[] = [];

  beforeAll(async () => {
    backend = await startLegacyHttpBackend(createTestServer({ name: "asker", interactive: true }));
    running = await startBroker({ backends: [{ id: "b", url: backend.url, era: "legacy", timeoutMs: 5_000, healthIntervalMs: 60_000 }] });
  });

  afterAll(async () => {
    for (const client of clients) await client.close().catch(() => undefined);
    await running.close();
    await backend.close();
  });

  async function connect(name: string, capabilities: ClientCapabilities): Promise<Client> {
    const client = new Client({ name, version: "1.0.0" }, { capabilities, versionNegotiation: { mode: "legacy" } });
    await client.connect(new StreamableHTTPClientTransport(new URL(running.url)));
    clients.push(client);
    return client;
  }

  it("passes sampling to the caller and its answer back, each of two concurrent callers answering its own", async () => {
    /** Both answers wait until both questions are seen waiting: the two calls are in flight at once. */
    let answer = (): void => undefined;
    const bothAsked = new Promise<void>((resolve) => (answer = resolve));
    const make = async (name: string) => {
      const client = await connect(name, { sampling: {} });
      client.setRequestHandler("sampling/createMessage", async (request) => {
        const first = request.params.messages[0]?.content as { type: string; text?: string } | undefined;
        await bothAsked;
        return { role: "assistant", model: `${name}-model`, content: { type: "text", text: `${name} heard ${first?.type === "text" ? first.text : "?"}` } };
      });
      return client;
    };
    const [ann, bob] = await Promise.all([make("ann"), make("bob")]);
    const calls = Promise.all([
      ann.callTool({ name: "b__ask_model", arguments: { prompt: "p-ann" } }),
      bob.callTool({ name: "b__ask_model", arguments: { prompt: "p-bob" } }),
    ]);
    // The two questions wait for their answers, as /metrics shows.
    const questions = async () => /^mcp_broker_client_questions (\d+)$/m.exec(await (await fetch(new URL("/metrics", running.url))).text())?.[1];
    await eventually(async () => (await questions()) === "2", "two questions waiting, on /metrics");
    answer();
    const [fromAnn, fromBob] = await calls;
    expect(text(fromAnn)).toBe("model: ann heard p-ann");
    expect(text(fromBob)).toBe("model: bob heard p-bob");
    expect(await questions()).toBe("0");
  });

  it("passes elicitation (form and url mode) with its schema unchanged, and the answer back", async () => {
    const client = await connect("eli", { elicitation: { form: {}, url: {} } });
    const seen: unknown[] = [];
    client.setRequestHandler("elicitation/create", async (request) => {
      seen.push(request.params);
      return request.params.mode === "url" ? { action: "accept" } : { action: "accept", content: { name: "Eve" } };
    });
    expect(text(await client.callTool({ name: "b__ask_user", arguments: { message: "who?" } }))).toBe('user: accept {"name":"Eve"}');
    expect(seen[0]).toMatchObject({ message: "who?", requestedSchema: { properties: { name: { type: "string", default: "Ann" } } } });
    expect(text(await client.callTool({ name: "b__ask_user", arguments: { message: "consent", mode: "url" } }))).toBe("user: accept null");
    expect(seen[1]).toMatchObject({ mode: "url", url: "https://example.com/consent" });
  });

  it("answers the backend as a client without the capability would: -32601, or -32602 for an undeclared elicitation mode", async () => {
    const plain = await connect("plain", {});
    expect(text(await plain.callTool({ name: "b__ask_model", arguments: { prompt: "x" } }))).toMatch(/^error -32601: .*does not support sampling/);
    expect(text(await plain.callTool({ name: "b__ask_user", arguments: { message: "x" } }))).toMatch(/^error -32601: .*does not support elicitation/);
    const formOnly = await connect("form-only", { elicitation: {} });
    formOnly.setRequestHandler("elicitation/create", async () => ({ action: "decline" }));
    expect(text(await formOnly.callTool({ name: "b__ask_user", arguments: { message: "x", mode: "url" } }))).toMatch(/^error -32602: .*url-mode/);
    expect(text(await formOnly.callTool({ name: "b__ask_user", arguments: { message: "x" } }))).toBe("user: decline null");
  });

  it("answers the backend -32601 at once during a call whose Accept takes only JSON (no stream to ask on), and the caller gets JSON", async () => {
    const client = await connect("json-only", { sampling: {} });
    const sessionId = (client.transport as StreamableHTTPClientTransport).sessionId ?? "";
    const started = Date.now();
    const answer = await post(running.url, { jsonrpc: "2.0", id: 9, method: "tools/call", params: { name: "b__ask_model", arguments: { prompt: "x" } } }, { accept: "application/json", "mcp-session-id": sessionId, "mcp-protocol-version": "2025-11-25" });
    expect(answer.headers.get("content-type")).toMatch(/^application\/json/);
    expect(text((answer.json as { result: unknown }).result)).toMatch(/^error -32601: /);
    // Not the backend's 5 s timeout.
    expect(Date.now() - started).toBeLessThan(4_000);
  });

  it("gives roots/list the caller's roots, and none to a caller without roots", async () => {
    const rooted = await connect("rooted", { roots: {} });
    rooted.setRequestHandler("roots/list", async () => ({ roots: [{ uri: "file:///work/rooted" }] }));
    expect(text(await rooted.callTool({ name: "b__ask_roots", arguments: {} }))).toBe("roots: file:///work/rooted");
    const rootless = await connect("rootless", { sampling: {} });
    expect(text(await rootless.callTool({ name: "b__ask_roots", arguments: {} }))).toBe("roots: ");
  });

  it("sends a request on no call's stream to the caller only when it is the one call in flight, and refuses it otherwise", async () => {
    const make = async (name: string, delayMs: number) => {
      const client = await connect(name, { sampling: {} });
      client.setRequestHandler("sampling/createMessage", async () => {
        await new Promise((resolve) => setTimeout(resolve, delayMs));
        return { role: "assistant", model: "m", content: { type: "text", text: name } };
      });
      return client;
    };
    const solo = await make("solo", 0);
    expect(text(await solo.callTool({ name: "b__ask_model", arguments: { prompt: "x", related: false } }))).toBe("model: solo");
    // Two calls in flight, the request on neither's stream: nobody is asked.
    const [one, two] = await Promise.all([make("one", 0), make("two", 0)]);
    const slow = (await make("slow", 0)).callTool({ name: "b__slow", arguments: { ms: 1_000 } });
    const results = await Promise.all([
      one.callTool({ name: "b__ask_model", arguments: { prompt: "x", related: false } }),
      two.callTool({ name: "b__ask_model", arguments: { prompt: "x", related: false } }),
    ]);
    for (const result of results) expect(text(result)).toMatch(/^error -32600: .*cannot be tied to a client's call/);
    await slow;
  });

  it("cancels the question when the caller cancels its call: the client is told, the backend gets an error, nothing is left", async () => {
    const client = await connect("canceller", { elicitation: {} });
    const cancelledIds: unknown[] = [];
    let askedId: unknown;
    client.setNotificationHandler("notifications/cancelled", (n) => {
      cancelledIds.push(n.params.requestId);
    });
    client.setRequestHandler("elicitation/create", async (_request, ctx) => {
      askedId = ctx.mcpReq.id;
      // Never answers by itself: waits until told the question is withdrawn.
      await new Promise((resolve) => ctx.mcpReq.signal.addEventListener("abort", resolve));
      return { action: "cancel" };
    });
    const abort = new AbortController();
    const call = client.callTool({ name: "b__ask_user", arguments: { message: "wait" } }, { signal: abort.signal });
    await eventually(() => askedId !== undefined, "the question to reach the client");
    abort.abort("changed my mind");
    await expect(call).rejects.toThrow();
    await eventually(() => cancelledIds.includes(askedId), "notifications/cancelled for the broker's request");
    const session = running.broker.sessions.legacySession(String((client.transport as StreamableHTTPClientTransport).sessionId), "anonymous");
    expect(session).toBeDefined();
    await eventually(() => !session?.hasOpenQuestions(), "the session to hold no open question");
  });

  it("tells the client when the backend withdraws its question (its own request timed out), and takes roots/list_changed without passing it on", async () => {
    const client = await connect("withdrawn", { elicitation: {}, roots: { listChanged: true } });
    const cancelledIds: unknown[] = [];
    let askedId: unknown;
    client.setNotificationHandler("notifications/cancelled", (n) => {
      cancelledIds.push(n.params.requestId);
    });
    client.setRequestHandler("elicitation/create", (_request, ctx) => {
      askedId = ctx.mcpReq.id;
      return new Promise(() => undefined); // never answers
    });
    // The backend gives up on its own request after 300 ms and cancels it.
    const result = await client.callTool({ name: "b__ask_user", arguments: { message: "quick?", timeoutMs: 300 } });
    expect(text(result)).toMatch(/^error /);
    await eventually(() => askedId !== undefined && cancelledIds.includes(askedId), "notifications/cancelled for the withdrawn question");
    await client.sendRootsListChanged();
  });

  it("ends the question with an error for the backend when the caller goes away mid-question", async () => {
    const client = await connect("leaver", { sampling: {} });
    let asked = false;
    client.setRequestHandler("sampling/createMessage", async () => {
      asked = true;
      return new Promise(() => undefined); // never answers
    });
    const sessionId = String((client.transport as StreamableHTTPClientTransport).sessionId);
    void client.callTool({ name: "b__ask_model", arguments: { prompt: "x" } }).catch(() => undefined);
    await eventually(() => asked, "the question to reach the client");
    const session = running.broker.sessions.legacySession(sessionId, "anonymous");
    expect(session?.hasOpenQuestions()).toBe(true);
    await client.close();
    await eventually(() => !session?.hasOpenQuestions(), "the question to end with the client's connection");
  });

  it("bounds a question by the backend's timeoutMs", async () => {
    const client = await connect("silent", { elicitation: {} });
    let asked = false;
    client.setRequestHandler("elicitation/create", () => {
      asked = true;
      return new Promise(() => undefined); // never answers
    });
    const sessionId = String((client.transport as StreamableHTTPClientTransport).sessionId);
    // Ends, one way or the other, once the backend's 5 s are up (the call's, or the question's).
    const outcome = await client.callTool({ name: "b__ask_user", arguments: { message: "x", timeoutMs: 20_000 } }, { timeout: 20_000 }).then(text, (error: Error) => error.message);
    expect(asked).toBe(true);
    expect(outcome).toMatch(/did not answer|error/i);
    expect(running.broker.sessions.legacySession(sessionId, "anonymous")?.hasOpenQuestions()).toBe(false);
  }, 20_000);

  it("asks a legacy client a legacy backend's multi-round-trip question (InputRequiredResult) as a request on the call's stream", async () => {
    const client = await connect("confirmer", { elicitation: {} });
    client.setRequestHandler("elicitation/create", async () => ({ action: "accept", content: { ok: true } }));
    expect(text(await client.callTool({ name: "b__confirm", arguments: { question: "sure?" } }))).toMatch(/^confirmed: accept \{"ok":true\}/);
  });
});

describe("interaction: a modern backend's InputRequiredResult", () => {
  let backend: HttpBackend;
  let running: RunningBroker;

  beforeAll(async () => {
    backend = await startModernHttpBackend(createTestServer({ name: "modern-asker", interactive: true }));
    running = await startBroker({ backends: [{ id: "m", url: backend.url, era: "modern", timeoutMs: 5_000, healthIntervalMs: 60_000 }] });
  });

  afterAll(async () => {
    await running.close();
    await backend.close();
  });

  // A legacy client is asked by the broker, which retries the call with the answers; the SDK's
  // modern client gets the InputRequiredResult, fulfils it by itself and retries. Either way the
  // caller sees one result.
  it.each([
    { era: "legacy" as const, question: "deploy?", ok: true },
    { era: "modern" as const, question: "really?", ok: false },
  ])("reaches a $era client, whose answer goes back as the retry: the client sees one result", async ({ era, question, ok }) => {
    const { client, asked } = await answering(running.url, era, { ok });
    try {
      const result = await client.callTool({ name: "m__confirm", arguments: { question } });
      expect(asked).toEqual([question]);
      expect((result.content as { text: string }[])[0]?.text).toBe(`confirmed: accept {"ok":${ok}} state=asked-once`);
    } finally {
      await client.close();
    }
  });

  it("answers a legacy call whose Accept takes only JSON as for a client that cannot be asked (-32601), never with the backend's own InputRequiredResult", async () => {
    const { client } = await answering(running.url, "legacy", { ok: true });
    try {
      const headers = { accept: "application/json", "mcp-session-id": (client.transport as StreamableHTTPClientTransport).sessionId ?? "", "mcp-protocol-version": "2025-11-25" };
      const answer = await post(running.url, { jsonrpc: "2.0", id: 9, method: "tools/call", params: { name: "m__confirm", arguments: { question: "json?" } } }, headers);
      expect(answer.json).toMatchObject({ id: 9, error: { code: -32601 } });
      expect(answer.text).not.toContain("requestState");
    } finally {
      await client.close();
    }
  });

  it("never passes a legacy client's requestState or inputResponses to the backend: only the broker's sealed ones reach it", async () => {
    const { client, asked } = await answering(running.url, "legacy", { ok: true });
    try {
      const forged = { requestState: "asked-once", inputResponses: { confirm: { action: "accept", content: { ok: false } } } };
      const result = await client.request({ method: "tools/call", params: { name: "m__confirm", arguments: { question: "forged?" }, ...forged } });
      // The backend saw a first call: it asked, and the client's own answer came back with its own state.
      expect(asked).toEqual(["forged?"]);
      expect(text(result)).toBe('confirmed: accept {"ok":true} state=asked-once');
    } finally {
      await client.close();
    }
  });
});

describe("interaction: a modern backend that asks a legacy client too much", () => {
  let backend: HttpBackend;
  let running: RunningBroker;

  beforeAll(async () => {
    backend = await startModernHttpBackend(createTestServer({ name: "modern-nag", interactive: true }));
    running = await startBroker({ backends: [{ id: "m", url: backend.url, era: "modern", timeoutMs: 2_000, healthIntervalMs: 60_000 }] });
  });

  afterAll(async () => {
    await running.close();
    await backend.close();
  });

  it("bounds the whole call, its questions and retries included, by the backend's timeoutMs (-32001)", async () => {
    const client = new Client({ name: "slow-answers", version: "1.0.0" }, { capabilities: { elicitation: {} }, versionNegotiation: { mode: "legacy" } });
    let asked = 0;
    client.setRequestHandler("elicitation/create", async () => {
      asked++;
      await new Promise((r) => setTimeout(r, 600));
      return { action: "accept", content: { ok: true } };
    });
    await client.connect(new StreamableHTTPClientTransport(new URL(running.url)));
    try {
      const started = Date.now();
      await expect(client.callTool({ name: "m__nag" }, { timeout: 30_000 })).rejects.toMatchObject({ code: -32001 });
      // Each round took 0.6 s: the call ended at its 2 s, not after its ten rounds' 6 s.
      expect(asked).toBeLessThan(6);
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      await client.close();
    }
  }, 30_000);
});

describe("interaction across broker instances (Redis engine)", () => {
  /** Two instances; a legacy session on the first, whose call there has the backend's sampling question on its stream. */
  async function askedOnOne() {
    const backend = await startLegacyHttpBackend(createTestServer({ name: "asker", interactive: true }));
    const cluster = await startEngineBrokers("redis", { backends: [{ id: "b", url: backend.url, era: "legacy", timeoutMs: 5_000, healthIntervalMs: 60_000 }] });
    const [asking, other] = cluster.brokers as [RunningBroker, RunningBroker];
    const close = async () => {
      await cluster.close();
      await backend.close();
    };
    try {
      const init = await post(asking.url, {
        jsonrpc: "2.0",
        id: 0,
        method: "initialize",
        params: { protocolVersion: "2025-11-25", capabilities: { sampling: {} }, clientInfo: { name: "raw", version: "1" } },
      });
      const sessionId = init.headers.get("mcp-session-id") ?? "";
      const headers = { "mcp-session-id": sessionId, "mcp-protocol-version": "2025-11-25" };
      await post(asking.url, { jsonrpc: "2.0", method: "notifications/initialized" }, headers);
      const call = await openSse(asking.url, headers, { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "b__ask_model", arguments: { prompt: "hi" } } });
      await eventually(() => call.events.length > 0, "the backend's question on the call's stream");
      const question = call.events[0]?.data as { id: string; method: string };
      expect(question.method).toBe("sampling/createMessage");
      return { asking, other, sessionId, headers, call, question, close };
    } catch (error) {
      await close();
      throw error;
    }
  }

  it("takes the client's answer POSTed to another instance back to the one that asked", async () => {
    const { other, sessionId, headers, call, question, close } = await askedOnOne();
    try {
      // The answer goes to the other instance, which does not hold the session: it passes it on.
      const answered = await post(other.url, { jsonrpc: "2.0", id: question.id, result: { role: "assistant", model: "m", content: { type: "text", text: "hello back" } } }, headers);
      expect(answered.status).toBe(202);
      await call.ended;
      const response = call.events.at(-1)?.data as { id: number; result: { content: { text: string }[] } };
      expect(response.id).toBe(1);
      expect(response.result.content[0]?.text).toBe("model: hello back");
      // The answering instance did not take the session over.
      expect(other.broker.sessions.legacySession(sessionId, "anonymous")).toBeUndefined();
    } finally {
      await close();
    }
  });

  it("keeps a question open when the session moves to another instance mid-question: the answer POSTed there reaches the call", async () => {
    const { asking, other, sessionId, headers, call, question, close } = await askedOnOne();
    try {
      // A round-robin load balancer sends the client's next request to the other instance: it takes the session over.
      expect((await post(other.url, { jsonrpc: "2.0", id: 2, method: "ping" }, headers)).status).toBe(200);
      await eventually(() => asking.broker.sessions.legacySession(sessionId, "anonymous") === undefined, "the session to leave the asking instance");
      expect(other.broker.sessions.legacySession(sessionId, "anonymous")).toBeDefined();
      const answered = await post(other.url, { jsonrpc: "2.0", id: question.id, result: { role: "assistant", model: "m", content: { type: "text", text: "moved" } } }, headers);
      expect(answered.status).toBe(202);
      await call.ended;
      const response = call.events.at(-1)?.data as { id: number; result: { content: { text: string }[] } };
      expect(response).toMatchObject({ id: 1, result: { content: [{ text: "model: moved" }] } });
    } finally {
      await close();
    }
  });

  it("fails a question at once when its session, moved to another instance, ends there (not at the call's timeout)", async () => {
    const { asking, other, sessionId, headers, call, close } = await askedOnOne();
    try {
      expect((await post(other.url, { jsonrpc: "2.0", id: 2, method: "ping" }, headers)).status).toBe(200);
      await eventually(() => asking.broker.sessions.legacySession(sessionId, "anonymous") === undefined, "the session to leave the asking instance");
      expect((await fetch(other.url, { method: "DELETE", headers })).status).toBe(200);
      await call.ended;
      const response = call.events.at(-1)?.data as { id: number };
      expect(response.id).toBe(1);
      // The backend was told the question failed because the session ended: the call did not wait out its 5 s timeout (-32001).
      expect(JSON.stringify(response)).toContain("session ended");
      expect(JSON.stringify(response)).not.toContain("-32001");
    } finally {
      await close();
    }
  });

  it("answers an answer without a session 400, and one in a session that ended or never was 404, on every instance", async () => {
    const backend = await startLegacyHttpBackend(createTestServer({ name: "asker", interactive: true }));
    const cluster = await startEngineBrokers("redis", { backends: [{ id: "b", url: backend.url, era: "legacy", timeoutMs: 5_000, healthIntervalMs: 60_000 }] });
    const [first, second] = cluster.brokers as [RunningBroker, RunningBroker];
    try {
      const answer = { jsonrpc: "2.0", id: "mcp-broker-x", result: {} };
      const init = await post(first.url, { jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
      const headers = { "mcp-session-id": init.headers.get("mcp-session-id") ?? "", "mcp-protocol-version": "2025-11-25" };
      // A live session: an answer to nothing open is dropped, 202 (late, after a cancellation).
      expect((await post(second.url, answer, headers)).status).toBe(202);
      expect((await fetch(first.url, { method: "DELETE", headers })).status).toBe(200);
      for (const broker of [first, second]) {
        expect((await post(broker.url, answer, { "mcp-protocol-version": "2025-11-25" })).status).toBe(400);
        expect((await post(broker.url, answer, { ...headers, "mcp-session-id": "never-issued" })).status).toBe(404);
        expect((await post(broker.url, answer, headers)).status).toBe(404);
      }
    } finally {
      await cluster.close();
      await backend.close();
    }
  });

  it.each([
    { key: "the cluster's shared secret (no interaction.stateKey)", interaction: {} },
    { key: "a configured interaction.stateKey", interaction: { stateKey: "a-key-every-instance-of-the-cluster-shares" } },
  ])("completes a modern client's retry that reaches another instance than the one holding its call, sealed with $key", async ({ interaction }) => {
    const backend = await startLegacyHttpBackend(createTestServer({ name: "asker", interactive: true }));
    const cluster = await startEngineBrokers("redis", {
      backends: [{ id: "b", url: backend.url, era: "legacy", timeoutMs: 5_000, healthIntervalMs: 60_000 }],
      interaction,
    });
    const [holding, other] = cluster.brokers as [RunningBroker, RunningBroker];
    const call = (url: string, extra: Record<string, unknown> = {}) => modernCall(url, "b__ask_user", { message: "name?" }, extra);
    try {
      const round = (await call(holding.url)).json as { result: { inputRequests: Record<string, unknown>; requestState: string } };
      const [key] = Object.keys(round.result.inputRequests);
      const heldCalls = async (url: string) => /^mcp_broker_held_calls (\d+)$/m.exec(await (await fetch(new URL("/metrics", url))).text())?.[1];
      // Held between rounds where it was asked, as /metrics shows.
      expect([await heldCalls(holding.url), await heldCalls(other.url)]).toEqual(["1", "0"]);
      const done = (await call(other.url, { requestState: round.result.requestState, inputResponses: { [String(key)]: { action: "accept", content: { name: "Ray" } } } })).json as {
        result: { content: { text: string }[] };
      };
      expect(done.result.content[0]?.text).toBe('user: accept {"name":"Ray"}');
      await eventually(async () => (await heldCalls(holding.url)) === "0", "the call no longer held once done");
    } finally {
      await cluster.close();
      await backend.close();
    }
  });

  it.each([
    { reached: "the instance holding its call", other: false },
    { reached: "another instance, which passed it on", other: true },
  ])("ends a held call whose client gives up on its retry on $reached: the backend's tool is cancelled and the call is over", async ({ other: elsewhere }) => {
    const server = createTestServer({ name: "asker", interactive: true });
    const backend = await startLegacyHttpBackend(server);
    const cluster = await startEngineBrokers("redis", { backends: [{ id: "b", url: backend.url, era: "legacy", timeoutMs: 20_000, healthIntervalMs: 60_000 }] });
    const [holding, other] = cluster.brokers as [RunningBroker, RunningBroker];
    const args = { ms: 15_000 };
    try {
      const round = (await modernCall(holding.url, "b__ask_then_work", args)).json as { result: { inputRequests: Record<string, unknown>; requestState: string } };
      const [key] = Object.keys(round.result.inputRequests);
      const retry = { requestState: round.result.requestState, inputResponses: { [String(key)]: { action: "accept", content: { ok: true } } } };
      // The retry answers the question, and the tool works on: the client gives up on it.
      const abort = new AbortController();
      const given = modernCall((elsewhere ? other : holding).url, "b__ask_then_work", args, retry, abort.signal);
      await eventually(() => server.stats.answeredCalls.get("ask_then_work") === 1, "the client's answer to reach the backend");
      abort.abort();
      await expect(given).rejects.toThrow();
      await eventually(() => server.stats.cancelledCalls.get("ask_then_work") === 1, "the backend's tool to be cancelled");
      const again = (await modernCall(holding.url, "b__ask_then_work", args, retry)).json as { error: { code: number; message: string } };
      expect(again.error).toMatchObject({ code: -32602, message: expect.stringMatching(/is over/) as unknown });
    } finally {
      await cluster.close();
      await backend.close();
    }
  });

  it("ends a held call whose retry another instance passed on when that instance stops: the retry's connection closes with it", async () => {
    const server = createTestServer({ name: "asker", interactive: true });
    const backend = await startLegacyHttpBackend(server);
    const redisUrl = await testRedisUrl();
    const keyPrefix = uniquePrefix("held-stop");
    const config = { backends: [{ id: "b", url: backend.url, era: "legacy" as const, timeoutMs: 20_000, healthIntervalMs: 60_000 }], redisUrl, redis: { keyPrefix }, server: { drainMs: 200 } };
    const holding = await startBroker(config);
    const passing = await startBroker(config);
    let stopped = false;
    const args = { ms: 15_000 };
    try {
      const round = (await modernCall(holding.url, "b__ask_then_work", args)).json as { result: { inputRequests: Record<string, unknown>; requestState: string } };
      const [key] = Object.keys(round.result.inputRequests);
      const retry = { requestState: round.result.requestState, inputResponses: { [String(key)]: { action: "accept", content: { ok: true } } } };
      const given = modernCall(passing.url, "b__ask_then_work", args, retry).catch(() => undefined);
      await eventually(() => server.stats.answeredCalls.get("ask_then_work") === 1, "the client's answer to reach the backend");
      // It stops gracefully: the retry gets drainMs to finish, then its connection closes.
      await passing.close();
      stopped = true;
      await given;
      await eventually(() => server.stats.cancelledCalls.get("ask_then_work") === 1, "the backend's tool to be cancelled");
      const again = (await modernCall(holding.url, "b__ask_then_work", args, retry)).json as { error: { code: number; message: string } };
      expect(again.error).toMatchObject({ code: -32602, message: expect.stringMatching(/is over/) as unknown });
    } finally {
      if (!stopped) await passing.close();
      await holding.close();
      await deleteKeys(redisUrl, keyPrefix);
      await backend.close();
    }
  });

  it("keeps the cluster's shared secret when Redis loses its data: the members write it back, and a state sealed before still opens on another instance", async () => {
    const backend = await startLegacyHttpBackend(createTestServer({ name: "asker", interactive: true }));
    const cluster = await startEngineBrokers("redis", {
      backends: [{ id: "b", url: backend.url, era: "legacy", timeoutMs: 5_000, healthIntervalMs: 60_000 }],
      redis: { instanceTtlMs: 1_000 },
    });
    const [holding, other] = cluster.brokers as [RunningBroker, RunningBroker];
    const prefix = holding.broker.config.redis.keyPrefix;
    const redis = new Redis(await testRedisUrl());
    try {
      const secret = await redis.get(`${prefix}shared-secret`);
      expect(secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
      const round = (await modernCall(holding.url, "b__ask_user", { message: "name?" })).json as { result: { inputRequests: Record<string, unknown>; requestState: string } };
      // Redis restarted without persistence, for this cluster: every key gone.
      await deleteKeys(await testRedisUrl(), prefix);
      await eventually(async () => (await redis.get(`${prefix}generation`)) !== null && (await redis.get(`${prefix}shared-secret`)) !== null, "the members' recovery", 10_000);
      expect(await redis.get(`${prefix}shared-secret`)).toBe(secret);
      const [key] = Object.keys(round.result.inputRequests);
      const retry = { requestState: round.result.requestState, inputResponses: { [String(key)]: { action: "accept", content: { name: "Ray" } } } };
      const done = (await modernCall(other.url, "b__ask_user", { message: "name?" }, retry)).json as { result: { content: { text: string }[] } };
      expect(done.result.content[0]?.text).toBe('user: accept {"name":"Ray"}');
    } finally {
      redis.disconnect();
      await cluster.close();
      await backend.close();
    }
  });
});

/** A modern `tools/call` with elicitation declared, as POSTed by a 2026-07-28 client. */
function modernCall(url: string, name: string, args: Record<string, unknown>, extra: Record<string, unknown> = {}, signal?: AbortSignal) {
  const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": { elicitation: {} } };
  return post(url, { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args, _meta: meta, ...extra } }, { "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": name }, signal);
}

describe("interaction: a modern client's questions as InputRequiredResult rounds", () => {
  let legacy: LegacyHttpBackend;
  let modern: HttpBackend;
  let running: RunningBroker;
  const META = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": { elicitation: {} } };
  const call = (name: string, args: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
    post(running.url, { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args, _meta: META, ...extra } }, { "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": name });

  beforeAll(async () => {
    legacy = await startLegacyHttpBackend(createTestServer({ name: "legacy-asker", interactive: true }));
    modern = await startModernHttpBackend(createTestServer({ name: "modern-asker", interactive: true }));
    running = await startBroker({
      backends: [
        { id: "b", url: legacy.url, era: "legacy", timeoutMs: 5_000, healthIntervalMs: 60_000 },
        { id: "m", url: modern.url, era: "modern", timeoutMs: 5_000, healthIntervalMs: 60_000 },
      ],
      interaction: { heldCallMs: 1_000 },
    });
  });

  afterAll(async () => {
    await running.close();
    await legacy.close();
    await modern.close();
  });

  it("tells a modern backend the modern client's own capabilities: one without elicitation is refused by the backend, 400 and -32021", async () => {
    const bare = { ...META, "io.modelcontextprotocol/clientCapabilities": {} };
    const refused = await call("m__confirm", { question: "ok?" }, { _meta: bare });
    expect(refused.status).toBe(400);
    expect(refused.json).toMatchObject({ error: { code: -32021, data: { requiredCapabilities: { elicitation: expect.anything() } } } });
    const asked = await call("m__confirm", { question: "ok?" });
    expect(asked.status).toBe(200);
    expect(asked.json).toMatchObject({ result: { resultType: "input_required" } });
  });

  it("holds a legacy backend's call while a modern client answers its question, and returns the call's result to the retry", async () => {
    const { client, asked } = await answering(running.url, "modern", { name: "Mo" });
    try {
      // The SDK client answers the InputRequiredResult by itself and retries: one result for the caller.
      const result = await client.callTool({ name: "b__ask_user", arguments: { message: "name?" } });
      expect(asked).toEqual(["name?"]);
      expect(text(result)).toBe('user: accept {"name":"Mo"}');
    } finally {
      await client.close();
    }
  });

  it("refuses malformed inputResponses with -32602 before any backend sees them", async () => {
    const round = (await call("m__confirm", { question: "ok?" })).json as { result: { requestState: string } };
    for (const inputResponses of ["yes", [{ action: "accept" }], { confirm: "accept" }, { confirm: { action: "maybe" } }]) {
      const refused = (await call("m__confirm", { question: "ok?" }, { requestState: round.result.requestState, inputResponses })).json as { error: { code: number; message: string } };
      expect(refused.error).toMatchObject({ code: -32602, message: expect.stringContaining("inputResponses") as unknown });
    }
    // The state still works with a well-formed answer.
    const done = (await call("m__confirm", { question: "ok?" }, { requestState: round.result.requestState, inputResponses: { confirm: { action: "decline" } } })).json as { result: { content: { text: string }[] } };
    expect(done.result.content[0]?.text).toMatch(/^confirmed: decline/);
  });

  it("answers the backend -32601 for a modern client without the capability", async () => {
    const first = (await call("b__ask_model", { prompt: "x" })).json as { result: { content: { text: string }[] } };
    expect(first.result.content[0]?.text).toMatch(/^error -32601: .*does not support sampling/);
  });

  it("binds a requestState to its call: retried with another tool of the same backend it gets -32602, and the held call still takes its own retry", async () => {
    const round = (await call("b__ask_user", { message: "who?" })).json as { result: { inputRequests: Record<string, unknown>; requestState: string } };
    const [key] = Object.keys(round.result.inputRequests);
    const answer = { [String(key)]: { action: "accept", content: { name: "Ray" } } };
    const other = (await call("b__echo", { text: "x" }, { requestState: round.result.requestState, inputResponses: answer })).json as { error: { code: number; message: string } };
    expect(other.error).toMatchObject({ code: -32602, message: expect.stringMatching(/another call/) });
    const done = (await call("b__ask_user", { message: "who?" }, { requestState: round.result.requestState, inputResponses: answer })).json as { result: { content: { text: string }[] } };
    expect(done.result.content[0]?.text).toBe('user: accept {"name":"Ray"}');
  });

  it("seals the requestState it hands out: a changed, foreign or expired one gets -32602 and a message that says to call again", async () => {
    const round = (await call("b__ask_user", { message: "who?" })).json as { result: { resultType: string; inputRequests: Record<string, unknown>; requestState: string } };
    expect(round.result.resultType).toBe("input_required");
    expect(Object.values(round.result.inputRequests)).toEqual([{ method: "elicitation/create", params: expect.objectContaining({ message: "who?" }) }]);
    const [version, , mac] = round.result.requestState.split(".");
    const forged = [version, Buffer.from(JSON.stringify({ h: "other", p: "anonymous", x: Date.now() + 60_000 })).toString("base64url"), mac].join(".");
    const rejected = (await call("b__ask_user", { message: "who?" }, { requestState: forged, inputResponses: {} })).json as { error: { code: number; message: string } };
    expect(rejected.error.code).toBe(-32602);
    expect(rejected.error.message).toMatch(/not issued by this broker, or was changed/);
    // A modern backend's own state is sealed too, and passed back to it.
    const modernRound = (await call("m__confirm", { question: "ok?" })).json as { result: { resultType: string; requestState: string } };
    expect(modernRound.result.resultType).toBe("input_required");
    expect(modernRound.result.requestState.startsWith("mcpb1.")).toBe(true);
    const done = (await call("m__confirm", { question: "ok?" }, { requestState: modernRound.result.requestState, inputResponses: { confirm: { action: "accept", content: { ok: true } } } })).json as {
      result: { content: { text: string }[] };
    };
    expect(done.result.content[0]?.text).toBe('confirmed: accept {"ok":true} state=asked-once');
    // One backend's state does not open another's call.
    const crossed = (await call("b__ask_user", { message: "x" }, { requestState: modernRound.result.requestState, inputResponses: {} })).json as { error: { code: number } };
    expect(crossed.error.code).toBe(-32602);
    // Past heldCallMs the held call is over and its state expired.
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    const late = (await call("b__ask_user", { message: "who?" }, { requestState: round.result.requestState, inputResponses: { q1: { action: "accept", content: { name: "late" } } } })).json as {
      error: { code: number; message: string };
    };
    expect(late.error.code).toBe(-32602);
    expect(late.error.message).toMatch(/expired|over/);
  });
});

describe("interaction: a request on no call's stream never goes to another principal's call", () => {
  it("after a call of one principal ended early, routes an untied request to that principal's next call only", async () => {
    const server = createTestServer({ name: "asker", interactive: true });
    const backend = await startLegacyHttpBackend(server);
    const keys = { ann: "ann-key-0123456789abcdef", bob: "bob-key-0123456789abcdef" };
    const running = await startBroker({
      backends: [{ id: "b", url: backend.url, era: "legacy", timeoutMs: 5_000, healthIntervalMs: 60_000 }],
      auth: { apiKeys: [{ key: keys.ann, principal: "ann" }, { key: keys.bob, principal: "bob" }] },
    });
    const connectAs = async (who: "ann" | "bob") => {
      const client = new Client({ name: who, version: "1.0.0" }, { capabilities: { sampling: {} }, versionNegotiation: { mode: "legacy" } });
      await client.connect(new StreamableHTTPClientTransport(new URL(running.url), { requestInit: { headers: { authorization: `Bearer ${keys[who]}` } } }));
      client.setRequestHandler("sampling/createMessage", async () => ({ role: "assistant", model: "m", content: { type: "text", text: who } }));
      return client;
    };
    const [ann, bob] = [await connectAs("ann"), await connectAs("bob")];
    try {
      // Ann's call ends early (cancelled): the backend may still be working on it.
      const abort = new AbortController();
      const cancelled = ann.callTool({ name: "b__slow", arguments: { ms: 2_000 } }, { signal: abort.signal });
      await eventually(() => (server.stats.toolCalls.get("slow") ?? 0) === 1, "the backend to be working on Ann's call");
      abort.abort("gave up");
      await expect(cancelled).rejects.toThrow();
      // Bob's lone call does not get an untied request (it could be Ann's); Ann's does.
      expect(text(await bob.callTool({ name: "b__ask_model", arguments: { prompt: "x", related: false } }))).toMatch(/^error -32600: .*another principal's/);
      expect(text(await ann.callTool({ name: "b__ask_model", arguments: { prompt: "x", related: false } }))).toBe("model: ann");
    } finally {
      await ann.close();
      await bob.close();
      await running.close();
      await backend.close();
    }
  });
});
