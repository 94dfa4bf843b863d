import type { Client } from "@modelcontextprotocol/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, type LegacyHttpBackend } from "../fixtures/http-backends.js";
import { NotificationRecorder } from "../fixtures/notification-recorder.js";
import { createTestServer, type TestServer } from "../fixtures/test-server.js";
import { connectClient, eventually, startBroker, type RunningBroker } from "../helpers/harness.js";

const TOOLS_CHANGED = "notifications/tools/list_changed";

/** `toolChanges: "hold"`: a tool that appears after the first list is not exposed until pinned. */
describe("held tool changes", () => {
  let server: TestServer;
  let backend: LegacyHttpBackend;
  let running: RunningBroker;
  let client: Client;

  beforeAll(async () => {
    server = createTestServer({ name: "held" });
    backend = await startLegacyHttpBackend(server);
    running = await startBroker({ backends: [{ id: "leg", url: backend.url, era: "legacy", toolChanges: "hold" }], lists: { debounceMs: 50 } }, {}, { readyBackends: ["leg"] });
    client = await connectClient(running.url, "legacy");
  }, 60_000);

  afterAll(async () => {
    await client?.close();
    await running?.close();
    await backend?.close();
  });

  it("keeps a tool that appeared later out of the list and out of reach, tells operators, and tells clients nothing", async () => {
    const notes = new NotificationRecorder(client, [TOOLS_CHANGED]);
    const before = (await client.listTools()).tools.map((t) => t.name);
    expect(before).toContain("leg__echo");
    server.addTool("late_tool");
    const readyz = new URL("/readyz", running.url);
    let held: { backendId: string; name: string; hash: string }[] = [];
    await eventually(async () => {
      held = ((await (await fetch(readyz)).json()) as { heldTools?: typeof held }).heldTools ?? [];
      return held.length > 0;
    }, "the late tool held");
    expect(held).toEqual([{ backendId: "leg", name: "late_tool", hash: expect.stringMatching(/^[A-Za-z0-9_-]{22}$/) }]);
    expect((await client.listTools()).tools.map((t) => t.name)).toEqual(before);
    await expect(client.callTool({ name: "leg__late_tool", arguments: {} })).rejects.toMatchObject({
      code: -32012,
      data: { backend: "leg", name: "leg__late_tool", hash: held[0]?.hash },
    });
    // Pinned tools keep working, and the visible list never changed: no list_changed.
    expect((await client.callTool({ name: "leg__echo", arguments: { text: "still" } })).content).toEqual([{ type: "text", text: "still" }]);
    expect(notes.all(TOOLS_CHANGED)).toEqual([]);
  });
});
