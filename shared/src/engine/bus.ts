import { z } from "zod";
import { isJsonObject } from "../protocol/wire-methods.js";
import { listBodySchema } from "./catalog-store.js";
import type { UpdateToPublish } from "./update-log.js";

/**
 * Messages between broker instances and workers. Decoded at the boundary: a message that does
 * not parse is logged and dropped, never thrown into a delivery loop.
 */
/** One broker's sessions and listen streams, as the operator console shows them (at most the census's limit of each; `count`: all). */
export const memberCensusSchema = z.object({
  legacy: z.object({
    count: z.number().int(),
    sessions: z.array(
      z.object({
        sessionId: z.string(),
        principal: z.string(),
        protocolVersion: z.string(),
        /** The broker's names of the resources it subscribes to. */
        subscriptions: z.array(z.string()),
        /** Its standalone GET stream is open. */
        streaming: z.boolean(),
        /** When a request last came for it on this member (epoch ms; 0: none since it came here). */
        lastActive: z.number(),
      }),
    ),
  }),
  listens: z.object({
    count: z.number().int(),
    streams: z.array(z.object({ id: z.string(), principal: z.string(), subscriptions: z.array(z.string()), since: z.number() })),
  }),
});
export type MemberCensus = z.infer<typeof memberCensusSchema>;

