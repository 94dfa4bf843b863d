import { scanKeys, type RedisClient } from "./redis-client.js";
import { unavailable } from "./unavailable.js";
import { beyondLimits, type Holding } from "../limits.js";
import type { AddOutcome, AuditReport, Beyond, CountRepair, Heartbeat, RemoveOutcome, SubscriptionLimits, SubscriptionRef, SubscriptionRegistry } from "../registry.js";
import type { RedisKeys } from "./keys.js";

const SEP = "\u0000";

/**
 * Adds refs of one session, in order, within the limits. KEYS: session holdings, principal counts,
 * total, the instance's session set, the principal's session index, the set of principals, the
 * session's record, then each backend's refcounts and watch marks (a pair per backend). ARGV:
 * principal, session (for the instance's set), the session holdings' key, the epoch fence ('' for
 * none), the number of refs, perSession, perPrincipal, total, then the refs as one JSON array:
 * per ref, member, uri, its backend's pair (0-based), flat. A session's holdings are a sorted set
 * scored by when each was added (Redis's clock, µs), so the newest can be found when limits are
 * lowered. The first subscriber of a (backend, uri) removes any mark left over (a watch released
 * while no watcher ran, or one still in its release grace): it asks the watcher, which marks it
 * again.
 * Returns one string: `M` (moved: the record names another epoch, or is gone), or one character
 * per ref (see `ADDED`). A string, not numbers per ref: ioredis decodes each number of a reply
 * array as an item of its own, which was ~6 % of a broker's CPU in a listen of 100 URIs.
 */
const ADD_MANY = `
if ARGV[4] ~= '' and redis.call('HGET', KEYS[7], 'epoch') ~= ARGV[4] then return 'M' end
local perSession = tonumber(ARGV[6])
local perPrincipal = tonumber(ARGV[7])
local total = tonumber(ARGV[8])
local held = redis.call('ZCARD', KEYS[1])
local principalCount = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
local totalCount = tonumber(redis.call('GET', KEYS[3]) or '0')
local now = redis.call('TIME')
local score = tonumber(now[1]) * 1000000 + tonumber(now[2])
local out = {}
local added = 0
local batch = cjson.decode(ARGV[9])
for i = 0, tonumber(ARGV[5]) - 1 do
  local member = batch[1 + 3 * i]
  local uri = batch[2 + 3 * i]
  local refs = KEYS[8 + 2 * batch[3 + 3 * i]]
  local marks = KEYS[9 + 2 * batch[3 + 3 * i]]
  local outcome = 'A'
  if redis.call('ZSCORE', KEYS[1], member) then
    outcome = 'E'
  elseif held >= perSession then
    outcome = 'S'
  elseif principalCount >= perPrincipal then
    outcome = 'P'
  elseif totalCount >= total then
    outcome = 'G'
  else
    redis.call('ZADD', KEYS[1], score + i, member)
    held = held + 1
    principalCount = principalCount + 1
    totalCount = totalCount + 1
    added = added + 1
    if redis.call('HINCRBY', refs, uri, 1) == 1 then
      redis.call('HDEL', marks, uri)
      outcome = 'F'
    elseif redis.call('HEXISTS', marks, uri) == 1 then
      outcome = 'W'
    end
  end
  out[i + 1] = outcome
end
if added > 0 then
  redis.call('SADD', KEYS[4], ARGV[2])
  redis.call('SADD', KEYS[5], ARGV[3])
  redis.call('SADD', KEYS[6], ARGV[1])
  redis.call('HINCRBY', KEYS[2], ARGV[1], added)
  redis.call('INCRBY', KEYS[3], added)
end
return table.concat(out)
`;

/** ADD_MANY's character per ref: exists, added (first subscriber, watched already, neither), or over the session, principal or global limit. */
const ADDED: Readonly<Record<string, (limits: SubscriptionLimits) => AddOutcome>> = {
  E: () => ({ status: "exists" }),
  F: () => ({ status: "added", first: true }),
  W: () => ({ status: "added", first: false, watched: true }),
  A: () => ({ status: "added", first: false }),
  S: (limits) => ({ status: "limit", limit: "session", max: limits.perSession }),
  P: (limits) => ({ status: "limit", limit: "principal", max: limits.perPrincipal }),
  G: (limits) => ({ status: "limit", limit: "global", max: limits.total }),
};

