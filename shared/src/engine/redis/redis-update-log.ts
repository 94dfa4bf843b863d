import type { RedisClient } from "./redis-client.js";
import { CHANNEL, encodeBarrierHead, encodeUpdateHead, type BarrierMessage } from "../bus.js";
import type { KeyStamp, UpdateLog, UpdateToPublish } from "../update-log.js";
import type { RedisKeys } from "./keys.js";
import { corkUntilTickEnds } from "./redis-bus.js";

/**
 * Publishes the updates of one tick in one step. KEYS: the position counter, then each update's
 * backend stamps hash. ARGV: the number of updates, the floor (the newest position this member
 * knows), then per update: n, its time (`at`), then n keys, n channels and n message heads (each
 * ending `"position":`). Each update takes the next position, stamps every key with it (and with
 * its time, for the console) and publishes each message with it appended. Returns the positions, in order. A counter below the floor (Redis lost
 * its data, and the members have not written it back yet) continues from the floor: positions
 * never go backwards for what this member published.
 */
const PUBLISH = `
local m = tonumber(ARGV[1])
local floor = tonumber(ARGV[2])
local at = 3
local positions = {}
for j = 1, m do
  local n = tonumber(ARGV[at])
  local time = ARGV[at + 1]
  at = at + 1
  local position = redis.call('INCR', KEYS[1])
  if position <= floor then
    position = floor + 1
    redis.call('SET', KEYS[1], position)
  end
  for i = 1, n do
    redis.call('HSET', KEYS[1 + j], 'u' .. ARGV[at + i], position, 't' .. ARGV[at + i], time)
    redis.call('PUBLISH', ARGV[at + n + i], ARGV[at + 2 * n + i] .. position .. '}')
  end
  positions[j] = position
  at = at + 1 + 3 * n
end
return positions
`;

/** KEYS: the position counter, the stamps hash. ARGV: key. The watch starts at the current position. */
const WATCHED = `
redis.call('HSET', KEYS[2], 's' .. ARGV[1], redis.call('GET', KEYS[1]) or '0')
redis.call('HDEL', KEYS[2], 'u' .. ARGV[1], 't' .. ARGV[1])
return 1
`;

/** KEYS: the stamps hash. ARGV: key. The watch ended: nothing is known of the key until it is watched again. */
const UNWATCHED = `
redis.call('HDEL', KEYS[1], 'u' .. ARGV[1], 's' .. ARGV[1], 't' .. ARGV[1])
return 1
`;

/**
 * KEYS: the position counter. ARGV: floor, then optionally a channel and a message head (ending
 * `"position":`). The next position, handed out to no update (see `UpdateLog.reserve`); from above
 * the floor, as a publish's. The message is published with the position appended in the same step.
 */
const RESERVE = `
local position = redis.call('INCR', KEYS[1])
if position <= tonumber(ARGV[1]) then
  position = tonumber(ARGV[1]) + 1
  redis.call('SET', KEYS[1], position)
end
if ARGV[2] then redis.call('PUBLISH', ARGV[2], ARGV[3] .. position .. '}') end
return position
`;

/**
 * KEYS: the position counter, the lost mark. ARGV: floor. Redis lost the counter (restarted
 * without it, or from an older snapshot): it goes on from at least the floor, and the mark says
 * that positions up to the floor may have been handed out twice (since the loss, publishes and
 * reservations went on from their own members' floors, which may be lower than another's).
 */
const RAISE = `
if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[1]) then redis.call('SET', KEYS[2], ARGV[1]) end
return 1
`;

/**
 * The publish script's command name. It stays out of the commands connection's auto-pipelining
 * (see the engine), as the bus's publishes do (see `RedisBus.publish`): an auto-pipelined batch
 * waits for the previous batch's replies and goes out only in the event loop's check phase, and
 * its pipeline objects survived young-generation GCs (measured on the watcher at 5k updates/s:
 * 1.8 MB promoted per scavenge auto-pipelined, 0.6 MB without).
 */
export const UPDATE_PUBLISH_COMMAND = "updatePublish";

/**
 * The watch-start script's command name. It stays out of auto-pipelining too, so that it reaches
 * Redis before any update published after it: an auto-pipelined command waits for the check phase,
 * and a publish issued later (the backend's first update after the subscribe's answer, in the same
 * turn) overtook it; its clearing of the key's last-update stamp then erased that update's, and a
 * session resuming later was not told of it (seen in the session-takeover test, under load).
 */
export const UPDATE_WATCHED_COMMAND = "updateWatched";

/** The watch end's command name: out of auto-pipelining as well, so it stays before the next watch's start. */
export const UPDATE_UNWATCHED_COMMAND = "updateUnwatched";

type UpdateLogCommands = {
  updateRaise(positions: string, lost: string, floor: number): Promise<number>;
  updateReserve(positions: string, floor: number, ...mark: string[]): Promise<number>;
  updatePublish(numberOfKeys: number, ...keysAndArgs: (string | number)[]): Promise<number[]>;
  updateWatched(positions: string, stamps: string, key: string): Promise<number>;
  updateUnwatched(stamps: string, key: string): Promise<number>;
};

/** An update waiting for the end of its tick, to be published with the others of that tick. */
interface Pending {
  stamps: string;
  args: (string | number)[];
  resolve: (position: number) => void;
  reject: (error: unknown) => void;
}

