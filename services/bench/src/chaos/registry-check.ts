/**
 * Evidence read from the cluster's Redis at the end of a variant, before the clients leave: for
 * each legacy session, the subscriptions the cluster's registry holds for it against the ones its
 * client was granted (a `resources/subscribe` answered with a result), and its record's holder and
 * epoch. A granted subscription missing from the registry is one no adopting broker will deliver.
 */
import { Redis } from "ioredis";
import { BACKEND_ID, backendUri } from "../core/bench-uris.js";
import type { ClientRecord } from "./chaos-generator-api.js";

/** Every bench client is this principal (no API keys in deploy/fleet.config.json). */
const PRINCIPAL = "anonymous";

export interface RegistryMismatch {
  client: number;
  sessionId: string;
  granted: number[];
  held: number[];
  owner: string;
  epoch: string;
}

export async function checkRegistry(redisUrl: string, keyPrefix: string, clients: readonly ClientRecord[]): Promise<{ checked: number; mismatches: RegistryMismatch[] }> {
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1, lazyConnect: true });
  redis.on("error", () => undefined);
  await redis.connect();
  const mismatches: RegistryMismatch[] = [];
  let checked = 0;
  try {
    for (const client of clients) {
      const sessionId = client.sessionIds[client.sessionIds.length - 1];
      if (client.kind !== "legacy" || sessionId === undefined || client.setupError !== undefined) continue;
      checked++;
      const session = `${encodeURIComponent(PRINCIPAL)}:${encodeURIComponent(sessionId)}`;
      const members = await redis.zrange(`${keyPrefix}sub:${session}`, "0", "-1");
      const held = members
        .map((m) => m.split("\u0000"))
        .filter(([backend, uri]) => backend === BACKEND_ID && uri !== undefined)
        .map(([, uri]) => Number((uri as string).slice(backendUri(0).length - 1)))
        .sort((a, b) => a - b);
      const granted = [...client.keys].sort((a, b) => a - b);
      if (held.join(",") === granted.join(",")) continue;
      const [owner, epoch] = await redis.hmget(`${keyPrefix}session:${session}`, "owner", "epoch");
      mismatches.push({ client: client.index, sessionId, granted, held, owner: owner ?? "(no record)", epoch: epoch ?? "" });
    }
  } finally {
    redis.disconnect();
  }
  return { checked, mismatches };
}
