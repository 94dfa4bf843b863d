import { spawn, type ChildProcess } from "node:child_process";
import { createServer } from "node:net";
import { Redis } from "ioredis";

/**
 * Where tests find Redis, in this order: `REDIS_URL`; a Redis answering on 127.0.0.1:6379; a
 * `redis-server` binary started on a free port for this process; a testcontainers Redis where a
 * Docker engine exists. No Redis at all is an error, not a skip: the Redis engine's tests are
 * what proves it.
 */
let found: Promise<string> | undefined;

export function testRedisUrl(): Promise<string> {
  found ??= locate();
  return found;
}

/** A key prefix no other test (or run) uses. */
export function uniquePrefix(name: string): string {
  return `test:${name}:${process.pid}:${Math.random().toString(36).slice(2, 10)}:`;
}

/** Deletes every key under `prefix` (tests and bench runs clean up after themselves on a shared Redis). */
export async function deleteKeys(url: string, prefix: string): Promise<void> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null, connectTimeout: 2_000 });
  redis.on("error", () => undefined);
  try {
    await redis.connect();
    const pattern = `${prefix.replace(/[*?[\]\\]/g, "\\$&")}*`;
    let cursor = "0";
    do {
      const [next, keys] = await redis.scan(cursor, "MATCH", pattern, "COUNT", 1000);
      cursor = next;
      if (keys.length > 0) await redis.del(...keys);
    } while (cursor !== "0");
  } finally {
    redis.disconnect();
  }
}

async function answers(url: string): Promise<boolean> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1_000 });
  redis.on("error", () => undefined);
  try {
    await redis.connect();
    return (await redis.ping()) === "PONG";
  } catch {
    return false;
  } finally {
    redis.disconnect();
  }
}

async function locate(): Promise<string> {
  const fromEnv = process.env.REDIS_URL;
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
  const local = "redis://127.0.0.1:6379";
  if (await answers(local)) return local;
  const started = await startRedisServer();
  if (started !== undefined) return started;
  const container = await startContainer();
  if (container !== undefined) return container;
  throw new Error("No Redis for the tests: set REDIS_URL, run redis-server on 127.0.0.1:6379, install redis-server, or run a Docker engine");
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

async function startRedisServer(): Promise<string | undefined> {
  const port = await freePort();
  let child: ChildProcess;
  try {
    child = spawn("redis-server", ["--bind", "127.0.0.1", "--port", String(port), "--save", "", "--appendonly", "no"], { stdio: "ignore" });
  } catch {
    return undefined;
  }
  const spawned = await new Promise<boolean>((resolve) => {
    child.once("error", () => resolve(false));
    child.once("spawn", () => resolve(true));
  });
  if (!spawned) return undefined;
  process.once("exit", () => child.kill());
  const url = `redis://127.0.0.1:${port}`;
  for (let i = 0; i < 50; i++) {
    if (await answers(url)) return url;
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill();
  return undefined;
}

async function startContainer(): Promise<string | undefined> {
  try {
    const { GenericContainer, Wait } = await import("testcontainers");
    const container = await new GenericContainer("redis:7-alpine").withExposedPorts(6379).withWaitStrategy(Wait.forLogMessage("Ready to accept connections")).start();
    process.once("exit", () => void container.stop());
    return `redis://${container.getHost()}:${container.getMappedPort(6379)}`;
  } catch {
    return undefined;
  }
}
