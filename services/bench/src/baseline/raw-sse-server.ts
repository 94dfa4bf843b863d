/**
 * The baseline server: what a hand-written notifier on this machine does with the same load, no
 * MCP. `GET /sse?key=K` opens an SSE stream for key K; a message on Redis channel `bench:r:K` (its
 * payload is the update URI) is encoded once into the same JSON-RPC notification frame the broker
 * sends and written to every stream of K. `POST /rpc` answers any JSON-RPC request with `{}` (the
 * floor for request/response cost). One keep-alive comment goes to every stream every 15 s, like
 * the broker's default.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Redis } from "ioredis";
import { parentLink } from "../core/links.js";
import { exitWithParent } from "../core/process-group.js";
import { reportUsage } from "../core/process-usage.js";
import { serveRpc } from "../core/rpc.js";
import type { RawServerApi } from "./raw-api.js";

const CHANNEL_PREFIX = "bench:r:";
const KEEP_ALIVE_MS = 15_000;
const KEEP_ALIVE_FRAME = Buffer.from(": keep-alive\n\n");

const streams = new Map<string, Set<ServerResponse>>();
let connections = 0;
let subscriber: Redis | undefined;

function frameOf(uri: string): Buffer {
  return Buffer.from(`event: message\ndata: {"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":${JSON.stringify(uri)}}}\n\n`);
}

function openStream(key: string, res: ServerResponse): void {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache, no-transform", connection: "keep-alive", "x-accel-buffering": "no" });
  res.flushHeaders();
  const channel = CHANNEL_PREFIX + key;
  let set = streams.get(channel);
  if (set === undefined) {
    set = new Set();
    streams.set(channel, set);
    void subscriber?.subscribe(channel);
  }
  set.add(res);
  connections++;
  const members = set;
  res.once("close", () => {
    connections--;
    members.delete(res);
  });
}

function answerRpc(req: IncomingMessage, res: ServerResponse): void {
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    let id: unknown = null;
    try {
      id = (JSON.parse(Buffer.concat(chunks).toString("utf8")) as { id?: unknown }).id ?? null;
    } catch {
      id = null;
    }
    const body = JSON.stringify({ jsonrpc: "2.0", id, result: {} });
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    res.end(body);
  });
}

const server = createServer((req, res) => {
  const url = new URL(req.url ?? "/", "http://localhost");
  if (req.method === "GET" && url.pathname === "/sse") {
    req.resume();
    openStream(url.searchParams.get("key") ?? "", res);
  } else if (req.method === "POST" && url.pathname === "/rpc") {
    answerRpc(req, res);
  } else {
    req.resume();
    res.writeHead(404).end();
  }
});
server.keepAliveTimeout = 5_000;
server.requestTimeout = 0;

const keepAlive = setInterval(() => {
  for (const set of streams.values()) for (const res of set) res.write(KEEP_ALIVE_FRAME);
}, KEEP_ALIVE_MS);
keepAlive.unref();

const shutdown = async (): Promise<void> => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  subscriber?.disconnect();
};

const api: RawServerApi = {
  start: async ({ redisUrl }) => {
    if (redisUrl !== undefined) {
      const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
      await redis.connect();
      redis.on("messageBuffer", (channel: Buffer, message: Buffer) => {
        const set = streams.get(channel.toString("latin1"));
        if (set === undefined || set.size === 0) return;
        const frame = frameOf(message.toString("utf8"));
        for (const res of set) res.write(frame);
      });
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
