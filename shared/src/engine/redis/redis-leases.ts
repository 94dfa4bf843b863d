import type { RedisClient } from "./redis-client.js";
import { CHANNEL } from "../bus.js";
import type { LeaseOptions, Leases } from "../leases.js";
import type { RedisKeys } from "./keys.js";
import { unavailable } from "./unavailable.js";

/** For how many TTLs a lease's last holder keeps the first claim on it after it lapsed, while alive. */
const LAST_HOLDER_TTLS = 3;

/** Lua: whether member `id` is alive (its bus listens on its replies channel; the channel prefix is the local `replies`). */
const ALIVE = `local function alive(id) return redis.call('PUBSUB', 'NUMSUB', replies .. id)[2] > 0 end`;

/**
 * Takes the lease when it is free or already ours (then extends it), or (ARGV[4] = '1') when its
 * holder is gone: it missed a renewal (under half its time left; a holder renews every third of it)
 * and its bus connection is closed (nobody listens on its replies channel, ARGV[3] + holder). A
 * SIGKILLed or crashed member's connections close at once, so its leases need not be waited out; a
 * live one that only stalls keeps its connection, and one that only reconnects keeps renewing.
 *
 * A lease that lapsed is not free for everyone at once: its last holder (KEYS[3], kept for
 * `LAST_HOLDER_TTLS` TTLs) keeps the first claim while it is alive. A member that stalled past the
 * TTL (a storm of reconnecting clients held a broker's event loop for 1.5 s while its lease was 2 s,
 * and its renewal came late) takes it back when it wakes; taken over instead, the backend's every
 * wanted URI was re-subscribed by the other member and announced again to every subscriber, and
 * what the backend sent between the two watches was lost.
 *
 * Preferred members (ARGV[5] = '1': workers, which serve no clients and are restarted less often
 * than brokers) come first: each call registers the caller in KEYS[2], the lease's preferred
 * members (member → until when, ms), for three TTLs (a member whose connection to the backend is
 * down releases, which takes it out); a preferred member takes a lease from a holder that is not preferred (with ARGV[4]),
 * alive or not, and a member that is not preferred takes no lease while a preferred one is alive
 * (registered, and its bus connection open).
 */
const ACQUIRE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local preferred = ARGV[5] == '1'
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if preferred then redis.call('ZADD', KEYS[2], now + 3 * ttl, ARGV[1]) end
local replies = ARGV[3]
${ALIVE}
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ${LAST_HOLDER_TTLS} * ttl)
  return 1
end
if holder then
  if ARGV[4] ~= '1' then return 0 end
  local steal = preferred and not redis.call('ZSCORE', KEYS[2], holder)
  if not steal then
    if redis.call('PTTL', KEYS[1]) * 2 >= ttl then return 0 end
    if alive(holder) then return 0 end
  end
else
  local last = redis.call('GET', KEYS[3])
  if last and last ~= ARGV[1] and alive(last) and not (preferred and not redis.call('ZSCORE', KEYS[2], last)) then return 0 end
end
if not preferred then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    if id ~= ARGV[1] and alive(id) then return 0 end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('SET', KEYS[3], ARGV[1], 'PX', ${LAST_HOLDER_TTLS} * ttl)
return 1
`;

/** Extends the caller's lease; a preferred caller (ARGV[3] = '1') also renews its registration in KEYS[2] (see ACQUIRE). */
const RENEW = `
if ARGV[3] == '1' then
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[2], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + 3 * tonumber(ARGV[2]), ARGV[1])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ${LAST_HOLDER_TTLS} * tonumber(ARGV[2]))
  return 1
end
return 0
`;

/** Gives up the caller's lease, its claim as last holder (KEYS[3]) and its place among the preferred (KEYS[2]): it no longer competes. */
const RELEASE = `
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
if redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[3]) end
return 0
`;

/** KEYS: the lease, its last holder. ARGV: the replies channel prefix. The holder, or a last holder that may take it back (alive); else nil. */
const HOLDER = `
local replies = ARGV[1]
${ALIVE}
local holder = redis.call('GET', KEYS[1])
if holder then return holder end
local last = redis.call('GET', KEYS[2])
if last and alive(last) then return last end
return false
`;

type LeaseCommands = {
  leaseAcquire(key: string, preferredKey: string, lastKey: string, owner: string, ttlMs: number, repliesChannelPrefix: string, takeOver: "0" | "1", preferred: "0" | "1"): Promise<number>;
  leaseRenew(key: string, preferredKey: string, lastKey: string, owner: string, ttlMs: number, preferred: "0" | "1"): Promise<number>;
  leaseRelease(key: string, preferredKey: string, lastKey: string, owner: string): Promise<number>;
  leaseHolder(key: string, lastKey: string, repliesChannelPrefix: string): Promise<string | null>;
};

/** Leases as keys with a TTL in Redis: Redis's clock decides expiry, so instances need no clock agreement. */
export class RedisLeases implements Leases {
  private readonly redis: RedisClient & LeaseCommands;

  constructor(redis: RedisClient, private readonly keys: RedisKeys) {
    redis.defineCommand("leaseAcquire", { numberOfKeys: 3, lua: keys.script(ACQUIRE) });
    redis.defineCommand("leaseRenew", { numberOfKeys: 3, lua: RENEW });
    redis.defineCommand("leaseRelease", { numberOfKeys: 3, lua: RELEASE });
    redis.defineCommand("leaseHolder", { numberOfKeys: 2, lua: keys.script(HOLDER) });
    this.redis = redis as RedisClient & LeaseCommands;
  }

  async acquire(name: string, owner: string, ttlMs: number, options: LeaseOptions = {}): Promise<boolean> {
    const takeOver = options.takeOver === false ? "0" : "1";
    const preferred = options.preferred === true ? "1" : "0";
    return (await this.redis.leaseAcquire(this.keys.lease(name), this.keys.preferredHolders(name), this.keys.leaseLastHolder(name), owner, ttlMs, this.keys.channel(CHANNEL.replies("")), takeOver, preferred)) === 1;
  }

  async renew(name: string, owner: string, ttlMs: number, options: Pick<LeaseOptions, "preferred"> = {}): Promise<boolean> {
    return (await this.redis.leaseRenew(this.keys.lease(name), this.keys.preferredHolders(name), this.keys.leaseLastHolder(name), owner, ttlMs, options.preferred === true ? "1" : "0")) === 1;
  }

  async release(name: string, owner: string): Promise<void> {
    await this.redis.leaseRelease(this.keys.lease(name), this.keys.preferredHolders(name), this.keys.leaseLastHolder(name), owner);
  }

  /** The holder; while the lease is lapsed, its last holder if that is alive (it takes it back when it wakes). */
  async holder(name: string): Promise<string | undefined> {
    return (await unavailable(this.redis.leaseHolder(this.keys.lease(name), this.keys.leaseLastHolder(name), this.keys.channel(CHANNEL.replies(""))))) ?? undefined;
  }

  /** The connection belongs to whoever made it (see `RedisEngine`). */
  async close(): Promise<void> {}
}
