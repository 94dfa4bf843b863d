import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { afterEach, expect, it } from "vitest";
import { within } from "../../src/clock.js";
import { createRedisEngine } from "../../src/engine/redis/redis-engine.js";
import { freePort } from "../../src/testing/test-redis.js";

let node: ChildProcess | undefined;
let dir: string | undefined;

afterEach(async () => {
  node?.kill("SIGKILL");
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  node = undefined;
  dir = undefined;
});

/** A Redis of its own for this test (one node; with `cluster`, a one-node cluster serving every slot), to be killed. */
async function ownRedis(cluster: boolean): Promise<string> {
  const port = await freePort();
  dir = await mkdtemp(join(tmpdir(), "abandon-"));
  node = spawn("redis-server", ["--bind", "127.0.0.1", "--port", String(port), "--save", "", "--appendonly", "no", ...(cluster ? ["--cluster-enabled", "yes", "--cluster-config-file", join(dir, "nodes.conf"), "--cluster-announce-ip", "127.0.0.1"] : [])], { stdio: "ignore" });
  let admin: Redis | undefined;
  for (let i = 0; admin === undefined; i++) {
    const attempt = new Redis({ port, host: "127.0.0.1", lazyConnect: true, retryStrategy: () => null });
    attempt.on("error", () => undefined);
    try {
      await attempt.connect();
      admin = attempt;
    } catch (error) {
      attempt.disconnect();
      if (i > 50) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  try {
    if (cluster) {
      await admin.call("CLUSTER", "ADDSLOTSRANGE", "0", "16383");
      while (!String(await admin.call("CLUSTER", "INFO")).includes("cluster_state:ok")) await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } finally {
    admin.disconnect();
  }
  return `127.0.0.1:${port}`;
}

it.each([
  { on: "one Redis", cluster: false },
  { on: "a Redis Cluster", cluster: true },
])("fails what waits for a Redis that went away at once when the engine is abandoned ($on)", async ({ cluster }) => {
  const address = await ownRedis(cluster);
  const engine = createRedisEngine({
    ...(cluster ? { cluster: [address] } : { url: `redis://${address}` }),
    keyPrefix: "abandon:",
    instanceId: "abandon",
    onInvalidMessage: () => undefined,
    onConnectionError: () => undefined,
  });
  await engine.connect();
  node?.kill("SIGKILL");
  await new Promise((resolve) => setTimeout(resolve, 500));
  // Issued while nothing answers: the client holds it and tries to reconnect.
  const waiting = engine.redis.get("k").then(
    () => "answered",
    () => "failed",
  );
  await new Promise((resolve) => setTimeout(resolve, 300));
  engine.abandon();
  // A cluster client with no node connected kept it for ever: a broker stopping while its Redis Cluster was down never exited.
  expect(await within(waiting, 2_000, "still waiting")).toBe("failed");
}, 30_000);