/**
 * Removes refs of one session. KEYS: as ADD_MANY's first seven (the session set of the instance
 * that indexed the session), then each backend's refcounts. ARGV: as ADD_MANY's first five (the
 * epoch fence: a record that names another epoch leaves the holdings alone; a record that is gone
 * does not), then a fence key ('' for none: the removal happens only while that key exists, the
 * cluster's claim on a dead instance being reaped), then the refs as one JSON array: per ref,
 * member, uri, its backend's index (0-based), flat. Returns one string: `M` (moved, or the claim
 * is gone: every ref left alone), or per ref `0` (not held), `1` (removed) or `2` (removed, and the
 * last subscriber of its resource).
 */
const REMOVE_MANY = `
if ARGV[4] ~= '' then
  local epoch = redis.call('HGET', KEYS[7], 'epoch')
  if epoch and epoch ~= ARGV[4] then return 'M' end
end
if ARGV[6] ~= '' and redis.call('EXISTS', ARGV[6]) == 0 then return 'M' end
local out = {}
local removed = 0
local batch = cjson.decode(ARGV[7])
for i = 0, tonumber(ARGV[5]) - 1 do
  local refs = KEYS[8 + batch[3 + 3 * i]]
  local uri = batch[2 + 3 * i]
  out[i + 1] = '0'
  if redis.call('ZREM', KEYS[1], batch[1 + 3 * i]) == 1 then
    removed = removed + 1
    out[i + 1] = '1'
    if redis.call('HINCRBY', refs, uri, -1) <= 0 then
      redis.call('HDEL', refs, uri)
      out[i + 1] = '2'
    end
  end
end
if removed > 0 then
  if redis.call('ZCARD', KEYS[1]) == 0 then
    redis.call('SREM', KEYS[4], ARGV[2])
    redis.call('SREM', KEYS[5], ARGV[3])
  end
  if redis.call('HINCRBY', KEYS[2], ARGV[1], -removed) <= 0 then
    redis.call('HDEL', KEYS[2], ARGV[1])
    redis.call('SREM', KEYS[6], ARGV[1])
  end
  redis.call('DECRBY', KEYS[3], removed)
end
return table.concat(out)
`;

/** KEYS: backend refcounts, the backend's watch marks. ARGV: uri. Nobody wants it: its mark goes, and 1 is returned; else 0. */
const UNWATCH = `
if tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') > 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
`;

/** KEYS: backend refcounts, the backend's watch marks. ARGV: uri. Marks it watched; returns its subscriber count. */
const MARK_WATCHED = `
redis.call('HSET', KEYS[2], ARGV[1], '1')
return tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
`;

/**
 * KEYS: heartbeat, instances, the instance's reaped mark, its heartbeat sequence; ARGV: instance
 * id, ttl, the last sequence this instance knows landed ('' for none), the next (larger). Returns
 * {alive, lost, server}: alive 0 when the cluster had claimed the instance as dead (the mark is
 * used up: it is told once); lost 1 when the sequence is missing or below the one known to have
 * landed (Redis lost writes since: restarted empty, or from an older snapshot). A heartbeat that
 * failed on the way may have landed: it left a larger number, which is no loss. A heartbeat that
 * merely expired (a stall, Redis away or restarted) is not a death: nobody released anything the
 * instance held until a reaper claimed it. `server` is the Redis server's run id, which a restart
 * or a failover changes (see `RedisRegistry.heartbeat`).
 */
const HEARTBEAT = `
local reaped = redis.call('DEL', KEYS[3])
redis.call('SET', KEYS[1], '1', 'PX', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
local seen = redis.call('GET', KEYS[4])
redis.call('SET', KEYS[4], ARGV[4])
local lost = 0
if ARGV[3] ~= '' and (not seen or tonumber(seen) < tonumber(ARGV[3])) then lost = 1 end
return {1 - reaped, lost, string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or ''}
`;

/**
 * KEYS: instances, suspects; ARGV: key prefix, this instance's id, grace (ms). The instances whose
 * heartbeat has been missing for at least the grace, by Redis's clock: one seen without it is a
 * suspect from then on, and no longer one once it heartbeats again. Suspects no longer among the
 * instances (reaped, or left) are forgotten.
 */
