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
  z.object({
    kind: z.literal("list.changed"),
    v: z.literal(1),
    origin: z.string(),
    list: z.enum(["tools", "prompts", "resources"]),
    /** The catalog version the change produced. */
    version: z.number(),
  }),
]);

export type BusMessage = z.infer<typeof busMessageSchema>;
export type ResourceUpdatedMessage = Extract<BusMessage, { kind: "resource.updated" }>;

/**
 * Publish/subscribe between processes, one channel per subscription key plus a `lists` channel.
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
  close(): Promise<void>;
}

/** Channel names; the Redis engine prefixes them (see keys.ts). */
export const CHANNEL = {
  resource: (backendId: string, key: string) => `res:${backendId}:${key}`,
  lists: "lists",
} as const;
