import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { Queue } from "bullmq";
import { Redis as IORedis, type Redis } from "ioredis";
import { afterAll, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { ElsewhereJobError, type JobQueue } from "../../src/engine/jobs.js";
import type { BullJobQueueOptions } from "../../src/engine/redis/bullmq-job-queue.js";
import { createRedisEngine, type RedisEngine } from "../../src/engine/redis/redis-engine.js";
import { deleteKeys, freePort, testRedisUrl, uniquePrefix } from "../../src/testing/test-redis.js";
import { CHANNEL, type BusMessage } from "../../src/engine/bus.js";
import { redisEngineContracts } from "../contracts/redis-engine-contracts.js";

const url = await testRedisUrl();
const prefixes: string[] = [];
const engines: RedisEngine[] = [];

/** Engines sharing one fresh prefix: one cluster, as separate processes would see it. */
async function cluster(n: number, onInvalid: (channel: string, reason: string) => void = () => undefined): Promise<RedisEngine[]> {
  const keyPrefix = uniquePrefix("engine");
  prefixes.push(keyPrefix);
  const made = Array.from({ length: n }, (_, i) => createRedisEngine({ url, keyPrefix, instanceId: `${keyPrefix}${i}`, onInvalidMessage: onInvalid, onConnectionError: () => undefined }));
  await Promise.all(made.map((engine) => engine.connect()));
  engines.push(...made);
  return made;
}

afterAll(async () => {
  await Promise.all(queues.map((queue) => queue.close()));
  await Promise.all(engines.map((engine) => engine.close()));
  for (const prefix of prefixes) await deleteKeys(url, prefix);
});

const queues: JobQueue<number>[] = [];
let queueNumber = 0;
/** A job queue of its own (fresh prefix and name) on a fresh engine. */
async function jobQueue(options: Partial<Omit<BullJobQueueOptions<number>, "connect" | "prefix" | "name">> = {}): Promise<{ queue: JobQueue<number>; engine: RedisEngine; name: string }> {
  const [engine] = await cluster(1);
  const name = `q${++queueNumber}`;
  const queue = engine!.jobQueue<number>(name, { attempts: 1, backoffMs: 10, lockMs: 500, decode: (data) => z.number().parse(data), ...options });
  queues.push(queue);
  return { queue, engine: engine!, name };
}

redisEngineContracts("redis", cluster, async (options) => (await jobQueue(options)).queue);

describe("Redis registry audit", () => {
  it("finds sessions its principal index lost by scanning, and recounts from them", async () => {
    const [engine] = await cluster(1);
    const limits = { perSession: 10, perPrincipal: 10, total: 10 };
    await engine!.registry.add({ principal: "p:x", sessionId: "s/1", backendId: "b", uri: "u1" }, limits);
    await engine!.registry.add({ principal: "p:x", sessionId: "s/1", backendId: "b", uri: "u2" }, limits);
    await engine!.redis.del(engine!.keys.principalSessions("p:x"), engine!.keys.principals());
    await engine!.redis.hdel(engine!.keys.principalCounts(), "p:x");
    const report = await engine!.registry.audit();
    expect(report.repairs).toEqual([
      { scope: "principal", principal: "p:x", was: 0, now: 2 },
      { scope: "total", was: 2, now: 2 },
    ].filter((repair) => repair.was !== repair.now));
    expect(await engine!.redis.hget(engine!.keys.principalCounts(), "p:x")).toBe("2");
    expect(await engine!.redis.smembers(engine!.keys.principalSessions("p:x"))).toEqual([engine!.keys.session("p:x", "s/1")]);
  });
});

describe("Redis catalog store", () => {
  it("returns a stored body that does not decode as invalid, with no items, and a put replaces it", async () => {
    const [engine] = await cluster(1);
    await engine!.redis.hset(engine!.keys.catalogList("b", "tools"), "version", 3, "position", 9, "body", JSON.stringify({ items: "garbage" }));
    const stored = await engine!.catalog.get("b", "tools");
    expect(stored).toMatchObject({ version: 3, items: [], invalid: expect.stringContaining("items") });
    expect(await engine!.catalog.put("b", [{ kind: "tools", expected: 3, body: { items: [{ name: "t" }] } }], "me")).toMatchObject([{ version: 4, items: [{ name: "t" }] }]);
  });
});

describe("Redis positions after a loss", () => {
  it("goes on from above what this member handed out, for catalog changes too, and marks what may have been handed out twice", async () => {
    const [engine] = await cluster(1);
    const { updates, catalog, redis, keys } = engine!;
    const reserved = await updates.reserve();
    const put = async (expected: number) => (await catalog.put("b", [{ kind: "tools", expected, body: { items: [] } }], "me"))?.[0]?.position;
    expect(await put(0)).toBe(reserved + 1);
    // Redis loses the counter: this member's catalog change still comes after what it handed out.
    await redis.del(keys.positions());
    expect(await put(1)).toBe(reserved + 2);
    expect(await updates.lostUpTo()).toBe(0);
    // Raised after the loss: positions up to the floor may have been handed out twice meanwhile.
    await redis.set(keys.positions(), 3);
    await updates.raiseTo(reserved + 100);
    expect(await updates.lostUpTo()).toBe(reserved + 100);
    // The mark only grows.
    await updates.raiseTo(reserved + 50);
    expect(await updates.lostUpTo()).toBe(reserved + 100);
    expect(await updates.reserve()).toBe(reserved + 101);
    expect(await updates.publish({ kind: "resource.updated", v: 1, origin: "me", backendId: "b", uri: "u", at: 1, update: 1 }, ["u"])).toBe(reserved + 102);
  });
});

describe("Redis job queue", () => {
  it("hands a job whose member was killed mid-run to another member, with its data", async () => {
    const { queue, engine, name } = await jobQueue({ lockMs: 500 });
    const child = spawn(process.execPath, ["--import", "tsx", fileURLToPath(new URL("../fixtures/job-worker.ts", import.meta.url)), url, engine.keys.prefix, name], { stdio: ["ignore", "pipe", "inherit"] });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()));
    await vi.waitFor(() => expect(output).toContain("ready"), { timeout: 20_000 });
    await queue.schedule("k", 42, 0);
    await vi.waitFor(() => expect(output).toContain("started k 42"), { timeout: 10_000 });
    child.kill("SIGKILL");
    await exited;
    const runs: [string, number][] = [];
    queue.process(async (key, data) => {
      runs.push([key, data]);
    });
    await vi.waitFor(() => expect(runs).toEqual([["k", 42]]), { timeout: 15_000, interval: 50 });
    await vi.waitFor(async () => expect(await queue.pending()).toEqual([]));
  });

  it("gives a job whose member died to another member at once when it is reclaimed, long before its lock lapses", async () => {
    const { queue, engine, name } = await jobQueue({ lockMs: 500 });
    // The doomed member's lock lasts a minute: stalled-job recovery alone would not run it in time.
    const child = spawn(process.execPath, ["--import", "tsx", fileURLToPath(new URL("../fixtures/job-worker.ts", import.meta.url)), url, engine.keys.prefix, name, "60000"], { stdio: ["ignore", "pipe", "inherit"] });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()));
    await vi.waitFor(() => expect(output).toContain("ready"), { timeout: 20_000 });
    await queue.schedule("k", 7, 0);
    await vi.waitFor(() => expect(output).toContain("started k 7"), { timeout: 10_000 });
    child.kill("SIGKILL");
    await exited;
    const runs: [string, number][] = [];
    queue.process(async (key, data) => {
      runs.push([key, data]);
    });
    // Its key's later runs wait for it (deduplicated): the schedule below runs only after it.
    await queue.schedule("k", 8, 0);
    expect(await queue.reclaim("someone else")).toBe(0);
    expect(await queue.reclaim("doomed")).toBe(1);
    await vi.waitFor(() => expect(runs).toEqual([["k", 7], ["k", 8]]), { timeout: 5_000, interval: 50 });
  });

  it("hands a job a member cannot run (ElsewhereJobError) back to the queue, without using an attempt, for a member that can", async () => {
    const [a, b] = await cluster(2);
    const name = `q${++queueNumber}`;
    const failures: boolean[] = [];
    const options = { attempts: 1, backoffMs: 10, lockMs: 5_000, decode: (data: unknown) => z.number().parse(data), onError: (_key: string, _error: unknown, final: boolean) => failures.push(final) };
    const cannot = a!.jobQueue<number>(name, options);
    queues.push(cannot);
    const handedBack: number[] = [];
    cannot.process(async (_key, data) => {
      handedBack.push(data);
      throw new ElsewhereJobError("its backend is not connected here");
    });
    await cannot.schedule("k", 7, 0);
    await vi.waitFor(() => expect(handedBack.length).toBeGreaterThanOrEqual(2), { timeout: 10_000 });
    // One attempt only, and still not failed: handing back used none.
    expect((await cannot.stats()).failed).toBe(0);
    const can = b!.jobQueue<number>(name, options);
    queues.push(can);
    const runs: number[] = [];
    can.process(async (_key, data) => {
      runs.push(data);
    });
    await vi.waitFor(() => expect(runs).toEqual([7]), { timeout: 10_000, interval: 50 });
    expect(failures).toEqual([]);
  });

  it("gives back a job it still runs when it closes, after the grace, long before its lock lapses", async () => {
    const [a, b] = await cluster(2);
    const name = `q${++queueNumber}`;
    const options = { attempts: 1, backoffMs: 10, lockMs: 60_000, decode: (data: unknown) => z.number().parse(data) };
    const leaving = a!.jobQueue<number>(name, options);
    let started = false;
    // A job that does not finish (it waits on something the closing member no longer answers).
    leaving.process(() => {
      started = true;
      return new Promise<void>(() => undefined);
    });
    await leaving.schedule("k", 7, 0);
    await vi.waitFor(() => expect(started).toBe(true), { timeout: 10_000 });
    await leaving.close();
    const staying = b!.jobQueue<number>(name, options);
    queues.push(staying);
    const runs: [string, number][] = [];
    staying.process(async (key, data) => {
      runs.push([key, data]);
    });
    await vi.waitFor(() => expect(runs).toEqual([["k", 7]]), { timeout: 5_000, interval: 50 });
  }, 30_000);

  it("pauses taking jobs, with backoff, while Redis refuses them (out of memory), and takes them again after", async () => {
    // A Redis of this test's own: it is made to refuse every write.
    const port = await freePort();
    const server = spawn("redis-server", ["--bind", "127.0.0.1", "--port", String(port), "--save", "", "--appendonly", "no"], { stdio: "ignore" });
    const own = `redis://127.0.0.1:${port}`;
    const admin = new IORedis(own, { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => 100 });
    admin.on("error", () => undefined); // refused until the server listens
    const engine = createRedisEngine({ url: own, keyPrefix: "oom:", instanceId: "oom", onInvalidMessage: () => undefined, onConnectionError: () => undefined });
    try {
      await vi.waitFor(() => admin.connect(), { timeout: 10_000, interval: 100 });
      await engine.connect();
      const fetchErrors: number[] = [];
      const queue = engine.jobQueue<number>("q", { attempts: 1, backoffMs: 10, lockMs: 1_000, decode: (data) => z.number().parse(data), onFetchError: (_error, pauseMs) => fetchErrors.push(pauseMs) });
      // A repetition (as the members' housekeeping has) and a delayed run come due while Redis refuses writes.
      await queue.repeat("r", 3, 200);
      await queue.schedule("k", 2, 300);
      await admin.config("SET", "maxmemory-policy", "noeviction");
      await admin.config("SET", "maxmemory", "1");
      const runs: number[] = [];
      queue.process(async (_key, data) => {
        runs.push(data);
      });
      await new Promise((r) => setTimeout(r, 500));
      const commands = async () => Number(/total_commands_processed:(\d+)/.exec(await admin.info("stats"))?.[1]);
      const before = await commands();
      await new Promise((r) => setTimeout(r, 2_000));
      // BullMQ alone asked again at once: thousands of refused scripts a second.
      expect((await commands()) - before).toBeLessThan(200);
      expect(fetchErrors.slice(0, 2)).toEqual([250, 500]);
      await admin.config("SET", "maxmemory", "0");
      await vi.waitFor(() => expect(runs).toContain(2), { timeout: 10_000 });
      await queue.close();
    } finally {
      await engine.close().catch(() => undefined);
      admin.disconnect();
      server.kill("SIGKILL");
    }
  }, 40_000);

  it("fails a job whose payload does not decode, with the reason, without retrying it", async () => {
    const failures: { key: string; error: string; final: boolean }[] = [];
    const { queue, engine, name } = await jobQueue({ attempts: 5, onError: (key, error, final) => failures.push({ key, error: (error as Error).message, final }) });
    const runs: number[] = [];
    queue.process(async (_key, data) => {
      runs.push(data);
    });
    const raw = new Queue(name, { connection: (engine.redis as Redis).duplicate(), prefix: engine.keys.jobs() });
    await raw.add("run", { key: "k", data: "not a number" });
    await raw.add("run", { nokey: true });
    await vi.waitFor(async () => expect((await queue.stats()).failed).toBe(2));
    expect(runs).toEqual([]);
    expect(failures).toEqual([
      { key: "k", error: expect.stringContaining("does not decode"), final: true },
      { key: expect.any(String), error: "the job has no key", final: true },
    ]);
    const [failed] = await raw.getJobs(["failed"]);
    expect(failed?.failedReason).toMatch(/does not decode|no key/);
    await raw.close();
  });
});

