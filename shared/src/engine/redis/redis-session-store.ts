import type { RedisClient } from "./redis-client.js";
import { MAX_NOTICES, type NewSession, type SessionKey, type SessionRecord, type SessionStore } from "../session-store.js";
import type { RedisKeys } from "./keys.js";
import { unavailable } from "./unavailable.js";

/** Redis's clock in ms, inside a script. */
const NOW = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`;

/**
 * KEYS: record, the owner's record index. ARGV: member, owner, lastSeen, epoch, then field, value
 * pairs. A record at a newer epoch stays (a write-back after Redis was away finds the session
 * adopted by another member since): returns 0 then.
 */
const CREATE = `
if tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0') > tonumber(ARGV[4]) then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'epoch', ARGV[4], 'lastSeen', ARGV[3], unpack(ARGV, 5))
redis.call('SADD', KEYS[2], ARGV[1])
return 1
`;

/**
 * KEYS: record, the new owner's record index, the new owner's holdings index, orphans, the
 * session's holdings. ARGV: new owner, member, key prefix (for the old owner's indexes), lastSeen,
 * the session's member of the holdings index.
 * The session's entries in the indexes move with it: a holder's death then orphans it, and the
 * holdings stay held. Returns {epoch, previous owner} or nil when there is no such session.
 */
const ADOPT = `
if redis.call('EXISTS', KEYS[1]) == 0 then return nil end
local old = redis.call('HGET', KEYS[1], 'owner') or ''
local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'lastSeen', ARGV[4])
redis.call('PERSIST', KEYS[1])
if old ~= '' and old ~= ARGV[1] then
  redis.call('SREM', ARGV[3] .. 'instance-records:' .. old, ARGV[2])
  redis.call('SREM', ARGV[3] .. 'instance-sessions:' .. old, ARGV[5])
end
redis.call('ZREM', KEYS[4], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[2])
if redis.call('EXISTS', KEYS[5]) == 1 then redis.call('SADD', KEYS[3], ARGV[5]) end
local notices = redis.call('HGET', KEYS[1], 'notices') or ''
redis.call('HDEL', KEYS[1], 'notices')
return {epoch, old, notices}
`;

/**
 * KEYS: record. ARGV: notice, how many are kept at most. Keeps it in the record (a JSON array) when
 * no member holds the session; returns 1 then, else 0.
 */
const REMIND = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if (redis.call('HGET', KEYS[1], 'owner') or '') ~= '' then return 0 end
local notices = cjson.decode(redis.call('HGET', KEYS[1], 'notices') or '[]')
table.insert(notices, ARGV[1])
while #notices > tonumber(ARGV[2]) do table.remove(notices, 1) end
redis.call('HSET', KEYS[1], 'notices', cjson.encode(notices))
return 1
`;

/**
 * KEYS: record, owner's record index, owner's holdings index, orphans. ARGV: member, owner, epoch
 * (or 0 for any), idleMs, holdings member, a fence key ('' for none: nothing happens unless it
 * exists, the cluster's claim on a dead owner being reaped).
 */
const LET_GO = `
if ARGV[6] ~= '' and redis.call('EXISTS', ARGV[6]) == 0 then return 0 end
local owner = redis.call('HGET', KEYS[1], 'owner')
local mine = owner ~= false and owner == ARGV[2] and (ARGV[3] == '0' or redis.call('HGET', KEYS[1], 'epoch') == ARGV[3])
redis.call('SREM', KEYS[2], ARGV[1])
if not mine then return 0 end
${NOW}
redis.call('HSET', KEYS[1], 'owner', '')
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('SREM', KEYS[3], ARGV[5])
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[4]), ARGV[1])
return 1
`;

/**
 * KEYS: orphans. ARGV: key prefix, retry (ms). Each let-go session whose time is up: gone when its
 * record expired (returned, to release its holdings, and re-scored `retry` ahead: it stays until
 * RELEASED), re-scored when its record is still there, dropped when its record has no TTL (adopted).
 * PTTL is 0 during the millisecond the record expires in (it still exists until then): not one
 * adopted, it is looked at again a millisecond on.
 */
const EXPIRED = `
${NOW}
local gone = {}
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 500)) do
  local key = cjson.decode(member)
  local record = ARGV[1] .. 'session:' .. key[3] .. ':' .. key[4]
  local ttl = redis.call('PTTL', record)
  if ttl >= 0 then
    redis.call('ZADD', KEYS[1], now + math.max(ttl, 1), member)
  elseif ttl == -2 then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), member)
    table.insert(gone, member)
  else
    redis.call('ZREM', KEYS[1], member)
  end
end
return gone
`;

/** KEYS: record, orphans. ARGV: member. An expired session's holdings were released: it leaves the index (unless a record of that id exists again). */
const RELEASED = `
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('ZREM', KEYS[2], ARGV[1]) end
return 1
`;