/**
 * The update log in Redis: the cluster's position counter (shared with the catalog store), one
 * stamps hash per backend (`u<key>`: last update, `t<key>`: its time, `s<key>`: watch start), and the publish of an
 * update's messages in the same script, on the command connection. The updates of one tick (a
 * backend's event-stream chunk brings several) go out in one script call: one command, however
 * many updates, each still at its own position, in order.
 */
export class RedisUpdateLog implements UpdateLog {
  private readonly redis: RedisClient & UpdateLogCommands;
  /** The newest position this member published, reserved or raised the counter to. */
  private floor = 0;

  constructor(
    redis: RedisClient,
    private readonly keys: RedisKeys,
  ) {
    redis.defineCommand(UPDATE_PUBLISH_COMMAND, { lua: keys.script(PUBLISH) });
    redis.defineCommand(UPDATE_WATCHED_COMMAND, { numberOfKeys: 2, lua: WATCHED });
    redis.defineCommand(UPDATE_UNWATCHED_COMMAND, { numberOfKeys: 1, lua: UNWATCHED });
    redis.defineCommand("updateRaise", { numberOfKeys: 2, lua: RAISE });
    redis.defineCommand("updateReserve", { numberOfKeys: 1, lua: keys.script(RESERVE) });
    this.redis = redis as RedisClient & UpdateLogCommands;
  }

  /** Updates of this tick not sent yet (see `flush`). */
  private pending: Pending[] = [];

  /** Fails at once while the connection is down (not queued): the caller makes do locally, the gap is announced later. */
  publish(update: UpdateToPublish, keys: readonly string[]): Promise<number> {
    if (this.redis.status !== "ready") return Promise.reject(new Error(`Redis is not connected (${this.redis.status})`));
    const channels = keys.map((key) => this.keys.channel(CHANNEL.resource(update.backendId, key)));
    const heads = keys.map((key) => encodeUpdateHead(update, key, keys.length));
    return new Promise((resolve, reject) => {
      if (this.pending.length === 0) process.nextTick(() => this.flush());
      this.pending.push({ stamps: this.keys.stamps(update.backendId), args: [keys.length, update.at, ...keys, ...channels, ...heads], resolve, reject });
    });
  }

  /** Sends the tick's updates in one script call; each caller hears its own position. */
  private flush(): void {
    const batch = this.pending;
    this.pending = [];
    if (this.redis.status !== "ready") {
      const error = new Error(`Redis is not connected (${this.redis.status})`);
      for (const update of batch) update.reject(error);
      return;
    }
    corkUntilTickEnds(this.redis);
    const keys = [this.keys.positions(), ...batch.map((update) => update.stamps)];
    this.redis.updatePublish(keys.length, ...keys, batch.length, this.floor, ...batch.flatMap((update) => update.args)).then(
      (positions) => {
        batch.forEach((update, i) => {
          const position = Number(positions[i]);
          if (position > this.floor) this.floor = position;
          update.resolve(position);
        });
      },
      (error: unknown) => {
        for (const update of batch) update.reject(error);
      },
    );
  }

  async watched(backendId: string, key: string): Promise<void> {
    await this.redis.updateWatched(this.keys.positions(), this.keys.stamps(backendId), key);
  }

  async unwatched(backendId: string, key: string): Promise<void> {
    await this.redis.updateUnwatched(this.keys.stamps(backendId), key);
  }

  async updatedAt(backendId: string, keys: readonly string[]): Promise<(number | undefined)[]> {
    if (keys.length === 0) return [];
    const values = await this.redis.hmget(this.keys.stamps(backendId), ...keys.map((key) => `t${key}`));
    return values.map((value) => (value === null ? undefined : Number(value)));
  }

  async stamps(backendId: string, keys: readonly string[]): Promise<KeyStamp[]> {
    if (keys.length === 0) return [];
    const values = await this.redis.hmget(this.keys.stamps(backendId), ...keys.flatMap((key) => [`u${key}`, `s${key}`]));
    return keys.map((_, i) => {
      const since = values[2 * i + 1];
      return { updated: Number(values[2 * i] ?? 0), since: since === null || since === undefined ? undefined : Number(since) };
    });
  }

  /** To `position` or this member's own floor, whichever is higher (it reserved positions no client event carries yet). */
  async raiseTo(position: number): Promise<void> {
    if (position > this.floor) this.floor = position;
    await this.redis.updateRaise(this.keys.positions(), this.keys.positionsLost(), this.floor);
  }

  async lostUpTo(): Promise<number> {
    return Number((await this.redis.get(this.keys.positionsLost())) ?? 0);
  }

  /** The newest position this member published, reserved or raised the counter to: what it hands out next comes after it. */
  get floorPosition(): number {
    return this.floor;
  }

  /** This member handed out `position` otherwise (a catalog change): the floor follows. */
  handedOut(position: number): void {
    if (position > this.floor) this.floor = position;
  }

  async current(): Promise<number> {
    return Number((await this.redis.get(this.keys.positions())) ?? 0);
  }

  async reserve(mark?: { channel: string; message: Omit<BarrierMessage, "position"> }): Promise<number> {
    const published = mark === undefined ? [] : [this.keys.channel(mark.channel), encodeBarrierHead(mark.message)];
    const position = Number(await this.redis.updateReserve(this.keys.positions(), this.floor, ...published));
    if (position > this.floor) this.floor = position;
    return position;
  }
}
