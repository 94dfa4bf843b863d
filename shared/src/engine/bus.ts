import { z } from "zod";

/**
 * Messages between broker instances and workers. Decoded at the boundary: a message that does
 * not parse is logged and dropped, never thrown into a delivery loop.
 */
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
    /** When the broker received it from the backend (epoch ms), for latency metrics. */
    at: z.number(),
    /**
     * One backend update is published once per subscribed key it falls under (the URI and its
     * subscribed ancestors): `update` (unique per origin) and `keys` (how many) let a receiver
     * give a session subscribed to several of them the update once.
     */
    update: z.number().int().nonnegative(),
    keys: z.number().int().min(1),
  }),
  /** To a backend's watcher (the instance holding its lease): watch (backend, uri) upstream and answer on `replyTo`. */
  z.object({
    kind: z.literal("watch.ensure"),
    v: z.literal(1),
    origin: z.string(),
    id: z.number().int(),
    replyTo: z.string(),
    backendId: z.string(),
    uri: z.string(),
  }),
  /** To a backend's watcher: the cluster-wide count for (backend, uri) reached zero. */
  z.object({ kind: z.literal("watch.release"), v: z.literal(1), origin: z.string(), backendId: z.string(), uri: z.string() }),
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

/**
 * Publish/subscribe between processes: one channel per subscription key, one per backend watcher
 * and one reply channel per instance.
 *
 * Delivery guarantee: at-most-once per subscribed process, in publish order per channel; a
 * subscriber that is not subscribed when a message is published does not get it. A handler
 * throwing does not stop delivery to other channels.
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
   * may have lost again. An extra `updated` is harmless, a missed one is not.
   */
  onGap(handler: (side: "receive" | "publish") => void): void;
  close(): Promise<void>;
}

/** Channel names; the Redis engine prefixes them (see keys.ts). */
export const CHANNEL = {
  resource: (backendId: string, key: string) => `res:${backendId}:${key}`,
  /** Requests to whichever instance holds the backend's watcher lease. */
  watcher: (backendId: string) => `watch:${backendId}`,
  /** Answers to one instance. */
  replies: (instanceId: string) => `reply:${instanceId}`,
} as const;

/** The lease whose holder watches a backend upstream for the whole cluster. */
export const watcherLease = (backendId: string) => `watcher:${backendId}`;