/** KEYS: record, orphans. ARGV: member, key prefix. */
const DELETE = `
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner and owner ~= '' then redis.call('SREM', ARGV[2] .. 'instance-records:' .. owner, ARGV[1]) end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
`;

/** KEYS: record. ARGV: field, value. Sets it only on a record that exists. */
const SET_IF_EXISTS = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
`;

type SessionCommands = {
  sessionCreate(record: string, index: string, ...args: (string | number)[]): Promise<number>;
  sessionAdopt(record: string, index: string, holdingsIndex: string, orphans: string, holdings: string, owner: string, member: string, prefix: string, lastSeen: number, holdingsMember: string): Promise<[number, string, string] | null>;
  sessionRemind(record: string, notice: string, max: number): Promise<number>;
  sessionLetGo(record: string, index: string, holdingsIndex: string, orphans: string, member: string, owner: string, epoch: number, idleMs: number, holdingsMember: string, fence: string): Promise<number>;
  sessionExpired(orphans: string, prefix: string, retryMs: number): Promise<string[]>;
  sessionReleased(record: string, orphans: string, member: string): Promise<number>;
  sessionDelete(record: string, orphans: string, member: string, prefix: string): Promise<number>;
  sessionSet(record: string, field: string, value: string | number): Promise<number>;
};

/**
 * Session records in Redis: one hash per session under its principal (`session:<principal>:<id>`),
 * each member's index of the records it holds (`instance-records:<id>`), and the let-go sessions
 * by expiry (`orphans`). A record a member holds has no TTL; one let go expires after `idleMs`.
 * Every script moves the session's entry in the registry's holdings index with it, so reaping a
 * dead member never releases what a session still to be adopted holds.
 */
export class RedisSessionStore implements SessionStore {
  private readonly redis: RedisClient & SessionCommands;

  constructor(
    redis: RedisClient,
    private readonly keys: RedisKeys,
  ) {
    redis.defineCommand("sessionCreate", { numberOfKeys: 2, lua: CREATE });
    redis.defineCommand("sessionAdopt", { numberOfKeys: 5, lua: ADOPT });
    redis.defineCommand("sessionLetGo", { numberOfKeys: 4, lua: LET_GO });
    redis.defineCommand("sessionExpired", { numberOfKeys: 1, lua: EXPIRED });
    redis.defineCommand("sessionReleased", { numberOfKeys: 2, lua: RELEASED });
    redis.defineCommand("sessionDelete", { numberOfKeys: 2, lua: DELETE });
    redis.defineCommand("sessionSet", { numberOfKeys: 1, lua: SET_IF_EXISTS });
    redis.defineCommand("sessionRemind", { numberOfKeys: 1, lua: REMIND });
    this.redis = redis as RedisClient & SessionCommands;
  }

  async create(session: NewSession, owner: string, now: number, epoch = 1): Promise<void> {
    const fields: (string | number)[] = ["principal", session.principal, "sessionId", session.sessionId, "protocolVersion", session.protocolVersion];
    if (session.clientInfo !== undefined) fields.push("clientInfo", JSON.stringify(session.clientInfo));
    if (session.capabilities !== undefined) fields.push("capabilities", JSON.stringify(session.capabilities));
    await unavailable(this.redis.sessionCreate(this.keys.sessionRecord(session.principal, session.sessionId), this.keys.instanceRecords(owner), member(session), owner, now, epoch, ...fields));
  }

  async get(key: SessionKey): Promise<SessionRecord | undefined> {
    return decodeRecord(await unavailable(this.redis.hgetall(this.keys.sessionRecord(key.principal, key.sessionId))));
  }

  async adopt(key: SessionKey, owner: string, now: number): Promise<{ record: SessionRecord; previous: string | undefined; notices: string[] } | undefined> {
    const adopted = await unavailable(
      this.redis.sessionAdopt(
        this.keys.sessionRecord(key.principal, key.sessionId),
        this.keys.instanceRecords(owner),
        this.keys.instanceSessions(owner),
        this.keys.orphans(),
        this.keys.session(key.principal, key.sessionId),
        owner,
        member(key),
        this.keys.prefix,
        now,
        holdingsMember(key),
      ),
    );
    if (adopted === null) return undefined;
    const record = await this.get(key);
    if (record === undefined) return undefined;
    // As this adoption left it (another may have followed by now).
    const [epoch, old, notices] = adopted;
    return { record: { ...record, owner, epoch }, previous: old === "" || old === owner ? undefined : old, notices: decodeNotices(notices) };
  }

  async remind(key: SessionKey, notice: string): Promise<boolean> {
    return (await unavailable(this.redis.sessionRemind(this.keys.sessionRecord(key.principal, key.sessionId), notice, MAX_NOTICES))) === 1;
  }

  async touch(key: SessionKey, now: number): Promise<void> {
    await unavailable(this.redis.sessionSet(this.keys.sessionRecord(key.principal, key.sessionId), "lastSeen", now));
  }

  async setLogLevel(key: SessionKey, level: string): Promise<void> {
    await unavailable(this.redis.sessionSet(this.keys.sessionRecord(key.principal, key.sessionId), "logLevel", level));
  }

  async delete(key: SessionKey): Promise<void> {
    await unavailable(this.redis.sessionDelete(this.keys.sessionRecord(key.principal, key.sessionId), this.keys.orphans(), member(key), this.keys.prefix));
  }

  async letGo(key: SessionKey, owner: string, epoch: number, idleMs: number): Promise<void> {
    await unavailable(
      this.redis.sessionLetGo(
        this.keys.sessionRecord(key.principal, key.sessionId),
        this.keys.instanceRecords(owner),
        this.keys.instanceSessions(owner),
        this.keys.orphans(),
        member(key),
        owner,
        epoch,
        idleMs,
        holdingsMember(key),
        "",
      ),
    );
  }

  async orphan(owner: string, idleMs: number): Promise<SessionKey[]> {
    const orphaned: SessionKey[] = [];
    for (const entry of await this.redis.smembers(this.keys.instanceRecords(owner))) {
      const key = parseMember(entry);
      if (key === undefined) continue;
      const released = await this.redis.sessionLetGo(
        this.keys.sessionRecord(key.principal, key.sessionId),
        this.keys.instanceRecords(owner),
        this.keys.instanceSessions(owner),
        this.keys.orphans(),
        entry,
        owner,
        0,
        idleMs,
        holdingsMember(key),
        // Only while the claim stands: once the owner read it (it heartbeat again), the sessions
        // are its own to let go, and one it adopted again since is not the reaper's to touch.
        this.keys.instanceReaped(owner),
      );
      if (released === 1) orphaned.push(key);
    }
    return orphaned;
  }

  async expired(_now: number, retryMs: number): Promise<SessionKey[]> {
    const gone: SessionKey[] = [];
    for (;;) {
      const batch = await this.redis.sessionExpired(this.keys.orphans(), this.keys.prefix, retryMs);
      for (const entry of batch) {
        const key = parseMember(entry);
        if (key !== undefined) gone.push(key);
      }
      if (batch.length < 500) return gone;
    }
  }

  async released(key: SessionKey): Promise<void> {
    await this.redis.sessionReleased(this.keys.sessionRecord(key.principal, key.sessionId), this.keys.orphans(), member(key));
  }

  /** The connection belongs to whoever made it (see `RedisEngine`). */
  async close(): Promise<void> {}
}

/**
 * A session in the indexes: JSON `[principal, sessionId, encoded principal, encoded id]` (the
 * holdings index uses the first two; scripts build record keys from the last two).
 */
function member(key: SessionKey): string {
  return JSON.stringify([key.principal, key.sessionId, encodeURIComponent(key.principal), encodeURIComponent(key.sessionId)]);
}

/** A session in the registry's holdings index (`instance-sessions:<id>`), as the registry writes it. */
function holdingsMember(key: SessionKey): string {
  return JSON.stringify([key.principal, key.sessionId]);
}

function parseMember(entry: string): SessionKey | undefined {
  try {
    const [principal, sessionId] = JSON.parse(entry) as unknown[];
    return typeof principal === "string" && typeof sessionId === "string" ? { principal, sessionId } : undefined;
  } catch {
    return undefined;
  }
}

function decodeRecord(hash: Record<string, string>): SessionRecord | undefined {
  const { principal, sessionId, protocolVersion, owner, epoch, lastSeen, clientInfo, capabilities, logLevel } = hash;
  if (principal === undefined || sessionId === undefined || protocolVersion === undefined) return undefined;
  const json = (text: string | undefined): unknown => {
    if (text === undefined) return undefined;
    try {
      return JSON.parse(text);
    } catch {
      return undefined;
    }
  };
  return {
    principal,
    sessionId,
    protocolVersion,
    owner: owner ?? "",
    epoch: Number(epoch ?? 0),
    lastSeen: Number(lastSeen ?? 0),
    ...(clientInfo !== undefined && { clientInfo: json(clientInfo) }),
    ...(capabilities !== undefined && { capabilities: json(capabilities) }),
    ...(logLevel !== undefined && { logLevel }),
  };
}

/** The notices an adoption took from the record (a JSON array of strings; anything else: none). */
function decodeNotices(text: string): string[] {
  if (text === "") return [];
  try {
    const notices: unknown = JSON.parse(text);
    return Array.isArray(notices) ? notices.filter((notice): notice is string => typeof notice === "string") : [];
  } catch {
    return [];
  }
}
