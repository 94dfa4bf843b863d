/**
 * The baseline server: what a hand-written notifier on this machine does with the same load, no
 * MCP. `GET /sse?key=K` opens an SSE stream for key K; a message on Redis channel `bench:r:K` (its
 * payload is the update URI) is encoded once into the same JSON-RPC notification frame the broker
 * sends and written to every stream of K. `POST /rpc` answers any JSON-RPC request with `{}` (the
 * floor for request/response cost). `POST /listen` takes a `subscriptions/listen` request as the
 * broker does: its response is an SSE stream of every URI it names (each a key), opened with an
 * acknowledgement that echoes them (the floor of opening a listen stream for that request). Started
 * with relays, `POST /relay/<transport>` hands the request to a bench backend of its own and answers with the
 * backend's answer (the floor of a request that needs an upstream round trip, see raw-relay.ts).
 * Started with a store, each of these under `/store/` first makes one round trip to that Redis: a
 * script that adds the request's URIs to (or, for an unsubscribe, removes them from) one set and
 * counts them in a hash, and a listen stream's URIs are removed the same way when it closes (the
 * floor of keeping subscriptions in Redis, as a cluster that enforces its limits exactly must).
 * One keep-alive comment goes to every stream every 15 s, like the broker's default.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { serveH2cBeside } from "@mcp-broker/broker";
import { Cluster, Redis } from "ioredis";
import { parentLink } from "../core/links.js";
import { exitWithParent } from "../core/process-group.js";
import { reportUsage } from "../core/process-usage.js";
import { serveRpc } from "../core/rpc.js";
import type { RawServerApi } from "./raw-api.js";
import { startRelay, type Relay } from "./raw-relay.js";

const CHANNEL_PREFIX = "bench:r:";
const KEEP_ALIVE_MS = 15_000;
const KEEP_ALIVE_FRAME = Buffer.from(": keep-alive\n\n");

const streams = new Map<string, Set<ServerResponse>>();
let connections = 0;
/** Where streams' keys are subscribed: SUBSCRIBE on one Redis, or SSUBSCRIBE on a Redis Cluster (ioredis's one subscriber per master). */
let subscriber: { subscribe(channel: string): Promise<unknown>; disconnect(): void } | undefined;
const relays = new Map<string, Relay>();
/** Keys of the store (see the file comment), and the script that changes them: ARGV "+" or "-", then the URIs. */
const STORE_KEYS = ["bench:raw-store:subscriptions", "bench:raw-store:counts"] as const;
const STORE_SCRIPT = `
local n = 0
for i = 2, #ARGV do n = n + redis.call(ARGV[1] == '+' and 'SADD' or 'SREM', KEYS[1], ARGV[i]) end
redis.call('HINCRBY', KEYS[2], 'total', ARGV[1] == '+' and n or -n)
return n
`;
type StoreRedis = Redis & { rawStore(subscriptions: string, counts: string, sign: string, ...uris: string[]): Promise<number> };
let store: StoreRedis | undefined;

/** One round trip to the store for `uris` (none: no round trip). */
function stored(sign: "+" | "-", uris: readonly string[]): Promise<unknown> {
  if (store === undefined || uris.length === 0) return Promise.resolve();
  return store.rawStore(STORE_KEYS[0], STORE_KEYS[1], sign, ...uris);
}

/** What a subscribe or unsubscribe request changes in the store. */
function storedFor(message: Record<string, unknown> | undefined): Promise<unknown> {
  const uri = (message?.params as { uri?: unknown } | undefined)?.uri;
  return typeof uri === "string" ? stored(message?.method === "resources/unsubscribe" ? "-" : "+", [uri]) : Promise.resolve();
}

function frameOf(uri: string): Buffer {
  return Buffer.from(`event: message\ndata: {"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":${JSON.stringify(uri)}}}\n\n`);
}

/** Opens `res` as an SSE stream of every key in `keys`; `first` is written with the headers. */
function openStream(keys: readonly string[], res: ServerResponse, first?: string): void {
  // (HTTP/2 has no Connection header.)
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache, no-transform", ...(res.req.httpVersionMajor < 2 && { connection: "keep-alive" }), "x-accel-buffering": "no" });
  if (first === undefined) res.flushHeaders();
  else res.write(first);
  const memberOf: Set<ServerResponse>[] = [];
  for (const key of keys) {
    const channel = CHANNEL_PREFIX + key;
    let set = streams.get(channel);
    if (set === undefined) {
      set = new Set();
      streams.set(channel, set);
      void subscriber?.subscribe(channel);
    }
    set.add(res);
    memberOf.push(set);
  }
  connections++;
  res.once("close", () => {
    connections--;
    for (const set of memberOf) set.delete(res);
  });
}

/** Reads a JSON request body; undefined when it is not JSON. */
function readJson(req: IncomingMessage, then: (message: Record<string, unknown> | undefined) => void): void {
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    let message: Record<string, unknown> | undefined;
    try {
      message = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Record<string, unknown>;
    } catch {
      message = undefined;
    }
    then(message);
  });
}

function answerRpc(req: IncomingMessage, res: ServerResponse, withStore: boolean): void {
  readJson(req, (message) => {
    const answer = (): void => {
      const body = JSON.stringify({ jsonrpc: "2.0", id: message?.id ?? null, result: {} });
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
      res.end(body);
    };
    if (!withStore) answer();
    else storedFor(message).then(answer, (error: unknown) => res.writeHead(502).end((error as Error).message));
  });
}

