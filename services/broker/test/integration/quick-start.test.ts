import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { loadConfigFile } from "@mcp-broker/shared/node";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBroker, type Broker } from "../../src/broker.js";
import { collectUpdates, connectClient, eventually, startBroker } from "../helpers/harness.js";

const DEMO_CONFIG = resolve(import.meta.dirname, "../../../../deploy/demo.config.json");
const DEMO_BACKEND = resolve(import.meta.dirname, "../../dist/demo/demo-backend.js");

/**
 * What `npm start` serves: the shipped demo config (demo backend built to dist, server-everything),
 * used by a client the way the README's quick start shows.
 */
describe("quick start (deploy/demo.config.json)", () => {
  let broker: Broker;
  let url: string;

  beforeAll(async () => {
    const config = await loadConfigFile(DEMO_CONFIG, {}, { port: 0 });
    broker = createBroker(config, { logger: pino({ level: process.env.TEST_LOG_LEVEL ?? "silent" }) });
    url = await broker.listen();
    expect(await broker.whenReady(60_000)).toBe(true);
  }, 90_000);

  afterAll(async () => {
    await broker?.close();
  });

  it.each(["legacy", "modern"] as const)("serves the demo in the %s era: counter updates and a tool list change", async (era) => {
    const client = await connectClient(url, era);
    try {
      const tools = (await client.listTools()).tools.map((t) => t.name);
      expect(tools).toEqual(expect.arrayContaining(["demo__bump_counter", "demo__toggle_extra_tool", "everything__echo"]));
      const updates = collectUpdates(client);
      const listChanges: string[] = [];
      client.setNotificationHandler("notifications/tools/list_changed", () => {
        listChanges.push("tools");
      });
      const listen =
        era === "modern"
          ? await client.listen({ resourceSubscriptions: ["demo+demo://counter"], toolsListChanged: true })
          : await client.subscribeResource({ uri: "demo+demo://counter" }).then(() => undefined);
      await client.callTool({ name: "demo__bump_counter", arguments: {} });
      await eventually(() => updates.includes("demo+demo://counter"), "the counter update");
      await client.callTool({ name: "demo__toggle_extra_tool", arguments: {} });
      await eventually(() => listChanges.length > 0, "tools/list_changed");
      await listen?.close();
    } finally {
      await client.close();
    }
  });
});

/** The image's default (deploy/Dockerfile): nothing is fetched when a container starts. */
describe("the image's default config (deploy/compose.config.json)", () => {
  it("starts every backend from files in the image, and serves their tools", async () => {
    const file = resolve(import.meta.dirname, "../../../../deploy/compose.config.json");
    const config = await loadConfigFile(file, {}, { port: 0, host: "127.0.0.1" });
    for (const backend of config.backends) {
      if (!("command" in backend)) throw new Error(`${backend.id}: the image's backends are local processes`);
      expect(backend.command, backend.id).toBe("node");
      expect(existsSync(resolve(dirname(file), backend.args[0] ?? "")), backend.id).toBe(true);
    }
    const broker = createBroker(config, { logger: pino({ level: process.env.TEST_LOG_LEVEL ?? "silent" }) });
    try {
      const url = await broker.listen();
      expect(await broker.whenReady(60_000)).toBe(true);
      const client = await connectClient(url, "legacy");
      try {
        expect((await client.listTools()).tools.map((t) => t.name)).toEqual(expect.arrayContaining(["demo__bump_counter", "everything__echo"]));
      } finally {
        await client.close();
      }
    } finally {
      await broker.close();
    }
  }, 90_000);
});

/** `mcp-broker-demo --http`, the shared backend of deploy/cluster.config.json and the compose fleet. */
describe("the demo backend over HTTP", () => {
  it("serves a broker over Streamable HTTP: counter updates reach a subscriber in either era", async () => {
    const child = spawn(process.execPath, [DEMO_BACKEND, "--http", "--port", "0"], { stdio: ["ignore", "ignore", "pipe"] });
    try {
      const backendUrl = await new Promise<string>((done, fail) => {
        let stderr = "";
        child.stderr.on("data", (chunk: Buffer) => {
          stderr += chunk.toString("utf8");
          const ready = /mcp-broker-demo ready: (\S+)/.exec(stderr);
          if (ready?.[1] !== undefined) done(ready[1]);
        });
        child.once("exit", (code) => fail(new Error(`demo exited with ${code}: ${stderr}`)));
      });
      const running = await startBroker({ backends: [{ id: "demo", url: backendUrl }] });
      try {
        for (const era of ["legacy", "modern"] as const) {
          const client = await connectClient(running.url, era);
          const updates = collectUpdates(client);
          const listen = era === "modern" ? await client.listen({ resourceSubscriptions: ["demo+demo://counter"] }) : await client.subscribeResource({ uri: "demo+demo://counter" }).then(() => undefined);
          await client.callTool({ name: "demo__bump_counter", arguments: {} });
          await eventually(() => updates.includes("demo+demo://counter"), `the counter update (${era})`);
          await listen?.close();
          await client.close();
        }
      } finally {
        await running.close();
      }
    } finally {
      child.kill();
    }
  }, 60_000);
});
