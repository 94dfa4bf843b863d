import { mkdtemp, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createBroker, type Broker } from "@mcp-broker/broker";
import { parseConfig } from "@mcp-broker/shared";

/** The demo backend's entry, from the broker's build output. */
export const DEMO_BACKEND = join(dirname(createRequire(import.meta.url).resolve("@mcp-broker/broker")), "demo", "demo-backend.js");

export interface DemoBroker {
  readonly broker: Broker;
  /** The MCP endpoint, `http://127.0.0.1:<port>/mcp`. */
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

/**
 * A broker in this process on 127.0.0.1 (an ephemeral port unless `port` is given) in front of
 * one demo backend `demo` whose files live in `filesDir` (`subscriptions`: settings of that section). Resolves once the backend is connected
 * and its lists are loaded.
 */
export async function startDemoBroker(filesDir: string, port = 0, subscriptions: Record<string, unknown> = {}, server: Record<string, unknown> = {}): Promise<DemoBroker> {
  const config = parseConfig(
    {
      server: { host: "127.0.0.1", port, ...server },
      logging: { level: "silent" },
      lists: { debounceMs: 50 },
      subscriptions: { releaseGraceMs: 0, ...subscriptions },
      backends: [{ id: "demo", command: process.execPath, args: [DEMO_BACKEND], env: { DEMO_FILES_DIR: filesDir, LOG_LEVEL: "silent" } }],
    },
    "client test config",
  );
  const broker = createBroker(config);
  const url = await broker.listen();
  if (!(await broker.whenReady(30_000))) {
    await broker.close();
    throw new Error("the demo broker did not become ready");
  }
  return { broker, url, port: Number(new URL(url).port), close: () => broker.close() };
}

/** A fresh temp folder for the demo backend's files; `remove` deletes it. */
export async function tempFilesDir(): Promise<{ dir: string; remove(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), "mcp-broker-client-"));
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}
