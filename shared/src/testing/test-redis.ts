import { spawn, type ChildProcess } from "node:child_process";
import { createServer } from "node:net";
import { Cluster, Redis } from "ioredis";

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

/** Whether `port` can be listened on now. */
async function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

export async function freePort(): Promise<number> {
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
    child = spawnWatched("redis-server", ["--bind", "127.0.0.1", "--port", String(port), "--save", "", "--appendonly", "no"]);
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

/** A Redis Cluster for tests: its seed nodes (`host:port`), and its processes when the tests started it. */
export interface TestRedisCluster {
  /** Every node, masters first as created (`127.0.0.1:port`). */
  readonly nodes: string[];
  /** The node processes by `host:port` (empty when the cluster came from `REDIS_CLUSTER_NODES`). */
  readonly processes: ReadonlyMap<string, ChildProcess>;
  /** Kills a node of a cluster the tests started outright (SIGKILL), as a crash would. */
  readonly kill: (node: string) => Promise<void>;
}

/**
 * Runs `command` under a shell that kills it when this process is gone, however it went (the
 * test runner kills its workers with signals, which skip exit handlers: servers left behind
 * would pile up, each taking CPU). Killing the returned process (the shell) stops it too.
 */
function spawnWatched(command: string, args: string[]): ChildProcess {
  const watch = `"$@" & child=$!; trap 'kill $child 2>/dev/null; exit' TERM INT HUP; while kill -0 ${process.pid} 2>/dev/null && kill -0 $child 2>/dev/null; do sleep 0.5; done; kill $child 2>/dev/null; wait $child`;
  return spawn("sh", ["-c", watch, "sh", command, ...args], { stdio: "ignore" });
}

let cluster: Promise<TestRedisCluster> | undefined;

/**
 * Where tests find a Redis Cluster: `REDIS_CLUSTER_NODES` (seeds, `host:port,...`), or one started
 * for this process from `redis-server` with `cluster-enabled yes` on loopback ports: three masters
 * with a replica each, joined with `redis-cli --cluster create`, ready once every node reports
 * `cluster_state:ok`. No `redis-server` is an error, not a skip.
 */
export function testRedisCluster(): Promise<TestRedisCluster> {
  cluster ??= locateCluster();
  return cluster;
}

async function locateCluster(): Promise<TestRedisCluster> {
  const fromEnv = process.env.REDIS_CLUSTER_NODES;
  if (fromEnv !== undefined && fromEnv !== "") {
    return {
      nodes: fromEnv.split(",").map((node) => node.trim()),
      processes: new Map(),
      kill: () => Promise.reject(new Error("the cluster of REDIS_CLUSTER_NODES was not started by the tests")),
    };
  }
  const { mkdtemp } = await import("node:fs/promises");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const dir = await mkdtemp(join(tmpdir(), "redis-cluster-"));
  const processes = new Map<string, ChildProcess>();
  const { rmSync } = await import("node:fs");
  process.once("exit", () => {
    // The shells stop their servers (a SIGKILL would leave the servers running without them).
    for (const child of processes.values()) child.kill("SIGTERM");
    rmSync(dir, { recursive: true, force: true });
  });
  // Each node on a port whose cluster bus port (+10000) is free too; one that does not come up
  // (a port taken meanwhile) is started again on another.
  for (let attempt = 0; processes.size < 6; attempt++) {
    if (attempt > 20) throw new Error("could not start the six redis-server nodes of the test Redis Cluster");
    const port = await freePort();
    if (port >= 55_000 || processes.has(`127.0.0.1:${port}`) || !(await isFree(port + 10_000))) continue;
    const child = spawnWatched("redis-server", [
      "--bind",
      "127.0.0.1",
      "--port",
      String(port),
      "--save",
      "",
      "--appendonly",
      "no",
      "--cluster-enabled",
      "yes",
      "--cluster-config-file",
      join(dir, `nodes-${port}.conf`),
      "--cluster-node-timeout",
      "1000",
      "--dir",
      dir,
    ]);
    const spawned = await new Promise<boolean>((resolve) => {
      child.once("error", () => resolve(false));
      child.once("spawn", () => resolve(true));
    });
    if (!spawned) throw new Error("No Redis Cluster for the tests: set REDIS_CLUSTER_NODES, or install redis-server (and redis-cli)");
    let up = false;
    for (let i = 0; i < 30 && child.exitCode === null && !up; i++) {
      up = await answers(`redis://127.0.0.1:${port}`);
      if (!up) await new Promise((r) => setTimeout(r, 100));
    }
    if (up) processes.set(`127.0.0.1:${port}`, child);
    else child.kill("SIGTERM");
  }
  const nodes = [...processes.keys()];
  const create = spawn("redis-cli", ["--cluster", "create", ...nodes, "--cluster-replicas", "1", "--cluster-yes"], { stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  create.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  create.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => {
    create.once("error", () => resolve(-1));
    create.once("exit", resolve);
  });
  if (code !== 0) throw new Error(`redis-cli --cluster create failed (${code}): ${output.slice(-500)}`);
  await waitForClusterOk(nodes);
  return { nodes, processes, kill: killNode };
}

/** Waits until every node in `nodes` that answers says `cluster_state:ok` and knows every slot. */
export async function waitForClusterOk(nodes: readonly string[], timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let ok = true;
    for (const node of nodes) {
      const redis = new Redis(`redis://${node}`, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1_000 });
      redis.on("error", () => undefined);
      try {
        await redis.connect();
        const info = await redis.cluster("INFO");
        if (!info.includes("cluster_state:ok") || !info.includes("cluster_slots_assigned:16384")) ok = false;
      } catch {
        // A node that is down (killed by a failover test) does not count.
      } finally {
        redis.disconnect();
      }
    }
    if (ok) return;
    if (Date.now() > deadline) throw new Error("the test Redis Cluster did not reach cluster_state:ok");
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Deletes every key under `prefix` on a Redis Cluster (the engine's keys there are under `{prefix}`). */
export async function deleteClusterKeys(nodes: readonly string[], prefix: string): Promise<void> {
  const cluster = new Cluster(nodes.map((node) => ({ host: node.slice(0, node.lastIndexOf(":")), port: Number(node.slice(node.lastIndexOf(":") + 1)) })), { lazyConnect: true, clusterRetryStrategy: () => null });
  cluster.on("error", () => undefined);
  try {
    await cluster.connect();
    const pattern = `${`{${prefix}}`.replace(/[*?[\]\\]/g, "\\$&")}*`;
    for (const node of cluster.nodes("master")) {
      let cursor = "0";
      do {
        const [next, keys] = await node.scan(cursor, "MATCH", pattern, "COUNT", 1000);
        cursor = next;
        // Keys of one hash tag share a slot: one DEL takes them all.
        if (keys.length > 0) await node.del(...keys);
      } while (cursor !== "0");
    }
  } finally {
    cluster.disconnect();
  }
}

/** SIGKILLs the redis-server on `node` by the process id it reports. */
async function killNode(node: string): Promise<void> {
  const redis = new Redis(`redis://${node}`, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  redis.on("error", () => undefined);
  try {
    await redis.connect();
    const pid = Number(/process_id:(\d+)/.exec(await redis.info("server"))?.[1]);
    process.kill(pid, "SIGKILL");
  } finally {
    redis.disconnect();
  }
}
