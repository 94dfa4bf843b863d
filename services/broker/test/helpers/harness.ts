import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { parseConfig, type BrokerConfigInput } from "@mcp-broker/shared";
import { deleteKeys, testRedisUrl, uniquePrefix } from "@mcp-broker/shared/testing";
import { pino } from "pino";
import { createBroker, type Broker, type BrokerDeps } from "../../src/broker.js";

export interface RunningBroker {
  broker: Broker;
  url: string;
  close(): Promise<void>;
}

/**
 * Starts a broker on an ephemeral port and waits until every backend is connected and listed, or
 * with `readyBackends` only those (for tests that configure a backend that is down).
 */
export async function startBroker(
  config: Omit<BrokerConfigInput, "server"> & { server?: BrokerConfigInput["server"] },
  deps: BrokerDeps = {},
  options: { readyBackends?: string[] } = {},
): Promise<RunningBroker> {
  const parsed = parseConfig({ ...config, server: { port: 0, ...config.server } }, "test config");
  const logger = deps.logger ?? pino({ level: process.env.TEST_LOG_LEVEL ?? "silent" });
  const broker = createBroker(parsed, { ...deps, logger });
  // As the CLI does: the port first, then the backends, and it serves once they are ready (or the wait ends).
  const url = await broker.bind();
  await broker.startBackends();
  const wanted = options.readyBackends;
  const ready =
    wanted === undefined
      ? await broker.whenReady(30_000)
      : await eventually(() => wanted.every((id) => broker.pool.get(id).state === "connected" && broker.catalog.ready(id)), `backends ${wanted.join(", ")}`, 30_000).then(
          () => true,
          () => false,
        );
  if (!ready) {
    const states = broker.pool.all().map((b) => `${b.id}: ${b.state} ${b.lastFailure ?? ""}`);
    await broker.close();
    throw new Error(`broker not ready: ${states.join("; ")}`);
  }
  broker.serve();
  return { broker, url, close: () => broker.close() };
}

export type Era = "legacy" | "modern";

/** An SDK v2 client connected to `url` in the given era. */
export async function connectClient(url: string, era: Era, options: { headers?: Record<string, string>; name?: string } = {}): Promise<Client> {
  const client = new Client(
    { name: options.name ?? `test-${era}`, version: "1.0.0" },
    { versionNegotiation: { mode: era === "modern" ? { pin: "2026-07-28" } : "legacy" } },
  );
  const transport = new StreamableHTTPClientTransport(new URL(url), options.headers ? { requestInit: { headers: options.headers } } : {});
  await client.connect(transport);
  if (client.getProtocolEra() !== era) throw new Error(`expected a ${era} connection, got ${client.getProtocolEra()}`);
  return client;
}

/** Collects `notifications/resources/updated` URIs a client receives. */
export function collectUpdates(client: Client): string[] {
  const uris: string[] = [];
  client.setNotificationHandler("notifications/resources/updated", (n) => {
    uris.push(n.params.uri);
  });
  return uris;
}

/** Resolves when `predicate` holds, polling briefly; rejects with `what` after `timeoutMs`. */
export async function eventually(predicate: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Raw JSON-RPC POST to the broker (for edge-case tests the SDK would not send); `signal` aborts it, closing its connection. */
export async function post(url: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<{ status: number; headers: Headers; json: unknown; text: string }> {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
    ...(signal !== undefined && { signal }),
  });
  const text = await response.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, headers: response.headers, json, text };
}

/**
 * The brokers of one engine: on the memory engine one broker; on the Redis engine two instances of
 * one cluster (a key prefix of their own, deleted by `close`), so that what one instance answers
 * shows what the whole cluster holds.
 */
export async function startEngineBrokers(
  engine: "memory" | "redis",
  config: Omit<BrokerConfigInput, "server"> & { server?: BrokerConfigInput["server"] },
): Promise<{ brokers: RunningBroker[]; close: () => Promise<void> }> {
  if (engine === "memory") {
    const only = await startBroker(config);
    return { brokers: [only], close: () => only.close() };
  }
  const redisUrl = await testRedisUrl();
  const keyPrefix = uniquePrefix(`engine-${engine}`);
  const clustered = { ...config, redisUrl, redis: { ...config.redis, keyPrefix } };
  const brokers = [await startBroker(clustered), await startBroker(clustered)];
  return {
    brokers,
    close: async () => {
      await Promise.all(brokers.map((b) => b.close()));
      await deleteKeys(redisUrl, keyPrefix);
    },
  };
}