function relayRpc(relay: Relay | undefined, req: IncomingMessage, res: ServerResponse, withStore: boolean): void {
  readJson(req, (message) => {
    const answered =
      relay === undefined || message === undefined ? Promise.reject(new Error("no relay for this transport")) : withStore ? storedFor(message).then(() => relay.call(message)) : relay.call(message);
    answered.then(
      (answer) => {
        const body = JSON.stringify(answer);
        res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
        res.end(body);
      },
      (error: unknown) => res.writeHead(502).end((error as Error).message),
    );
  });
}

/** A `subscriptions/listen` request: a stream of the URIs it names, acknowledged with them. */
function openListen(req: IncomingMessage, res: ServerResponse, withStore: boolean): void {
  readJson(req, (message) => {
    const params = message?.params as { notifications?: { resourceSubscriptions?: unknown } } | undefined;
    const asked = params?.notifications?.resourceSubscriptions;
    const uris = Array.isArray(asked) ? asked.filter((uri): uri is string => typeof uri === "string") : [];
    const ack = JSON.stringify({ jsonrpc: "2.0", method: "notifications/subscriptions/acknowledged", params: { notifications: { resourceSubscriptions: uris } } });
    const open = (): void => openStream(uris, res, `event: message\ndata: ${ack}\n\n`);
    if (!withStore) {
      open();
      return;
    }
    stored("+", uris).then(
      () => {
        res.once("close", () => void stored("-", uris).catch(() => undefined));
        open();
      },
      (error: unknown) => res.writeHead(502).end((error as Error).message),
    );
  });
}

const handle = (req: IncomingMessage, res: ServerResponse): void => {
  const url = new URL(req.url ?? "/", "http://localhost");
  const withStore = url.pathname.startsWith("/store/");
  const path = withStore ? url.pathname.slice("/store".length) : url.pathname;
  if (req.method === "GET" && path === "/sse") {
    req.resume();
    openStream([url.searchParams.get("key") ?? ""], res);
  } else if (req.method === "POST" && path === "/rpc") {
    answerRpc(req, res, withStore);
  } else if (req.method === "POST" && path.startsWith("/relay/")) {
    relayRpc(relays.get(path.slice("/relay/".length)), req, res, withStore);
  } else if (req.method === "POST" && path === "/listen") {
    openListen(req, res, withStore);
  } else {
    req.resume();
    res.writeHead(404).end();
  }
};
const server = createServer(handle);
server.keepAliveTimeout = 5_000;
server.requestTimeout = 0;
/**
 * HTTP/2 without TLS on the same port, as the broker serves it, when asked (scenario 10 holds its
 * largest counts that way): only then, as reading each new connection's first bytes made the
 * baseline ~15-30 % slower where every request opens a connection (listen ×10: 1 825 and 2 057/s
 * with it, 2 743 and 2 331/s without, runs taking turns).
 */
let h2c: { closeAll(): void } | undefined;

const keepAlive = setInterval(() => {
  for (const set of streams.values()) for (const res of set) res.write(KEEP_ALIVE_FRAME);
}, KEEP_ALIVE_MS);
keepAlive.unref();

const shutdown = async (): Promise<void> => {
  server.closeAllConnections();
  h2c?.closeAll();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  subscriber?.disconnect();
  store?.disconnect();
  await Promise.all([...relays.values()].map((relay) => relay.close()));
  relays.clear();
};

const api: RawServerApi = {
  start: async ({ redisUrl, cluster, relays: transports, store: storeUrl, http2 }) => {
    if (http2 === true) h2c ??= serveH2cBeside(server, handle, { sniffTimeoutMs: 30_000, requestTimeoutMs: 0, idleTimeoutMs: server.keepAliveTimeout });
    for (const transport of transports ?? []) relays.set(transport, await startRelay(transport));
    if (storeUrl !== undefined) {
      const redis = new Redis(storeUrl, { lazyConnect: true, maxRetriesPerRequest: 1, enableAutoPipelining: true });
      await redis.connect();
      redis.defineCommand("rawStore", { numberOfKeys: 2, lua: STORE_SCRIPT });
      await redis.del(...STORE_KEYS);
      store = redis as StoreRedis;
    }
    const deliver = (channel: Buffer, message: Buffer): void => {
      const set = streams.get(channel.toString("latin1"));
      if (set === undefined || set.size === 0) return;
      const frame = frameOf(message.toString("utf8"));
      for (const res of set) res.write(frame);
    };
    if (cluster !== undefined) {
      // The keys' channels spread over the cluster's masters by slot, as a notifier on a Redis Cluster spreads its keys.
      const nodes = cluster.map((node) => ({ host: node.slice(0, node.lastIndexOf(":")), port: Number(node.slice(node.lastIndexOf(":") + 1)) }));
      const redis = new Cluster(nodes, { shardedSubscribers: true, lazyConnect: true, redisOptions: { maxRetriesPerRequest: 1 } });
      await redis.connect();
      redis.on("smessageBuffer", deliver);
      subscriber = { subscribe: (channel) => redis.ssubscribe(channel), disconnect: () => redis.disconnect() };
    } else if (redisUrl !== undefined) {
      const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
      await redis.connect();
      redis.on("messageBuffer", deliver);
      subscriber = redis;
    }
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    return { url: `http://127.0.0.1:${port}` };
  },
  usage: reportUsage,
  census: () => ({ connections, channels: streams.size }),
  stop: async () => {
    await shutdown();
    setTimeout(() => process.exit(0), 20);
  },
};

serveRpc(parentLink(), api);
exitWithParent(shutdown);
