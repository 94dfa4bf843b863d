import type { Redis } from "ioredis";
import { listBodySchema, type CatalogKind, type CatalogStore, type ListBody, type Positions, type StoredList } from "../catalog-store.js";
import type { RedisKeys } from "./keys.js";
import { unavailable } from "./unavailable.js";

/**
 * KEYS: the list's hash, the cluster's position counter. ARGV: expected version, body (JSON).
 * Returns {version, position} when stored, {} when the stored version is not the expected one.
 */
const PUT = `
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if current ~= tonumber(ARGV[1]) then return {} end
local position = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'version', current + 1, 'position', position, 'body', ARGV[2])
return {current + 1, position}
`;

type CatalogCommands = { catalogPut(list: string, positions: string, expected: number, body: string): Promise<number[]> };

/**
 * The catalog in Redis: one hash per (backend, kind) with its version, position and body (JSON).
 * A put is one script: compare the version, take the next cluster position, store.
 */
export class RedisCatalogStore implements CatalogStore, Positions {
  private readonly redis: Redis & CatalogCommands;

  constructor(
    redis: Redis,
    private readonly keys: RedisKeys,
  ) {
    redis.defineCommand("catalogPut", { numberOfKeys: 2, lua: PUT });
    this.redis = redis as Redis & CatalogCommands;
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

  async put(backendId: string, kind: CatalogKind, expected: number, body: ListBody): Promise<StoredList | undefined> {
    const [version, position] = await unavailable(this.redis.catalogPut(this.keys.catalogList(backendId, kind), this.keys.positions(), expected, JSON.stringify(body)));
    if (version === undefined || position === undefined) return undefined;
    return { ...body, version, position };
  }

  async current(): Promise<number> {
    return Number((await unavailable(this.redis.get(this.keys.positions()))) ?? 0);
  }

  /** The connection belongs to whoever made it (see `RedisEngine`). */
  async close(): Promise<void> {}
}