const DEAD = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if id ~= ARGV[2] then
    if redis.call('EXISTS', ARGV[1] .. 'instance:' .. id) == 1 then
      redis.call('HDEL', KEYS[2], id)
    else
      local seen = tonumber(redis.call('HGET', KEYS[2], id) or '')
      if seen == nil then
        redis.call('HSET', KEYS[2], id, now)
        seen = now
      end
      if now - seen >= tonumber(ARGV[3]) then table.insert(dead, id) end
    end
  end
end
for _, id in ipairs(redis.call('HKEYS', KEYS[2])) do
  if redis.call('SISMEMBER', KEYS[1], id) == 0 then redis.call('HDEL', KEYS[2], id) end
end
return dead
`;

/** KEYS: heartbeat, the reaped mark; ARGV: mark ttl (ms). Claims an instance without a heartbeat as dead; 0 when it has one again. */
const CLAIM = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
return 1
`;

/**
 * How long the cluster remembers an instance it claimed as dead, for its next heartbeat to learn
 * it. An instance out of touch with Redis longer than this presumes itself dead without asking.
 */
export const REAPED_MARK_MS = 24 * 60 * 60 * 1000;

/**
 * Recounts one principal from its sessions' holdings, in one step. KEYS: the principal's session
 * index, principal counts, the set of principals; ARGV: principal. The index names the sessions'
 * keys (a session with no holdings has none: it leaves the index). Returns {was, now, largest session}.
 */
const AUDIT_PRINCIPAL = `
local actual = 0
local largest = 0
for _, key in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local n = redis.call('ZCARD', key)
  if n == 0 then redis.call('SREM', KEYS[1], key) end
  if n > largest then largest = n end
  actual = actual + n
end
local stored = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if actual == 0 then
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('SREM', KEYS[3], ARGV[1])
elseif stored ~= actual then
  redis.call('HSET', KEYS[2], ARGV[1], actual)
end
return {stored, actual, largest}
`;

/** KEYS: principal counts, total. Sets the total to the sum of the principals' counts. Returns {was, now, largest principal}. */
const AUDIT_TOTAL = `
local sum = 0
local largest = 0
for _, value in ipairs(redis.call('HVALS', KEYS[1])) do
  local n = tonumber(value)
  sum = sum + n
  if n > largest then largest = n end
end
local stored = tonumber(redis.call('GET', KEYS[2]) or '0')
if stored ~= sum then redis.call('SET', KEYS[2], sum) end
return {stored, sum, largest}
`;



type RegistryCommands = {
  registryUnwatch(refcounts: string, marks: string, uri: string): Promise<number>;
  registryMarkWatched(refcounts: string, marks: string, uri: string): Promise<number>;
  registryAddMany(...numberOfKeysKeysAndArgs: (string | number)[]): Promise<string>;
  registryRemoveMany(...numberOfKeysKeysAndArgs: (string | number)[]): Promise<string>;
  registryHeartbeat(heartbeat: string, instances: string, reaped: string, sequence: string, instanceId: string, ttlMs: number, landed: string, next: string): Promise<[number, number, string]>;
  registryDead(instances: string, suspects: string, prefix: string, instanceId: string, graceMs: number): Promise<string[]>;
  registryClaim(heartbeat: string, reaped: string, markMs: number): Promise<number>;
  registryAuditPrincipal(index: string, counts: string, principals: string, principal: string): Promise<number[]>;
  registryAuditTotal(counts: string, total: string): Promise<number[]>;
};

/**
 * The subscription registry in Redis. `add` and `remove` are single Lua scripts, so limits hold
 * exactly and `first`/`last` go to exactly one caller however many instances call at once. Each
 * instance also keeps the set of its sessions that hold subscriptions and a heartbeat, so that the
 * others can release what a dead instance's sessions held (`reapInstance`).
 */
export class RedisRegistry implements SubscriptionRegistry {
  private readonly redis: RedisClient & RegistryCommands;
  /** When this instance's last heartbeat went through (`performance.now()`). */
  private lastBeat: number | undefined;
  /** The last heartbeat sequence this instance knows landed (undefined: none yet). */
  private sequence: number | undefined;
  /** Heartbeats sent: the next one's sequence number. */
  private beats = 0;
  /** The run id of the Redis server the last heartbeat landed on (undefined: none yet, or it did not say). */
  private server: string | undefined;

