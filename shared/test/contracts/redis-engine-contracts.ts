import { expect, vi } from "vitest";
import type { RedisEngine } from "../../src/engine/redis/redis-engine.js";
import type { BullJobQueueOptions } from "../../src/engine/redis/bullmq-job-queue.js";
import type { JobQueue } from "../../src/engine/jobs.js";
import { busContract, catalogStoreContract, jobQueueContract, leasesContract, registryContract, sessionStoreContract, updateLogContract } from "./engine-contracts.js";

type QueueOptions = Partial<Omit<BullJobQueueOptions<number>, "connect" | "prefix" | "name">>;

/**
 * Every engine contract on Redis engines that `members(n)` makes (n engines sharing one fresh
 * prefix: one cluster, as separate processes would see it), on one Redis or on a Redis Cluster.
 * `jobQueue` makes a queue of its own (fresh prefix and name).
 */
export function redisEngineContracts(name: string, members: (n: number) => Promise<RedisEngine[]>, jobQueue: (options: QueueOptions) => Promise<JobQueue<number>>): void {
  const elapse = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
  busContract(name, async () => {
    const [a, b] = await members(2);
    return [a!.bus, b!.bus];
  });
  registryContract(name, async () => {
    const [engine] = await members(1);
    return Object.assign(engine!.registry, {
      async corrupt() {
        await engine!.redis.hset(engine!.keys.principalCounts(), "p", 99);
        await engine!.redis.set(engine!.keys.total(), 7);
      },
    });
  });
  catalogStoreContract(name, async () => {
    const [a, b] = await members(2);
    return { store: a!.catalog, bus: b!.bus };
  });
  sessionStoreContract(name, async () => ({ store: (await members(1))[0]!.sessions, elapse }));
  updateLogContract(name, async () => {
    const [a, b] = await members(2);
    return { log: a!.updates, bus: b!.bus, store: a!.catalog };
  });
  leasesContract(name, async () => ({ leases: (await members(1))[0]!.leases, elapse }));
  jobQueueContract(`${name} (BullMQ)`, {
    make: jobQueue,
    until: (predicate, what) => vi.waitFor(async () => expect(await predicate(), what).toBe(true), { timeout: 15_000, interval: 20 }),
    elapse,
    now: () => Date.now(),
  });
}
