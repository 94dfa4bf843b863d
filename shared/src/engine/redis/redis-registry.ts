import type { Redis } from "ioredis";
import { unavailable } from "./unavailable.js";
import type { AddOutcome, RemoveOutcome, SubscriptionLimits, SubscriptionRef, SubscriptionRegistry } from "../registry.js";
import type { RedisKeys } from "./keys.js";

const SEP = "\u0000";

/**
 * KEYS: session set, principal counts, total, backend refcounts, the instance's session set.
 * ARGV: member, principal, uri, perSession, perPrincipal, total, session (for the instance's set).
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
redis.call('SADD', KEYS[5], ARGV[7])
redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
redis.call('INCR', KEYS[3])
local count = redis.call('HINCRBY', KEYS[4], ARGV[3], 1)
if count == 1 then return {1, 1} end
return {1, 0}
`;

/**
 * KEYS as for ADD; ARGV: member, principal, uri, session. Returns {removed, last}.
 */
const REMOVE = `
if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then return {0, 0} end
if redis.call('SCARD', KEYS[1]) == 0 then redis.call('SREM', KEYS[5], ARGV[4]) end
if redis.call('HINCRBY', KEYS[2], ARGV[2], -1) <= 0 then redis.call('HDEL', KEYS[2], ARGV[2]) end
redis.call('DECR', KEYS[3])
if redis.call('HINCRBY', KEYS[4], ARGV[3], -1) <= 0 then
  redis.call('HDEL', KEYS[4], ARGV[3])
  return {1, 1}
end
return {1, 0}
`;

/** KEYS: heartbeat, instances; ARGV: instance id, ttl. Returns whether the heartbeat was still there. */
const HEARTBEAT = `
local alive = redis.call('EXISTS', KEYS[1])
redis.call('SET', KEYS[1], '1', 'PX', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
return alive
`;

const LIMITS = ["session", "principal", "global"] as const;


type Keys = [string, string, string, string, string];
type RegistryCommands = {
  registryAdd(...args: [...Keys, ...(string | number)[]]): Promise<number[]>;
  registryRemove(...args: [...Keys, ...string[]]): Promise<number[]>;
  registryHeartbeat(heartbeat: string, instances: string, instanceId: string, ttlMs: number): Promise<number>;
};

/**
 * The subscription registry in Redis. `add` and `remove` are single Lua scripts, so limits hold
 * exactly and `first`/`last` go to exactly one caller however many instances call at once. Each
 * instance also keeps the set of its sessions that hold subscriptions and a heartbeat, so that the
 * others can release what a dead instance's sessions held (`reapDead`).
 */
export class RedisRegistry implements SubscriptionRegistry {
  private readonly redis: Redis & RegistryCommands;
  private beaten = false;

  constructor(
    redis: Redis,
    private readonly keys: RedisKeys,
    private readonly instanceId: string,
  ) {
    redis.defineCommand("registryAdd", { numberOfKeys: 5, lua: ADD });
    redis.defineCommand("registryRemove", { numberOfKeys: 5, lua: REMOVE });
    redis.defineCommand("registryHeartbeat", { numberOfKeys: 2, lua: HEARTBEAT });
    this.redis = redis as Redis & RegistryCommands;
  }

  async add(ref: SubscriptionRef, limits: SubscriptionLimits): Promise<AddOutcome> {
    const [status, a = 0, b = 0] = await unavailable(this.redis.registryAdd(
      ...this.keysOf(ref, this.instanceId),
      ref.backendId + SEP + ref.uri,
      ref.principal,
      ref.uri,
      limits.perSession,
      limits.perPrincipal,
      limits.total,
      JSON.stringify([ref.principal, ref.sessionId]),
    ));
    if (status === 0) return { status: "exists" };
    if (status === 1) return { status: "added", first: a === 1 };
    return { status: "limit", limit: LIMITS[a - 1] ?? "global", max: b };
  }

  remove(ref: SubscriptionRef): Promise<RemoveOutcome> {
    return this.removeOf(ref, this.instanceId);
  }

  async heartbeat(ttlMs: number): Promise<boolean> {
    const alive = (await this.redis.registryHeartbeat(this.keys.instance(this.instanceId), this.keys.instances(), this.instanceId, ttlMs)) === 1;
    const first = !this.beaten;
    this.beaten = true;
    return alive || first;
  }

  async reapDead(): Promise<{ backendId: string; uri: string }[]> {
    const released: { backendId: string; uri: string }[] = [];
    for (const instanceId of await this.redis.smembers(this.keys.instances())) {
      if (instanceId === this.instanceId || (await this.redis.exists(this.keys.instance(instanceId))) === 1) continue;
      for (const session of await this.redis.smembers(this.keys.instanceSessions(instanceId))) {
        const [principal, sessionId] = JSON.parse(session) as [string, string];
        for (const ref of await this.ofSession(principal, sessionId)) {
          if ((await this.removeOf(ref, instanceId)).last) released.push({ backendId: ref.backendId, uri: ref.uri });
        }
      }
      // Another instance reaping at the same time gets `removed: false` for what this one took.
      await this.redis.srem(this.keys.instances(), instanceId);
    }
    return released;
  }

  private async removeOf(ref: SubscriptionRef, instanceId: string): Promise<RemoveOutcome> {
    const [removed, last] = await unavailable(this.redis.registryRemove(
      ...this.keysOf(ref, instanceId),
      ref.backendId + SEP + ref.uri,
      ref.principal,
      ref.uri,
      JSON.stringify([ref.principal, ref.sessionId]),
    ));
    return { removed: removed === 1, last: last === 1 };
  }

  async ofSession(principal: string, sessionId: string): Promise<SubscriptionRef[]> {
    const members = await unavailable(this.redis.smembers(this.keys.session(principal, sessionId)));
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

  private keysOf(ref: SubscriptionRef, instanceId: string): Keys {
    return [this.keys.session(ref.principal, ref.sessionId), this.keys.principalCounts(), this.keys.total(), this.keys.refcounts(ref.backendId), this.keys.instanceSessions(instanceId)];
  }
}