export const busMessageSchema = z.discriminatedUnion("kind", [
  z.object({
    kind: z.literal("resource.updated"),
    v: z.literal(1),
    origin: z.string(),
    /** The backend that owns the resource. */
    backendId: z.string(),
    /** The subscription key the update matched (the subscribed URI, backend form). */
    key: z.string(),
    /** The URI the backend reported (the key itself, or a sub-resource of it). */
    uri: z.string(),
    /**
     * The rest of what the backend's notification said besides its URI (`_meta` and anything else,
     * less the hop's own `_meta` keys), passed on to clients as it came; absent when it said nothing more.
     */
    params: z.record(z.string(), z.unknown()).optional(),
    /** When the broker received it from the backend (epoch ms), for latency metrics. */
    at: z.number(),
    /**
     * One backend update is published once per subscribed key it falls under (the URI and its
     * subscribed ancestors): `update` (unique per origin) and `keys` (how many) let a receiver
     * give a session subscribed to several of them the update once.
     */
    update: z.number().int().nonnegative(),
    keys: z.number().int().min(1),
    /**
     * The update's place in the cluster's order of events (see `UpdateLog`): the same for all its
     * keys, larger for every later update or catalog change. Event ids and resume cursors carry it.
     */
    position: z.number().int().nonnegative(),
  }),
  /** To a backend's watcher (the instance holding its lease, `to`): watch (backend, uri) upstream and answer on `replyTo`. */
  z.object({
    kind: z.literal("watch.ensure"),
    v: z.literal(1),
    origin: z.string(),
    /** The instance the sender found holding the lease: only it answers. */
    to: z.string(),
    id: z.number().int(),
    replyTo: z.string(),
    backendId: z.string(),
    uri: z.string(),
  }),
  /** To a backend's watcher: the cluster-wide count for (backend, uri) reached zero. */
  z.object({ kind: z.literal("watch.release"), v: z.literal(1), origin: z.string(), backendId: z.string(), uri: z.string() }),
  /**
   * Lists of a backend changed (on `CHANNEL.catalog`): the versions now stored in the cluster
   * catalog, with their bodies, at one position. Published by the catalog store in the same step as
   * the store (see `CatalogStore.put`), so it arrives in position order with resource updates;
   * members that applied older versions apply these at once.
   */
  z.object({
    kind: z.literal("catalog.changed"),
    v: z.literal(1),
    origin: z.string(),
    backendId: z.string(),
    lists: z.array(z.object({ kind: z.enum(["tools", "prompts", "resources", "resourceTemplates"]), body: listBodySchema, version: z.number().int().positive() })).min(1),
    position: z.number().int().nonnegative(),
  }),
  /**
   * Subscriptions a limits job removed (the limits were lowered), on `CHANNEL.revocations`: the
   * member holding the session or listen stream tells its client.
   */
  z.object({
    kind: z.literal("subscriptions.revoked"),
    v: z.literal(1),
    origin: z.string(),
    principal: z.string(),
    sessionId: z.string(),
    /** Backend resources, in the backend's form. */
    resources: z.array(z.object({ backendId: z.string(), uri: z.string() })),
    limit: z.enum(["session", "principal", "global"]),
    max: z.number().int().positive(),
  }),
  /**
   * To a legacy session's previous holder (on its `CHANNEL.replies`): the session moved to `to` at
   * `epoch`; the previous holder lets go of it (closes its stream, keeps what it holds in the registry).
   */
  z.object({
    kind: z.literal("session.moved"),
    v: z.literal(1),
    origin: z.string(),
    principal: z.string(),
    sessionId: z.string(),
    epoch: z.number().int().positive(),
    to: z.string(),
  }),
  /**
   * A legacy session that had moved between members ended (DELETE, idle expiry), on
   * `CHANNEL.sessions`: a member it left may still wait for its client's answer to a question it
   * asked before the move (questions outlive a move), which fails now instead of at its call's timeout.
   */
  z.object({
    kind: z.literal("session.ended"),
    v: z.literal(1),
    origin: z.string(),
    principal: z.string(),
    sessionId: z.string(),
  }),
  /**
   * To a legacy session's holder (on its `CHANNEL.replies`): the client's answer to a request the
   * holder passed on to it from a backend, which the client POSTed to another member.
   */
  z.object({
    kind: z.literal("client.answer"),
    v: z.literal(1),
    origin: z.string(),
    principal: z.string(),
    sessionId: z.string(),
    /** The client's JSON-RPC response, as it sent it. */
    answer: z.record(z.string(), z.unknown()),
  }),
  /**
   * To the member holding a modern client's call to a legacy backend (on its `CHANNEL.replies`):
   * the client's retry, with its answers, reached another member (see README, "Questions from backends").
   */
  z.object({
    kind: z.literal("held.retry"),
    v: z.literal(1),
    origin: z.string(),
    id: z.number().int(),
    replyTo: z.string(),
    call: z.string(),
    principal: z.string(),
    inputResponses: z.unknown(),
  }),
  /**
   * To the holder of a `held.retry` (on its `CHANNEL.replies`, after the retry): the client's request
   * that carried retry `id` from `origin` was cancelled, or its connection closed. The holder ends
   * the call as for a retry it took itself; a round it already answered stays answered.
   */
  z.object({ kind: z.literal("held.cancel"), v: z.literal(1), origin: z.string(), id: z.number().int() }),
  /** The holder's answer to `held.retry`: the round's result (the call's, or its next questions), or an error. */
  z.object({
    kind: z.literal("held.round"),
    v: z.literal(1),
    origin: z.string(),
    id: z.number().int(),
    result: z.record(z.string(), z.unknown()).optional(),
    error: z.object({ code: z.number().int(), message: z.string(), data: z.unknown().optional() }).optional(),
  }),
  /** To every broker (on `CHANNEL.console`): an operator console asks for each member's sessions and listen streams. */
  z.object({
    kind: z.literal("console.census"),
    v: z.literal(1),
    origin: z.string(),
    id: z.number().int(),
    replyTo: z.string(),
    /** At most this many sessions and streams per member. */
    limit: z.number().int().positive(),
  }),
  /** A broker's answer to `console.census`. */
  z.object({
    kind: z.literal("console.sessions"),
    v: z.literal(1),
    origin: z.string(),
    id: z.number().int(),
    census: memberCensusSchema,
  }),
  /**
   * To every member (on `CHANNEL.console`): an operator console's live feed is open on `origin`;
   * for `ttlMs` from now, the member copies the backend updates it publishes to `CHANNEL.consoleFeed`
   * (the console repeats this while its feed stays open).
   */
  z.object({
    kind: z.literal("console.listen"),
    v: z.literal(1),
    origin: z.string(),
    ttlMs: z.number().int().positive(),
  }),
  /** Backend updates a watching member published lately (on `CHANNEL.consoleFeed`, while a console listens). */
  z.object({
    kind: z.literal("console.updates"),
    v: z.literal(1),
    origin: z.string(),
    /** At most a few hundred per message: the rest are counted in `dropped`. */
    updates: z.array(z.object({ backendId: z.string(), uri: z.string(), at: z.number() })),
    dropped: z.number().int().nonnegative(),
  }),
  /**
   * From a broker to itself (on its `CHANNEL.replies`): published in the step that reserved
   * `position` (see `UpdateLog.reserve`), it arrives after every message published before it on the
   * channels this member receives and before every one published after, so once it is back, every
   * event handed out before that position has reached this member and none after it (see
   * `BusBarrier`).
   */
  z.object({ kind: z.literal("bus.barrier"), v: z.literal(1), origin: z.string(), id: z.number().int(), position: z.number().int().nonnegative() }),
  /** The watcher's answer to `watch.ensure`. */
  z.object({
    kind: z.literal("watch.result"),
    v: z.literal(1),
    origin: z.string(),
    id: z.number().int(),
    error: z.object({ code: z.string(), message: z.string(), data: z.record(z.string(), z.unknown()).optional() }).optional(),
  }),
]);

