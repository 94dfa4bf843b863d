import type { Redis } from "ioredis";
import type { AddOutcome, RemoveOutcome, SubscriptionLimits, SubscriptionRef, SubscriptionRegistry } from "../registry.js";
import type { RedisKeys } from "./keys.js";

const SEP = "\u0000";

/**
 * KEYS: session set, principal counts, total, backend refcounts.
 * ARGV: member, principal, uri, perSession, perPrincipal, total.
 * Returns {0} exists, {1, first} added, {2, which, max} limit (which: 1 session, 2 principal, 3 global).
 */
const ADD = `
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return {0} end
local perSession = tonumber(ARGV[4])
if redis.call('SCARD', KEYS[1]) >= perSession then return {2, 1, perSession} end
local perPrincipal = tonumber(ARGV[5])
if tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0') >= perPrincipal then return {2, 2, perPrincipal} end
local total = tonumber(ARGV[6])
if tonumber(redis.call('GET', KEYS[3]) or '0') >= total then return {2, 3, total} end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
redis.call('INCR', KEYS[3])
local count = redis.call('HINCRBY', KEYS[4], ARGV[3], 1)
if count == 1 then return {1, 1} end
return {1, 0}
`;

/**
 * KEYS as for ADD; ARGV: member, principal, uri. Returns {removed, last}.
 */
const REMOVE = `
if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then return {0, 0} end
if redis.call('HINCRBY', KEYS[2], ARGV[2], -1) <= 0 then redis.call('HDEL', KEYS[2], ARGV[2]) end
redis.call('DECR', KEYS[3])
if redis.call('HINCRBY', KEYS[4], ARGV[3], -1) <= 0 then
  redis.call('HDEL', KEYS[4], ARGV[3])
  return {1, 1}
end
return {1, 0}
`;

const LIMITS = ["session", "principal", "global"] as const;

type RegistryCommands = {
  registryAdd(k1: string, k2: string, k3: string, k4: string, ...argv: (string | number)[]): Promise<number[]>;
  registryRemove(k1: string, k2: string, k3: string, k4: string, ...argv: string[]): Promise<number[]>;
};

/**
 * The subscription registry in Redis. `add` and `remove` are single Lua scripts, so limits hold
 * exactly and `first`/`last` go to exactly one caller however many instances call at once.
 */
export class RedisRegistry implements SubscriptionRegistry {
  private readonly redis: Redis & RegistryCommands;

  constructor(redis: Redis, private readonly keys: RedisKeys) {
    redis.defineCommand("registryAdd", { numberOfKeys: 4, lua: ADD });
    redis.defineCommand("registryRemove", { numberOfKeys: 4, lua: REMOVE });
    this.redis = redis as Redis & RegistryCommands;
  }

  async add(ref: SubscriptionRef, limits: SubscriptionLimits): Promise<AddOutcome> {
    const [status, a = 0, b = 0] = await this.redis.registryAdd(
      ...this.keysOf(ref),
      ref.backendId + SEP + ref.uri,
      ref.principal,
      ref.uri,
      limits.perSession,
      limits.perPrincipal,
      limits.total,
    );
    if (status === 0) return { status: "exists" };
    if (status === 1) return { status: "added", first: a === 1 };
    return { status: "limit", limit: LIMITS[a - 1] ?? "global", max: b };
  }

  async remove(ref: SubscriptionRef): Promise<RemoveOutcome> {
    const [removed, last] = await this.redis.registryRemove(...this.keysOf(ref), ref.backendId + SEP + ref.uri, ref.principal, ref.uri);
    return { removed: removed === 1, last: last === 1 };
  }

  async ofSession(principal: string, sessionId: string): Promise<SubscriptionRef[]> {
    const members = await this.redis.smembers(this.keys.session(principal, sessionId));
    return members.map((member) => {
      const at = member.indexOf(SEP);
      return { principal, sessionId, backendId: member.slice(0, at), uri: member.slice(at + 1) };
    });
  }

  async wanted(backendId: string): Promise<string[]> {
    return this.redis.hkeys(this.keys.refcounts(backendId));
  }

  async count(backendId: string, uri: string): Promise<number> {
    return Number((await this.redis.hget(this.keys.refcounts(backendId), uri)) ?? 0);
  }

  /** The connection belongs to whoever made it (see `RedisEngine`). */
  async close(): Promise<void> {}

  private keysOf(ref: SubscriptionRef): [string, string, string, string] {
    return [this.keys.session(ref.principal, ref.sessionId), this.keys.principalCounts(), this.keys.total(), this.keys.refcounts(ref.backendId)];
  }
}
