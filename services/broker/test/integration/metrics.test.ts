import { request } from "node:http";
import type { Client } from "@modelcontextprotocol/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, type LegacyHttpBackend } from "../fixtures/http-backends.js";
import { NotificationRecorder } from "../fixtures/notification-recorder.js";
import { createTestServer, type TestServer } from "../fixtures/test-server.js";
import { connectClient, startBroker, type RunningBroker } from "../helpers/harness.js";

/** `GET /metrics`: what an operator's Prometheus scrapes, after real sessions, subscriptions and updates. */
describe("metrics", () => {
  let server: TestServer;
  let backend: LegacyHttpBackend;
  let running: RunningBroker;
  const clients: Client[] = [];

  beforeAll(async () => {
    server = createTestServer({ name: "metrics" });
    backend = await startLegacyHttpBackend(server);
    running = await startBroker({ backends: [{ id: "leg", url: backend.url, era: "legacy" }] }, {}, { readyBackends: ["leg"] });
  }, 60_000);

  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await running?.close();
    await backend?.close();
  });

  const scrape = async (): Promise<{ status: number; text: string }> => {
    const response = await fetch(new URL("/metrics", running.url));
    return { status: response.status, text: await response.text() };
  };
  const value = (text: string, series: string): number | undefined => {
    const line = text.split("\n").find((l) => l.startsWith(`${series} `));
    return line === undefined ? undefined : Number(line.slice(series.length + 1));
  };

  it("counts sessions, upstream subscriptions, updates in and notifications out", async () => {
    for (let i = 0; i < 2; i++) clients.push(await connectClient(running.url, "legacy"));
    clients.push(await connectClient(running.url, "modern"));
    const [first, second, modern] = clients as [Client, Client, Client];
    const notes = [first, second].map((c) => new NotificationRecorder(c, ["notifications/resources/updated"]));
    await first.subscribeResource({ uri: "leg+test://static/a" });
    await second.subscribeResource({ uri: "leg+test://static/a" });
    const listen = await modern.listen({ toolsListChanged: true });
    server.emitUpdate("test://static/a");
    await Promise.all(notes.map((n) => n.waitFor("notifications/resources/updated")));

    const { status, text } = await scrape();
    expect(status).toBe(200);
    expect(value(text, 'mcp_broker_sessions{era="legacy"}')).toBe(2);
    expect(value(text, 'mcp_broker_sessions{era="modern"}')).toBe(1);
    expect(value(text, 'mcp_broker_backend_up{backend="leg"}')).toBe(1);
    expect(value(text, 'mcp_broker_backend_watching{backend="leg"}')).toBe(1);
    expect(value(text, 'mcp_broker_upstream_subscriptions{backend="leg"}')).toBe(1);
    expect(value(text, "mcp_broker_resource_updates_received_total")).toBe(1);
    expect(value(text, "mcp_broker_resource_updated_delivered_total")).toBe(2);
    expect(value(text, "mcp_broker_bus_latency_seconds_count")).toBe(1);
    expect(value(text, 'mcp_broker_catalog_items{kind="tools"}')).toBeGreaterThan(0);
    expect(value(text, "mcp_broker_held_tools")).toBe(0);
    expect(text).toContain("mcp_broker_process_cpu_seconds_total");
    // Counters only grow: a second scrape after another update reads one more of each.
    server.emitUpdate("test://static/a");
    await Promise.all(notes.map((n) => n.waitFor("notifications/resources/updated", () => true, { since: 1 })));
    expect(value((await scrape()).text, "mcp_broker_resource_updated_delivered_total")).toBe(4);
    await listen.close();
  });

  it("is behind the Host check, like /readyz", async () => {
    const url = new URL("/metrics", running.url);
    const response = await new Promise<number>((resolve, reject) => {
      const req = request({ host: url.hostname, port: url.port, path: url.pathname, headers: { host: "attacker.example" } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on("error", reject);
      req.end();
    });
    expect(response).toBe(403);
  });
});