export type BusMessage = z.infer<typeof busMessageSchema>;
export type ResourceUpdatedMessage = Extract<BusMessage, { kind: "resource.updated" }>;
export type BarrierMessage = Extract<BusMessage, { kind: "bus.barrier" }>;

const isCount = (value: unknown, min: number): value is number => typeof value === "number" && Number.isInteger(value) && value >= min;

/**
 * The `resource.updated` of one backend update for one of its keys. Built field by field, not as
 * `{ ...update, key, keys, position }`: V8 (Node 20) adds properties to a spread's copy on its slow
 * path, ~2.5 µs a message against ~0.1 µs (a micro-benchmark), once per update and key on the
 * watcher (~9 % of the memory engine broker's CPU at 20k updates/s, step profile).
 */
export function resourceUpdatedMessage(update: UpdateToPublish, key: string, keys: number, position: number): ResourceUpdatedMessage {
  return { kind: update.kind, v: update.v, origin: update.origin, backendId: update.backendId, key, uri: update.uri, params: update.params, at: update.at, update: update.update, keys, position };
}

/**
 * A `resource.updated` as JSON without its position: the encoding ends `,"position":` so that the
 * one who assigns the position (the update log, atomically with the publish) appends it and `}`.
 */
export function encodeUpdateHead(message: UpdateToPublish, key: string, keys: number): string {
  const { kind, v, origin, backendId, uri, params, at, update } = message;
  const json = JSON.stringify({ kind, v, origin, backendId, key, uri, params, at, update, keys });
  return `${json.slice(0, -1)},"position":`;
}

/**
 * A `catalog.changed` as JSON without its position: the encoding ends `,"position":` so that the
 * catalog store appends it (and `}`) as it stores.
 */
export function encodeCatalogHead(message: Omit<Extract<BusMessage, { kind: "catalog.changed" }>, "position">): string {
  const { kind, v, origin, backendId, lists } = message;
  const json = JSON.stringify({ kind, v, origin, backendId, lists });
  return `${json.slice(0, -1)},"position":`;
}

/**
 * A `bus.barrier` as JSON without its position: the encoding ends `,"position":` so that the
 * reservation appends the position it takes (and `}`).
 */
export function encodeBarrierHead(message: Omit<BarrierMessage, "position">): string {
  const { kind, v, origin, id } = message;
  return `${JSON.stringify({ kind, v, origin, id }).slice(0, -1)},"position":`;
}

/** A bus message as JSON. */
export function encodeBusMessage(message: BusMessage): string {
  if (message.kind !== "resource.updated") return JSON.stringify(message);
  return `${encodeUpdateHead(message, message.key, message.keys)}${message.position}}`;
}

/**
 * Decodes a bus message as `busMessageSchema` does. `resource.updated`, one per backend update and
 * subscribed key, is checked by hand (the schema's union parse was a tenth of a receiving
 * instance's CPU); anything else, and anything the hand check refuses, goes through the schema.
 */