  constructor(
    redis: RedisClient,
    private readonly keys: RedisKeys,
    private readonly instanceId: string,
  ) {
    redis.defineCommand("registryUnwatch", { numberOfKeys: 2, lua: UNWATCH });
    redis.defineCommand("registryMarkWatched", { numberOfKeys: 2, lua: MARK_WATCHED });
    redis.defineCommand("registryAddMany", { lua: ADD_MANY });
    redis.defineCommand("registryRemoveMany", { lua: REMOVE_MANY });
    redis.defineCommand("registryHeartbeat", { numberOfKeys: 4, lua: HEARTBEAT });
    redis.defineCommand("registryDead", { numberOfKeys: 2, lua: DEAD });
    redis.defineCommand("registryClaim", { numberOfKeys: 2, lua: CLAIM });
    redis.defineCommand("registryAuditPrincipal", { numberOfKeys: 3, lua: AUDIT_PRINCIPAL });
    redis.defineCommand("registryAuditTotal", { numberOfKeys: 2, lua: AUDIT_TOTAL });
    this.redis = redis as RedisClient & RegistryCommands;
  }

  async add(ref: SubscriptionRef, limits: SubscriptionLimits): Promise<AddOutcome> {
    const [outcome] = await this.addMany([ref], limits);
    return outcome as AddOutcome;
  }

  async addMany(refs: readonly SubscriptionRef[], limits: SubscriptionLimits): Promise<AddOutcome[]> {
    if (refs.length === 0) return [];
    const out = await unavailable(
      this.redis.registryAddMany(...this.batch(refs, this.instanceId, (backendId) => [this.keys.refcounts(backendId), this.keys.watchMarks(backendId)], [limits.perSession, limits.perPrincipal, limits.total])),
    );
    if (out === "M") return refs.map(() => ({ status: "moved" }));
    return refs.map((_, i) => addedOutcome(out[i], limits));
  }

  async remove(ref: SubscriptionRef): Promise<RemoveOutcome> {
    const [outcome] = await this.removeOf([ref], this.instanceId);
    return outcome as RemoveOutcome;
  }

  removeMany(refs: readonly SubscriptionRef[]): Promise<RemoveOutcome[]> {
    return this.removeOf(refs, this.instanceId);
  }

  /** Removes refs of one session that `instanceId` indexed (this instance, or a dead one being reaped). */
  private async removeOf(refs: readonly SubscriptionRef[], instanceId: string): Promise<RemoveOutcome[]> {
    if (refs.length === 0) return [];
    // A dead instance's are removed only while the cluster's claim on it stands (see `reapInstance`).
    const fence = instanceId === this.instanceId ? "" : this.keys.instanceReaped(instanceId);
    const out = await unavailable(this.redis.registryRemoveMany(...this.batch(refs, instanceId, (backendId) => [this.keys.refcounts(backendId)], [fence])));
    if (out === "M") return refs.map(() => ({ removed: false, last: false, moved: true }));
    return refs.map((_, i) => ({ removed: out[i] === "1" || out[i] === "2", last: out[i] === "2" }));
  }

  /**
   * The arguments of a batch script for `refs` (one session's, at least one): the number of keys;
   * KEYS: session holdings, principal counts, total, the session set of `instanceId`, the
   * principal's session index, the set of principals, the session's record, then `backendKeys` of
   * each backend; ARGV: principal, session (for the instance's set), the session holdings' key,
   * the epoch fence, the number of refs, `extra`, then per ref member, uri and its backend's index
   * in one JSON array. One argument for all refs: ioredis builds a command as a string piece by
   * piece, five pieces per argument, and a listen of 100 URIs is a batch of 100 (~300 arguments):
   * 80 → 20 µs to build one and make it bytes, in a micro-benchmark.
   */
  private batch(refs: readonly SubscriptionRef[], instanceId: string, backendKeys: (backendId: string) => string[], extra: (string | number)[]): (string | number)[] {
    const first = refs[0] as SubscriptionRef;
    const backends: string[] = [];
    const perRef: (string | number)[] = [];
    for (const ref of refs) {
      if (ref.principal !== first.principal || ref.sessionId !== first.sessionId || ref.epoch !== first.epoch) throw new Error("a batch holds refs of one session only");
      let index = backends.indexOf(ref.backendId);
      if (index < 0) index = backends.push(ref.backendId) - 1;
      const uri = wellFormed(ref.uri);
      // Backend ids are ASCII (config's BACKEND_ID_PATTERN): only the URI can hold a lone surrogate.
      perRef.push(ref.backendId + SEP + uri, uri, index);
    }
    const holdings = this.keys.session(first.principal, first.sessionId);
    const keys = [
      holdings,
      this.keys.principalCounts(),
      this.keys.total(),
      this.keys.instanceSessions(instanceId),
      this.keys.principalSessions(first.principal),
      this.keys.principals(),
      this.keys.sessionRecord(first.principal, first.sessionId),
      ...backends.flatMap(backendKeys),
    ];
    return [keys.length, ...keys, first.principal, JSON.stringify([first.principal, first.sessionId]), holdings, first.epoch ?? "", refs.length, ...extra, JSON.stringify(perRef)];
  }