const update: BusMessage = { kind: "resource.updated", v: 1, origin: "t", backendId: "b", key: "u", uri: "u", at: 1, update: 1, keys: 1, position: 1 };

describe("Redis engine", () => {
  it("drops and reports messages that do not decode, and keeps delivering", async () => {
    const invalid: string[] = [];
    const [a, b] = await cluster(2, (_channel, reason) => invalid.push(reason));
    const got: BusMessage[] = [];
    b!.bus.onMessage((_channel, message) => got.push(message));
    await b!.bus.subscribe("ch");
    await a!.redis.publish(a!.keys.channel("ch"), "{not json");
    await a!.redis.publish(a!.keys.channel("ch"), JSON.stringify({ kind: "resource.updated", v: 1 }));
    await a!.bus.publish("ch", update);
    await vi.waitFor(() => expect(got).toEqual([update]));
    expect(invalid).toHaveLength(2);
    expect(invalid[0]).toBe("not JSON");
  });

  it("delivers a burst of publishes issued in one tick, across channels, in issue order", async () => {
    const [a, b] = await cluster(2);
    const got: [string, number][] = [];
    b!.bus.onMessage((channel, message) => got.push([channel, message.kind === "resource.updated" ? message.at : -1]));
    await b!.bus.subscribe("x");
    await b!.bus.subscribe("y");
    const sent: [string, number][] = Array.from({ length: 500 }, (_, i) => [i % 3 === 0 ? "x" : "y", i]);
    const first = sent.slice(0, 300).map(([channel, at]) => a!.bus.publish(channel, { ...update, at }));
    await Promise.resolve();
    const second = sent.slice(300).map(([channel, at]) => a!.bus.publish(channel, { ...update, at }));
    await Promise.all([...first, ...second]);
    await vi.waitFor(() => expect(got).toHaveLength(sent.length));
    expect(got).toEqual(sent);
  });

  it("hands an instance its own messages back like anyone's, resource updates included", async () => {
    const [a, b] = await cluster(2);
    const [idA, idB] = [0, 1].map((i) => `${prefixes.at(-1)}${i}`);
    const gotA: BusMessage[] = [];
    const gotB: BusMessage[] = [];
    a!.bus.onMessage((_channel, message) => gotA.push(message));
    b!.bus.onMessage((_channel, message) => gotB.push(message));
    await a!.bus.subscribe("ch");
    await b!.bus.subscribe("ch");
    const fromA: BusMessage = { ...update, origin: idA!, update: 2 };
    const releaseFromA: BusMessage = { kind: "watch.release", v: 1, origin: idA!, backendId: "b", uri: "u" };
    const fromB: BusMessage = { ...update, origin: idB!, update: 3 };
    await a!.bus.publish("ch", fromA);
    await a!.bus.publish("ch", releaseFromA);
    await b!.bus.publish("ch", fromB);
    await vi.waitFor(() => expect(gotB).toEqual([fromA, releaseFromA, fromB]));
    await vi.waitFor(() => expect(gotA).toEqual([fromA, releaseFromA, fromB]));
  });

  it("rejects every publish of a burst when they cannot be written", async () => {
    const [a] = await cluster(1);
    a!.redis.disconnect();
    const results = await Promise.allSettled([a!.bus.publish("ch", update), a!.bus.publish("other", update)]);
    expect(results.map((r) => r.status)).toEqual(["rejected", "rejected"]);
  });

  it("keeps clusters with different prefixes apart", async () => {
    const [a] = await cluster(1);
    const [b] = await cluster(1);
    const got: BusMessage[] = [];
    b!.bus.onMessage((_channel, message) => got.push(message));
    await b!.bus.subscribe("ch");
    await a!.bus.publish("ch", update);
    await a!.registry.add({ principal: "p", sessionId: "s", backendId: "b", uri: "u" }, { perSession: 1, perPrincipal: 1, total: 1 });
    await b!.bus.publish("ch", { ...update, uri: "mine" });
    await vi.waitFor(() => expect(got).toHaveLength(1));
    expect(got[0]).toMatchObject({ uri: "mine" });
    expect(await b!.registry.wanted("b")).toEqual([]);
  });

  it("holds limits exactly when several instances add at once, and reports first to one of them", async () => {
    const members = await cluster(3);
    const limits = { perSession: 1_000, perPrincipal: 7, total: 1_000 };
    const outcomes = await Promise.all(
      Array.from({ length: 30 }, (_, i) => members[i % 3]!.registry.add({ principal: "p", sessionId: `s${i}`, backendId: "b", uri: "u" }, limits)),
    );
    expect(outcomes.filter((o) => o.status === "added")).toHaveLength(7);
    expect(outcomes.filter((o) => o.status === "added" && o.first)).toHaveLength(1);
    expect(outcomes.filter((o) => o.status === "limit")).toHaveLength(23);
    expect(await members[0]!.registry.count("b", "u")).toBe(7);
    const removals = await Promise.all(
      outcomes.flatMap((o, i) => (o.status === "added" ? [members[(i + 1) % 3]!.registry.remove({ principal: "p", sessionId: `s${i}`, backendId: "b", uri: "u" })] : [])),
    );
    expect(removals.filter((r) => r.last)).toHaveLength(1);
    expect(await members[0]!.registry.wanted("b")).toEqual([]);
  });

  it("stores URIs with any characters, and keeps each session's keys under its principal", async () => {
    const [engine] = await cluster(1);
    const uri = "file:///a b/ü/\u0000?x=1#frag";
    const ref = { principal: "user:a/b", sessionId: "s:1", backendId: "b", uri };
    expect(await engine!.registry.add(ref, { perSession: 5, perPrincipal: 5, total: 5 })).toEqual({ status: "added", first: true });
    expect(await engine!.registry.ofSession("user:a/b", "s:1")).toEqual([ref]);
    expect(await engine!.registry.ofSession("user:a", "b:s:1")).toEqual([]);
    expect(await engine!.registry.wanted("b")).toEqual([uri]);
    expect(engine!.keys.session("user:a/b", "s:1")).toContain(encodeURIComponent("user:a/b"));
  });

  it("reaps what the sessions of a dead instance held, once, and tells a presumed-dead instance so", async () => {
    const [dead, alive, also] = await cluster(3);
    const limits = { perSession: 10, perPrincipal: 10, total: 100 };
    const ref = (sessionId: string, uri: string) => ({ principal: "p", sessionId, backendId: "b", uri });
    expect(await dead!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: false });
    expect(await alive!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: false });
    expect(await also!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: false });
    await dead!.registry.add(ref("d1", "only-dead"), limits);
    await dead!.registry.add(ref("d1", "shared"), limits);
    await dead!.registry.add(ref("d2", "only-dead-2"), limits);
    await alive!.registry.add(ref("a1", "shared"), limits);
    expect(await alive!.registry.deadInstances(0)).toEqual([]);
    // Its heartbeat expires (Redis keeps time; expiring the key is what the TTL would do).
    await dead!.redis.pexpire(dead!.keys.instance(`${prefixes.at(-1)}0`), 1);
    await vi.waitFor(async () => expect(await dead!.redis.exists(dead!.keys.instance(`${prefixes.at(-1)}0`))).toBe(0));
    const deadId = `${prefixes.at(-1)}0`;
    // A suspect from the first look; dead once the grace has passed since.
    expect(await alive!.registry.deadInstances(60_000)).toEqual([]);
    expect(await alive!.registry.deadInstances(0)).toEqual([deadId]);
    const claims = await Promise.all([alive!.registry.claimInstance(deadId), also!.registry.claimInstance(deadId)]);
    expect(claims).toEqual([true, true]);
    const [reapedA, reapedB] = await Promise.all([alive!.registry.reapInstance(deadId), also!.registry.reapInstance(deadId)]);
    expect(await alive!.registry.deadInstances(0)).toEqual([]);
    expect([...reapedA, ...reapedB].map((r) => r.uri).sort()).toEqual(["only-dead", "only-dead-2"]);
    expect(await alive!.registry.wanted("b")).toEqual(["shared"]);
    expect(await alive!.registry.ofSession("p", "d1")).toEqual([]);
    // The principal's count is back to what the living hold: 9 more fit under perPrincipal 10.
    for (let i = 0; i < 9; i++) expect(await alive!.registry.add(ref("a2", `u${i}`), { ...limits, perSession: 100 })).toMatchObject({ status: "added" });
    expect(await alive!.registry.add(ref("a2", "u9"), { ...limits, perSession: 100 })).toMatchObject({ status: "limit", limit: "principal" });
    // Its next heartbeat tells it, once (and that its writes are gone: the reap forgot them).
    expect(await dead!.registry.heartbeat(60_000)).toEqual({ alive: false, lost: true });
    expect(await dead!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: false });
  });

  it("spares an instance whose heartbeat only expired (a stall, Redis restarted from an old snapshot): its next heartbeat within the grace keeps it alive, and it cannot be claimed then", async () => {
    const [stalled, other] = await cluster(2);
    const stalledId = `${prefixes.at(-1)}0`;
    expect(await stalled!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: false });
    expect(await other!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: false });
    await stalled!.redis.del(stalled!.keys.instance(stalledId));
    // Seen without its heartbeat: a suspect, not dead yet.
    expect(await other!.registry.deadInstances(60_000)).toEqual([]);
    expect(await stalled!.redis.hexists(stalled!.keys.suspects(), stalledId)).toBe(1);
    // It heartbeats again: alive (nobody claimed it), no longer a suspect, and not to be claimed.
    expect(await stalled!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: false });
    expect(await other!.registry.deadInstances(0)).toEqual([]);
    expect(await stalled!.redis.hexists(stalled!.keys.suspects(), stalledId)).toBe(0);
    expect(await other!.registry.claimInstance(stalledId)).toBe(false);
    expect(await stalled!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: false });
  });

  it("lets a preferred member (a worker) take a lease from one that is not, and keeps the others off while it is alive", async () => {
    const [broker, worker, other] = await cluster(3);
    const [idBroker, idWorker, idOther] = [0, 1, 2].map((i) => `${prefixes.at(-1)}${i}`) as [string, string, string];
    for (const [member, id] of [[broker, idBroker], [worker, idWorker], [other, idOther]] as const) await member!.bus.subscribe(CHANNEL.replies(id));
    expect(await broker!.leases.acquire("backend:p", idBroker, 1_000)).toBe(true);
    // A preferred member takes it over, the holder alive or not; but not while it only asks for free leases (just started).
    expect(await worker!.leases.acquire("backend:p", idWorker, 1_000, { preferred: true, takeOver: false })).toBe(false);
    expect(await worker!.leases.acquire("backend:p", idWorker, 1_000, { preferred: true })).toBe(true);
    expect(await broker!.leases.renew("backend:p", idBroker, 1_000)).toBe(false);
    expect(await worker!.leases.renew("backend:p", idWorker, 1_000, { preferred: true })).toBe(true);
    // A preferred member does not take a lease from another preferred one that is alive.
    expect(await other!.leases.acquire("backend:p", idOther, 1_000, { preferred: true })).toBe(false);
    // A member that is not preferred takes no lease while a preferred one competing for it is alive: not even a free one.
    await broker!.redis.del(broker!.keys.lease("backend:p"));
    expect(await broker!.leases.acquire("backend:p", idBroker, 1_000)).toBe(false);
    expect(await worker!.leases.acquire("backend:p", idWorker, 1_000, { preferred: true })).toBe(true);
    // The worker dies (its connections close): once it missed a renewal, another preferred member
    // takes its lease, and with none alive, any member.
    await worker!.bus.unsubscribe(CHANNEL.replies(idWorker));
    expect(await other!.leases.acquire("backend:p", idOther, 1_000, { preferred: true })).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(await broker!.leases.acquire("backend:p", idBroker, 1_000)).toBe(false);
    expect(await other!.leases.acquire("backend:p", idOther, 1_000, { preferred: true })).toBe(true);
    await other!.bus.unsubscribe(CHANNEL.replies(idOther));
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(await broker!.leases.acquire("backend:p", idBroker, 1_000)).toBe(true);
    // A preferred member whose backend connection is down releases, which takes it out of the running.
    await worker!.bus.subscribe(CHANNEL.replies(idWorker));
    expect(await worker!.leases.acquire("backend:r", idWorker, 1_000, { preferred: true })).toBe(true);
    await worker!.leases.release("backend:r", idWorker);
    expect(await broker!.leases.acquire("backend:r", idBroker, 1_000)).toBe(true);
  });

  it("fences a session's subscriptions by the epoch it is held at: a member that lost it changes nothing", async () => {
    const [a, b] = await cluster(2);
    const limits = { perSession: 10, perPrincipal: 10, total: 100 };
    const ref = (uri: string, epoch?: number) => ({ principal: "p", sessionId: "s", backendId: "b", uri, ...(epoch !== undefined && { epoch }) });
    const [idA, idB] = [`${prefixes.at(-1)}0`, `${prefixes.at(-1)}1`];
    await a!.sessions.create({ sessionId: "s", principal: "p", protocolVersion: "2025-11-25" }, idA, Date.now());
    expect(await a!.registry.add(ref("u1", 1), limits)).toEqual({ status: "added", first: true });
    // Member b takes the session over (epoch 2): member a, still at 1, can neither add nor remove.
    expect((await b!.sessions.adopt({ principal: "p", sessionId: "s" }, idB, Date.now()))?.record.epoch).toBe(2);
    expect(await a!.registry.add(ref("u2", 1), limits)).toEqual({ status: "moved" });
    expect(await a!.registry.remove(ref("u1", 1))).toEqual({ removed: false, last: false, moved: true });
    expect(await b!.registry.add(ref("u2", 2), limits)).toEqual({ status: "added", first: true });
    expect((await b!.registry.ofSession("p", "s")).map((r) => r.uri).sort()).toEqual(["u1", "u2"]);
    // Only b's instance set names the session now: a's death would not reap what it holds.
    expect(await a!.redis.sismember(a!.keys.instanceSessions(idA), JSON.stringify(["p", "s"]))).toBe(0);
    expect(await a!.redis.sismember(a!.keys.instanceSessions(idB), JSON.stringify(["p", "s"]))).toBe(1);
    // The session ended (its record is gone): no add, but a fenced remove still cleans up.
    await b!.sessions.delete({ principal: "p", sessionId: "s" });
    expect(await b!.registry.add(ref("u3", 2), limits)).toEqual({ status: "moved" });
    expect(await b!.registry.remove(ref("u1", 2))).toEqual({ removed: true, last: true });
    // Without a fence (listen streams, the cluster's jobs) nothing is checked.
    expect(await a!.registry.remove(ref("u2"))).toEqual({ removed: true, last: true });
  });

  it("tells an instance whose writes Redis lost since its last heartbeat (restarted empty, or from an older snapshot), and only then", async () => {
    const [member] = await cluster(1);
    const id = `${prefixes.at(-1)}0`;
    expect(await member!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: false });
    const older = await member!.redis.get(member!.keys.instanceSequence(id));
    expect(await member!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: false });
    // Its heartbeat expired meanwhile (a stall): nothing was lost.
    await member!.redis.del(member!.keys.instance(id));
    expect(await member!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: false });
    // A heartbeat that failed on the way back but landed left a larger number: no loss either.
    await member!.redis.incrby(member!.keys.instanceSequence(id), 5);
    expect(await member!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: false });
    // Redis came back from a snapshot taken before the last heartbeat.
    await member!.redis.set(member!.keys.instanceSequence(id), older ?? "");
    expect(await member!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: true });
    expect(await member!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: false });
    // Redis came back empty.
    await member!.redis.del(member!.keys.instanceSequence(id), member!.keys.instance(id));
    expect(await member!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: true });
  });

  it("reaps nothing of a dead instance once it read the cluster's claim (it came back): what it holds is its own again", async () => {
    const [a, reaper] = await cluster(2);
    const limits = { perSession: 10, perPrincipal: 10, total: 100 };
    const idA = `${prefixes.at(-1)}0`;
    expect(await a!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: false });
    await a!.sessions.create({ sessionId: "s", principal: "p", protocolVersion: "2025-11-25" }, idA, Date.now());
    expect(await a!.registry.add({ principal: "p", sessionId: "s", backendId: "b", uri: "u", epoch: 1 }, limits)).toEqual({ status: "added", first: true });
    await a!.registry.add({ principal: "p", sessionId: "listen-1", backendId: "b", uri: "v" }, limits);
    await a!.redis.del(a!.keys.instance(idA));
    expect(await reaper!.registry.claimInstance(idA)).toBe(true);
    // A heartbeats before the reaper got to its sessions: it is told, and what it holds is its own.
    expect(await a!.registry.heartbeat(60_000)).toEqual({ alive: false, lost: false });
    await a!.redis.del(a!.keys.instance(idA));
    expect(await reaper!.sessions.orphan(idA, 60_000)).toEqual([]);
    expect(await reaper!.registry.reapInstance(idA)).toEqual([]);
    expect((await a!.sessions.get({ principal: "p", sessionId: "s" }))?.owner).toBe(idA);
    expect((await a!.registry.wanted("b")).sort()).toEqual(["u", "v"]);
  });

  it("does not reap a session another member holds, though a stale entry of the dead one still names it", async () => {
    const [a, b, c] = await cluster(3);
    const limits = { perSession: 10, perPrincipal: 10, total: 100 };
    const ref = (uri: string, epoch: number) => ({ principal: "p", sessionId: "s", backendId: "b", uri, epoch });
    const [idA, idB] = [`${prefixes.at(-1)}0`, `${prefixes.at(-1)}1`];
    for (const member of [a, b, c]) expect(await member!.registry.heartbeat(60_000)).toEqual({ alive: true, lost: false });
    await a!.sessions.create({ sessionId: "s", principal: "p", protocolVersion: "2025-11-25" }, idA, Date.now());
    expect(await a!.registry.add(ref("u1", 1), limits)).toEqual({ status: "added", first: true });
    // Member a lets the session go (a graceful stop), and a subscribe of it still lands after that,
    // at the epoch it was held at: a's set names the session again.
    await a!.sessions.letGo({ principal: "p", sessionId: "s" }, idA, 1, 60_000);
    expect(await a!.registry.add(ref("u2", 1), limits)).toEqual({ status: "added", first: true });
    // Member b adopts it; then a dies.
    expect((await b!.sessions.adopt({ principal: "p", sessionId: "s" }, idB, Date.now()))?.record.epoch).toBe(2);
    await a!.redis.del(a!.keys.instance(idA));
    expect(await c!.registry.reapInstance(idA)).toEqual([]);
    // b's session keeps everything it holds, and a's set no longer names it.
    expect((await b!.registry.ofSession("p", "s")).map((r) => r.uri).sort()).toEqual(["u1", "u2"]);
    expect((await b!.registry.wanted("b")).sort()).toEqual(["u1", "u2"]);
    expect(await a!.redis.sismember(a!.keys.instanceSessions(idA), JSON.stringify(["p", "s"]))).toBe(0);
  });

  it("stamps an update published right after its key's watch began: the watch's start never lands after it", async () => {
    const [engine] = await cluster(1);
    const update = { kind: "resource.updated", v: 1, origin: "o", backendId: "b", uri: "k", at: Date.now(), update: 1 } as unknown as Parameters<RedisEngine["updates"]["publish"]>[0];
    // As a watcher does: the subscribe's answer starts the watch, and the backend's first update
    // for it comes in the same turn of the event loop.
    const [, position] = await Promise.all([engine!.updates.watched("b", "k"), engine!.updates.publish(update, ["k"])]);
    const [stamp] = await engine!.updates.stamps("b", ["k"]);
    expect(stamp?.updated).toBe(position);
    expect(stamp!.since).toBeLessThan(position);
  });

  it("keeps a new watch's start when the previous watch's end was sent just before it", async () => {
    const [engine] = await cluster(1);
    await engine!.updates.watched("b", "k");
    // As a watcher does: the release ends the watch (not awaited), and a subscribe watches the key again at once.
    await Promise.all([engine!.updates.unwatched("b", "k"), engine!.updates.watched("b", "k")]);
    const [stamp] = await engine!.updates.stamps("b", ["k"]);
    expect(stamp?.since).toBeDefined();
  });

  it("never publishes at a position below its own last one, even when the counter was lost", async () => {
    const [engine] = await cluster(1);
    const update = { kind: "resource.updated", v: 1, origin: "o", backendId: "b", uri: "u" } as unknown as Parameters<RedisEngine["updates"]["publish"]>[0];
    await engine!.updates.publish(update, ["u"]);
    const last = await engine!.updates.publish(update, ["u"]);
    // Redis restarted without its data: the counter is gone before any member wrote a floor back.
    await engine!.redis.del(engine!.keys.positions());
    expect(await engine!.updates.publish(update, ["u"])).toBe(last + 1);
    expect(await engine!.updates.current()).toBe(last + 1);
  });

  it("keeps an instance's session set to the sessions that hold something", async () => {
    const [engine] = await cluster(1);
    const limits = { perSession: 10, perPrincipal: 10, total: 100 };
    await engine!.registry.add({ principal: "p", sessionId: "s", backendId: "b", uri: "u" }, limits);
    await engine!.registry.remove({ principal: "p", sessionId: "s", backendId: "b", uri: "u" });
    expect(await engine!.redis.scard(engine!.keys.instanceSessions(`${prefixes.at(-1)}0`))).toBe(0);
  });

  it("reports a gap after a connection was lost, and delivers again after it", async () => {
    const [a, b] = await cluster(2);
    const got: BusMessage[] = [];
    const gaps: string[] = [];
    b!.bus.onMessage((_channel, message) => got.push(message));
    b!.bus.onGap((side) => gaps.push(side));
    await b!.bus.subscribe("ch");
    // Kill engine b's subscriber connection, found by its name.
    const list = String(await a!.redis.client("LIST"));
    const line = list.split("\n").find((l) => l.includes(`name=mcp-broker:${prefixes.at(-1)}1:subscriber `));
    const id = /id=(\d+)/.exec(line ?? "")?.[1];
    expect(id).toBeDefined();
    await a!.redis.client("KILL", "ID", id as string);
    await vi.waitFor(() => expect(gaps).toEqual(["receive"]), { timeout: 5_000 });
    await vi.waitFor(
      async () => {
        await a!.bus.publish("ch", update);
        expect(got.length).toBeGreaterThan(0);
      },
      { timeout: 5_000, interval: 100 },
    );
    // The publishing connection: publishes may have failed meanwhile.
    const commands = list.split("\n").find((l) => l.includes(`name=mcp-broker:${prefixes.at(-1)}1:commands `));
    await a!.redis.client("KILL", "ID", /id=(\d+)/.exec(commands ?? "")?.[1] as string);
    await vi.waitFor(() => expect(gaps).toEqual(["receive", "publish-lost", "publish"]), { timeout: 5_000 });
  });
});
