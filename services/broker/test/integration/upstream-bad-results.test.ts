import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NotificationRecorder } from "../fixtures/notification-recorder.js";
import { connectClient, eventually, startBroker, type RunningBroker } from "../helpers/harness.js";

const BROKER_DIR = resolve(import.meta.dirname, "../..");
const MALFORMED_BACKEND = join(BROKER_DIR, "test/fixtures/malformed-stdio-backend.ts");
const TOOLS_CHANGED = "notifications/tools/list_changed";

/** One unusable answer from a backend fails that request alone; it does not take the backend down. */
describe("upstream: a malformed backend result", () => {
  let running: RunningBroker;

  beforeAll(async () => {
    running = await startBroker({
      backends: [{ id: "mal", command: process.execPath, args: ["--import", "tsx", MALFORMED_BACKEND], cwd: BROKER_DIR, era: "legacy", timeoutMs: 10_000 }],
      metaTools: false,
    });
  }, 60_000);

  afterAll(async () => {
    await running?.close();
  });

  const text = (result: unknown): string => ((result as { content: { text: string }[] }).content[0]?.text ?? "");

  it("fails only that call with -32003; the backend stays up, its tools stay listed, other calls in flight complete", async () => {
    const client = await connectClient(running.url, "legacy");
    try {
      const notes = new NotificationRecorder(client, [TOOLS_CHANGED]);
      const pid = text(await client.callTool({ name: "mal__pid" }));
      const inFlight = client.callTool({ name: "mal__slow", arguments: { ms: 400 } });

      await expect(client.callTool({ name: "mal__bad" })).rejects.toMatchObject({ code: -32003, data: { backend: "mal", reason: "INVALID_RESULT" } });

      expect(text(await inFlight)).toBe("done");
      expect(running.broker.pool.get("mal").state).toBe("connected");
      expect(text(await client.callTool({ name: "mal__pid" }))).toBe(pid); // the same process: not restarted
      // The malformed `broken` is left out of the list, not the whole list.
      expect((await client.listTools()).tools.map((t) => t.name)).toEqual(["mal__bad", "mal__slow", "mal__pid", "mal__huge", "mal__progress"]);
      await new Promise((r) => setTimeout(r, 100));
      expect(notes.all(TOOLS_CHANGED)).toEqual([]);
    } finally {
      await client.close();
    }
  });

  it.each(["legacy", "modern"] as const)("passes a %s caller every progress notification sent before the result, the last one too when they came in one read", async (era) => {
    const client = await connectClient(running.url, era);
    try {
      for (let call = 0; call < 5; call++) {
        const seen: number[] = [];
        expect(text(await client.callTool({ name: "mal__progress" }, { onprogress: (p) => seen.push(p.progress) }))).toBe("done");
        expect(seen).toEqual([1, 2]);
      }
    } finally {
      await client.close();
    }
  });

  it("fails an answer over the stdio message limit with -32003 alone: the backend is not restarted, calls in flight complete", async () => {
    const client = await connectClient(running.url, "legacy");
    try {
      const pid = text(await client.callTool({ name: "mal__pid" }));
      const inFlight = client.callTool({ name: "mal__slow", arguments: { ms: 1_500 } });
      await expect(client.callTool({ name: "mal__huge" })).rejects.toMatchObject({ code: -32003, data: { backend: "mal", reason: "too-large" } });
      expect(text(await inFlight)).toBe("done");
      expect(running.broker.pool.get("mal").state).toBe("connected");
      expect(text(await client.callTool({ name: "mal__pid" }))).toBe(pid);
      // Under the limit, a large answer comes through.
      expect(text(await client.callTool({ name: "mal__huge", arguments: { mb: 9 } })).length).toBe(9 * 1024 * 1024);
    } finally {
      await client.close();
    }
  });

  it("checks the answer to the upstream subscribe: one that is not an empty result fails that subscribe (-32003), a refusal passes on unchanged, nothing stays held", async () => {
    const client = await connectClient(running.url, "legacy");
    try {
      await expect(client.subscribeResource({ uri: "mal+mal://bad" })).rejects.toMatchObject({ code: -32003, data: { backend: "mal", reason: "INVALID_RESULT" } });
      // The backend's own error passes as it is (it was -32603, the broker's "internal failure").
      await expect(client.subscribeResource({ uri: "mal+mal://refused" })).rejects.toMatchObject({ code: -32601, message: expect.stringContaining("Method not found"), data: { why: "no subscriptions here" } });
      await client.subscribeResource({ uri: "mal+mal://good" });
      expect(running.broker.upstream.watched("mal")).toEqual(["mal://good"]);
      expect(running.broker.pool.get("mal").state).toBe("connected");
    } finally {
      await client.close();
    }
  });
});

describe("upstream: a backend whose tool list never loads", () => {
  it("answers a call of one of its tools -32000 (its list has not loaded), not Unknown tool; other backends' unknown tools stay -32602", async () => {
    const backend = (id: string, env: Record<string, string> = {}) => ({ id, command: process.execPath, args: ["--import", "tsx", MALFORMED_BACKEND], cwd: BROKER_DIR, env, era: "legacy" as const });
    const running = await startBroker({ backends: [backend("mal"), backend("nolist", { MAL_NO_TOOLS_LIST: "1" })], metaTools: false }, {}, { readyBackends: ["mal"] });
    const client = await connectClient(running.url, "legacy");
    try {
      // Connected, but its tools list fails every time (the harness waited for `mal` only).
      await eventually(() => running.broker.pool.get("nolist").state === "connected", "the backend that cannot list, connected", 30_000);
      await expect(client.callTool({ name: "nolist__pid" })).rejects.toMatchObject({ code: -32000, data: { backend: "nolist" } });
      await expect(client.callTool({ name: "nolist__pid" })).rejects.toThrow(/tools list has not loaded/);
      await expect(client.callTool({ name: "mal__nope" })).rejects.toMatchObject({ code: -32602 });
    } finally {
      await client.close();
      await running.close();
    }
  }, 60_000);
});
