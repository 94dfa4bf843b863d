/**
 * A chaos load generator: a child process holding many ChaosClients (raw HTTP, reconnecting as
 * the SDK client does) and what each of them saw, driven over IPC (ChaosGeneratorApi).
 */
import { Agent } from "node:http";
import { parentLink } from "../core/links.js";
import { exitWithParent } from "../core/process-group.js";
import { reportUsage } from "../core/process-usage.js";
import { serveRpc } from "../core/rpc.js";
import type { Agents } from "../load/client-session.js";
import { ChaosClient } from "./chaos-client.js";
import type { ChaosGeneratorApi, OpenClientsParams, OpenClientsResult } from "./chaos-generator-api.js";

const agents: Agents = {
  requests: new Agent({ keepAlive: true, maxSockets: 64, maxFreeSockets: 64 }),
  streams: new Agent({ keepAlive: false, maxSockets: Number.POSITIVE_INFINITY }),
};
const clients: ChaosClient[] = [];

async function open(params: OpenClientsParams): Promise<OpenClientsResult> {
  const started = Date.now();
  const env = { url: new URL(params.url), agents, serverHeader: params.serverHeader.toLowerCase(), step: params.step };
  let next = 0;
  let opened = 0;
  const errors: string[] = [];
  const worker = async (): Promise<void> => {
    while (next < params.clients.length) {
      const client = new ChaosClient(params.clients[next++] as (typeof params.clients)[number], env);
      clients.push(client);
      try {
        await client.setup();
        opened++;
      } catch (error) {
        client.record.setupError = (error as Error).message;
        await client.close().catch(() => undefined);
        if (errors.length < 5) errors.push((error as Error).message);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(params.concurrency, params.clients.length) }, worker));
  return { opened, failed: params.clients.length - opened, errors, ms: Date.now() - started };
}

const api: ChaosGeneratorApi = {
  open,
  status: () => ({
    clients: clients.length,
    open: clients.filter((c) => c.isOpen).length,
    reconnecting: clients.filter((c) => c.isReconnecting).length,
    updates: clients.reduce((sum, c) => sum + c.updates, 0),
    refusals: clients.reduce((sum, c) => sum + c.record.refusals.length, 0),
    restarts: clients.reduce((sum, c) => sum + Math.max(0, c.record.sessionIds.length - 1), 0),
  }),
  dump: ({ from, count }) => clients.slice(from, from + count).map((c) => c.record),
  closeAll: async () => {
    const outcomes = await Promise.all(clients.map((c) => c.close().catch(() => false)));
    return { deleted: outcomes.filter(Boolean).length, failed: outcomes.filter((ok) => !ok).length };
  },
  usage: reportUsage,
};

serveRpc(parentLink(), api);
exitWithParent(() => {
  for (const client of clients) void client.close().catch(() => undefined);
});
