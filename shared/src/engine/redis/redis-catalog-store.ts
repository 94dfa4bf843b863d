import type { RedisClient } from "./redis-client.js";
import { CHANNEL, encodeCatalogHead } from "../bus.js";
import { listBodySchema, type CatalogKind, type CatalogStore, type ListChange, type Positions, type StoredList } from "../catalog-store.js";
import type { RedisKeys } from "./keys.js";
import { unavailable } from "./unavailable.js";

/**
 * KEYS: the cluster's position counter, then one list hash per change. ARGV: the catalog channel,
 * the announcement's head (ending `"position":`), then per change its expected version and body
 * (JSON), then the floor (as the update log's publish: a counter Redis lost goes on from above
 * what this member handed out). Stores all or none, at one position, and announces them in the
 * same step, so the announcement takes its place among resource updates in position order.
 * Returns the position when stored, 0 when a stored version is not the expected one.
 */
const PUT = `
for i = 2, #KEYS do
  if tonumber(redis.call('HGET', KEYS[i], 'version') or '0') ~= tonumber(ARGV[2 * i - 1]) then return 0 end
end
local position = redis.call('INCR', KEYS[1])
local floor = tonumber(ARGV[#ARGV])
if position <= floor then
  position = floor + 1
  redis.call('SET', KEYS[1], position)
end
for i = 2, #KEYS do
  redis.call('HSET', KEYS[i], 'version', tonumber(ARGV[2 * i - 1]) + 1, 'position', position, 'body', ARGV[2 * i])
end
redis.call('PUBLISH', ARGV[1], ARGV[2] .. position .. '}')
return position
`;

type CatalogCommands = { catalogPut(keyCount: number, ...args: (string | number)[]): Promise<number> };

/**
 * The catalog in Redis: one hash per (backend, kind) with its version, position and body (JSON).
 * A put is one script: compare the version, take the next cluster position, store.
 */
export class RedisCatalogStore implements CatalogStore, Positions {
  private readonly redis: RedisClient & CatalogCommands;

  constructor(
    redis: RedisClient,
    private readonly keys: RedisKeys,
    /** The newest position this member handed out, which its changes go on from (see `RedisUpdateLog.floorPosition`). */
    private readonly positions: { readonly floorPosition: number; handedOut(position: number): void },
  ) {
    redis.defineCommand("catalogPut", { lua: keys.script(PUT) });
    this.redis = redis as RedisClient & CatalogCommands;
  }

  /** A body that does not decode (written by another version, or damaged) is returned as `invalid`, with no items. */
  async get(backendId: string, kind: CatalogKind): Promise<StoredList | undefined> {
    const [version, position, body] = await unavailable(this.redis.hmget(this.keys.catalogList(backendId, kind), "version", "position", "body"));
    if (version === null || version === undefined || body === null || body === undefined) return undefined;
    const stored = { version: Number(version), position: Number(position ?? 0) };
    let parsed: unknown;
    try {
      parsed = JSON.parse(body);
    } catch {
      return { ...stored, items: [], invalid: "not JSON" };
    }
    const decoded = listBodySchema.safeParse(parsed);
    if (!decoded.success) return { ...stored, items: [], invalid: decoded.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`).join("; ") };
    return { ...stored, ...decoded.data };
  }

  async put(backendId: string, changes: readonly ListChange[], origin: string): Promise<StoredList[] | undefined> {
    const lists = changes.map(({ kind, expected, body }) => ({ kind, body, version: expected + 1 }));
    const head = encodeCatalogHead({ kind: "catalog.changed", v: 1, origin, backendId, lists });
    const keys = [this.keys.positions(), ...changes.map(({ kind }) => this.keys.catalogList(backendId, kind))];
    const args = [this.keys.channel(CHANNEL.catalog), head, ...changes.flatMap(({ expected, body }) => [expected, JSON.stringify(body)]), this.positions.floorPosition];
    const position = await unavailable(this.redis.catalogPut(keys.length, ...keys, ...args));
    if (position === 0) return undefined;
    this.positions.handedOut(position);
    return changes.map(({ expected, body }) => ({ ...body, version: expected + 1, position }));
  }

  async current(): Promise<number> {
    return Number((await unavailable(this.redis.get(this.keys.positions()))) ?? 0);
  }

  /** The connection belongs to whoever made it (see `RedisEngine`). */
  async close(): Promise<void> {}
}
