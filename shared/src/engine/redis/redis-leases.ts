import type { Redis } from "ioredis";
import { CHANNEL } from "../bus.js";
import type { Leases } from "../leases.js";
import type { RedisKeys } from "./keys.js";
import { unavailable } from "./unavailable.js";

/**
 * Takes the lease when it is free or already ours (then extends it), or (ARGV[4] = '1') when its
 * holder is gone: it missed a renewal (under half its time left; a holder renews every third of it)
 * and its bus connection is closed (nobody listens on its replies channel, ARGV[3] + holder). A
 * SIGKILLed or crashed member's connections close at once, so its leases need not be waited out; a
 * live one that only stalls keeps its connection, and one that only reconnects keeps renewing.
 */
const ACQUIRE = `
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if holder then
  if ARGV[4] ~= '1' then return 0 end
  if redis.call('PTTL', KEYS[1]) * 2 >= tonumber(ARGV[2]) then return 0 end
  if redis.call('PUBSUB', 'NUMSUB', ARGV[3] .. holder)[2] > 0 then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`;

const RENEW = `
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
return 0
`;

const RELEASE = `
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
`;

type LeaseCommands = {
  leaseAcquire(key: string, owner: string, ttlMs: number, repliesChannelPrefix: string, takeOver: "0" | "1"): Promise<number>;
  leaseRenew(key: string, owner: string, ttlMs: number): Promise<number>;
  leaseRelease(key: string, owner: string): Promise<number>;
};

/** Leases as keys with a TTL in Redis: Redis's clock decides expiry, so instances need no clock agreement. */
export class RedisLeases implements Leases {
  private readonly redis: Redis & LeaseCommands;

  constructor(redis: Redis, private readonly keys: RedisKeys) {
    redis.defineCommand("leaseAcquire", { numberOfKeys: 1, lua: ACQUIRE });
    redis.defineCommand("leaseRenew", { numberOfKeys: 1, lua: RENEW });
    redis.defineCommand("leaseRelease", { numberOfKeys: 1, lua: RELEASE });
    this.redis = redis as Redis & LeaseCommands;
  }

  async acquire(name: string, owner: string, ttlMs: number, options: { takeOver?: boolean } = {}): Promise<boolean> {
    const takeOver = options.takeOver === false ? "0" : "1";
    return (await this.redis.leaseAcquire(this.keys.lease(name), owner, ttlMs, this.keys.channel(CHANNEL.replies("")), takeOver)) === 1;
  }

  async renew(name: string, owner: string, ttlMs: number): Promise<boolean> {
    return (await this.redis.leaseRenew(this.keys.lease(name), owner, ttlMs)) === 1;
  }

  async release(name: string, owner: string): Promise<void> {
    await this.redis.leaseRelease(this.keys.lease(name), owner);
  }

  async holder(name: string): Promise<string | undefined> {
    return (await unavailable(this.redis.get(this.keys.lease(name)))) ?? undefined;
  }

  /** The connection belongs to whoever made it (see `RedisEngine`). */
  async close(): Promise<void> {}
}