  /** One at a time (see `InstancePresence`): each checks the sequence the previous one left. */
  async heartbeat(ttlMs: number): Promise<Heartbeat> {
    const landed = this.sequence;
    const next = ++this.beats;
    const [alive, lost, server] = await this.redis.registryHeartbeat(
      this.keys.instance(this.instanceId),
      this.keys.instances(),
      this.keys.instanceReaped(this.instanceId),
      this.keys.instanceSequence(this.instanceId),
      this.instanceId,
      ttlMs,
      landed === undefined ? "" : String(landed),
      String(next),
    );
    this.sequence = next;
    // Another server (Redis restarted, or a replica took over) may have come back from a snapshot
    // or a replication stream that holds the last heartbeat but not every write made after it.
    const restarted = this.server !== undefined && server !== "" && server !== this.server;
    if (server !== "") this.server = server;
    const now = performance.now();
    const away = this.lastBeat !== undefined && now - this.lastBeat > REAPED_MARK_MS;
    this.lastBeat = now;
    return { alive: alive === 1 && !away, lost: lost === 1 || restarted };
  }

  async deadInstances(graceMs: number): Promise<string[]> {
    return this.redis.registryDead(this.keys.instances(), this.keys.suspects(), this.keys.prefix, this.instanceId, graceMs);
  }

  async claimInstance(instanceId: string): Promise<boolean> {
    return (await this.redis.registryClaim(this.keys.instance(instanceId), this.keys.instanceReaped(instanceId), REAPED_MARK_MS)) === 1;
  }

  async reapInstance(instanceId: string): Promise<{ backendId: string; uri: string }[]> {
    if ((await this.redis.exists(this.keys.instance(instanceId))) === 1) return [];
    const released: { backendId: string; uri: string }[] = [];
    for (const session of await this.redis.smembers(this.keys.instanceSessions(instanceId))) {
      const [principal, sessionId] = JSON.parse(session) as [string, string];
      // A legacy session's record says who holds it now. One that names another holder (adopted
      // after an entry of the dead instance's set was written again: a subscribe that landed after
      // it let the session go), or none (let go: its holdings wait for an adopter, or for expiry),
      // is not the dead instance's to release; the removal is fenced by the epoch read here, so an
      // adoption in between leaves it alone too. A listen stream has no record.
      const [owner, epoch] = await this.redis.hmget(this.keys.sessionRecord(principal, sessionId), "owner", "epoch");
      if (owner !== null && owner !== instanceId) {
        await this.redis.srem(this.keys.instanceSessions(instanceId), session);
        continue;
      }
      const fence = owner === null || epoch === null ? {} : { epoch: Number(epoch) };
      const refs = (await this.ofSession(principal, sessionId)).map((ref) => ({ ...ref, ...fence }));
      (await this.removeOf(refs, instanceId)).forEach((outcome, i) => {
        const ref = refs[i] as SubscriptionRef;
        if (outcome.last) released.push({ backendId: ref.backendId, uri: ref.uri });
      });
    }
    // Another process reaping at the same time gets `removed: false` for what this one took.
    await this.redis.srem(this.keys.instances(), instanceId);
    await this.redis.del(this.keys.instanceSequence(instanceId));
    return released;
  }

  async ofSession(principal: string, sessionId: string): Promise<SubscriptionRef[]> {
    const members = await unavailable(this.redis.zrange(this.keys.session(principal, sessionId), "0", "-1"));
    return members.map((member) => refOf(principal, sessionId, member));
  }