export function decodeBusMessage(value: unknown): { ok: true; message: BusMessage } | { ok: false; reason: string } {
  if (typeof value === "object" && value !== null && (value as { kind?: unknown }).kind === "resource.updated") {
    const m = value as Record<string, unknown>;
    if (
      m.v === 1 &&
      typeof m.origin === "string" &&
      typeof m.backendId === "string" &&
      typeof m.key === "string" &&
      typeof m.uri === "string" &&
      (m.params === undefined || isJsonObject(m.params)) &&
      typeof m.at === "number" &&
      Number.isFinite(m.at) &&
      isCount(m.update, 0) &&
      isCount(m.keys, 1) &&
      isCount(m.position, 0)
    ) {
      const message: ResourceUpdatedMessage = { kind: "resource.updated", v: 1, origin: m.origin, backendId: m.backendId, key: m.key, uri: m.uri, at: m.at, update: m.update, keys: m.keys, position: m.position };
      if (m.params !== undefined) message.params = m.params;
      return { ok: true, message };
    }
  }
  const decoded = busMessageSchema.safeParse(value);
  if (decoded.success) return { ok: true, message: decoded.data };
  return { ok: false, reason: decoded.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`).join("; ") };
}

/**
 * Publish/subscribe between processes: one channel per subscription key, one per backend watcher
 * and one reply channel per instance.
 *
 * Delivery guarantee: at-most-once per subscribed process, in publish order per channel; a
 * subscriber that is not subscribed when a message is published does not get it. A handler
 * throwing does not stop delivery to other channels.
 * A process gets its own messages back on the channels it subscribes to, like any other: resource
 * updates reach every member's sessions the same way, in the order the cluster gave them.
 */
export interface Bus {
  publish(channel: string, message: BusMessage): Promise<void>;
  /**
   * Starts receiving a channel. Idempotent per channel; `handler` is the single sink for all
   * channels of this bus instance, set with `onMessage`.
   */
  subscribe(channel: string): Promise<void>;
  unsubscribe(channel: string): Promise<void>;
  /**
   * Sets the one handler for every channel. It gets decoded, valid messages only: an
   * implementation that crosses a process boundary decodes each message with `busMessageSchema`
   * and logs and drops what does not parse, so receivers never validate again.
   */
  onMessage(handler: (channel: string, message: BusMessage) => void): void;
  /**
   * Adds a handler for "messages may have been lost": the bus lost a connection and has it back.
   * `receive`: messages to this process may be lost (it has resubscribed), so receivers make up
   * for it; `publish`: publishes from this process may have failed, so publishers send what they
   * may have lost again. An extra `updated` is harmless, a missed one is not. `publish-lost`: the
   * publishing connection just dropped (a `publish` gap follows once it is back).
   */
  onGap(handler: (side: GapSide) => void): void;
  close(): Promise<void>;
}

/** Which side of a bus connection lost or may have lost messages (see `Bus.onGap`). */
export type GapSide = "receive" | "publish" | "publish-lost";

/** Channel names; the Redis engine prefixes them (see keys.ts). */
export const CHANNEL = {
  resource: (backendId: string, key: string) => `res:${backendId}:${key}`,
  /** Requests to whichever instance holds the backend's watcher lease. */
  watcher: (backendId: string) => `watch:${backendId}`,
  /** Answers to one instance. */
  replies: (instanceId: string) => `reply:${instanceId}`,
  /** Catalog changes, for every member. */
  catalog: "catalog",
  /** Subscriptions removed by a limits job, for every member. */
  revocations: "revocations",
  /** Legacy sessions that ended after moving between members, for every member (see `session.ended`). */
  sessions: "sessions",
  /** The operator console's census requests and feed announcements, for every member. */
  console: "console",
  /** Backend updates copied for open console feeds (see `console.listen`). */
  consoleFeed: "console-feed",
} as const;

/** The lease whose holder watches a backend upstream for the whole cluster. */
export const watcherLease = (backendId: string) => `watcher:${backendId}`;