  /**
   * First every session's holdings found by a scan are put in their principal's index (what a
   * damaged index lost is found again; an entry for a session emptied meanwhile is dropped by the
   * recount), then each principal is recounted in one step, then the total.
   */
  async audit(): Promise<AuditReport> {
    const repairs: CountRepair[] = [];
    const principals = new Set(await this.redis.smembers(this.keys.principals()));
    for await (const batch of scanKeys(this.redis, this.keys.sessionPattern())) {
      for (const key of batch) {
        const session = this.keys.parseSession(key);
        if (session === undefined) continue;
        principals.add(session.principal);
        await this.redis.sadd(this.keys.principalSessions(session.principal), key);
      }
    }
    for (const principal of await this.redis.hkeys(this.keys.principalCounts())) principals.add(principal);
    let largestSession = 0;
    for (const principal of principals) {
      const [was = 0, now = 0, largest = 0] = await this.redis.registryAuditPrincipal(this.keys.principalSessions(principal), this.keys.principalCounts(), this.keys.principals(), principal);
      if (was !== now) repairs.push({ scope: "principal", principal, was, now });
      largestSession = Math.max(largestSession, largest);
    }
    const [was = 0, now = 0, largestPrincipal = 0] = await this.redis.registryAuditTotal(this.keys.principalCounts(), this.keys.total());
    if (was !== now) repairs.push({ scope: "total", was, now });
    return { repairs, total: now, largestPrincipal, largestSession };
  }

  async beyond(limits: SubscriptionLimits): Promise<Beyond[]> {
    const sessions: Holding[][] = [];
    for (const principal of await this.redis.smembers(this.keys.principals())) {
      for (const key of await this.redis.smembers(this.keys.principalSessions(principal))) {
        const session = this.keys.parseSession(key);
        if (session === undefined) continue;
        const flat = await this.redis.zrange(key, "0", "-1", "WITHSCORES");
        const holdings: Holding[] = [];
        for (let i = 0; i + 1 < flat.length; i += 2) holdings.push({ ref: refOf(session.principal, session.sessionId, flat[i] as string), since: Number(flat[i + 1]) });
        sessions.push(holdings);
      }
    }
    return beyondLimits(sessions, limits);
  }

  async wanted(backendId: string): Promise<string[]> {
    return this.redis.hkeys(this.keys.refcounts(backendId));
  }

  async count(backendId: string, uri: string): Promise<number> {
    return Number((await this.redis.hget(this.keys.refcounts(backendId), uri)) ?? 0);
  }

  async unwatch(backendId: string, uri: string): Promise<boolean> {
    return (await unavailable(this.redis.registryUnwatch(this.keys.refcounts(backendId), this.keys.watchMarks(backendId), uri))) === 1;
  }

  async markWatched(backendId: string, uri: string): Promise<number> {
    return Number(await unavailable(this.redis.registryMarkWatched(this.keys.refcounts(backendId), this.keys.watchMarks(backendId), uri)));
  }

  /** The connection belongs to whoever made it (see `RedisEngine`). */
  async close(): Promise<void> {}
}

/** One ref's answer of ADD_MANY: 0 exists, {1, first, watched} added, {2, which, max} limit. */
function addedOutcome(code: string | undefined, limits: SubscriptionLimits): AddOutcome {
  const outcome = code === undefined ? undefined : ADDED[code];
  if (outcome === undefined) throw new Error(`unexpected registry reply ${JSON.stringify(code)}`);
  return outcome(limits);
}

const LONE_SURROGATE = /\p{Cs}/u;
const LONE_SURROGATES = /\p{Cs}/gu;

/**
 * `text` with each lone surrogate replaced by U+FFFD, as Redis stored it when it was an argument of
 * its own (UTF-8 has no lone surrogates): JSON would carry it as an escape that Redis's cjson refuses.
 */
function wellFormed(text: string): string {
  return LONE_SURROGATE.test(text) ? text.replace(LONE_SURROGATES, "\uFFFD") : text;
}

function refOf(principal: string, sessionId: string, member: string): SubscriptionRef {
  const at = member.indexOf(SEP);
  return { principal, sessionId, backendId: member.slice(0, at), uri: member.slice(at + 1) };
}
