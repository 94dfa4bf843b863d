import type { Redis } from "ioredis";
import { decodeBusMessage, type Bus, type BusMessage } from "../bus.js";
import type { RedisKeys } from "./keys.js";

/**
 * The bus on Redis pub/sub, one Redis channel per bus channel. Publishing uses the shared command
 * connection; receiving needs a connection of its own (a subscribed connection runs no commands).
 * Messages are JSON, decoded on arrival (`decodeBusMessage`, as `busMessageSchema` says); what does not decode is reported
 * to `onInvalid` and dropped. While the subscriber connection is down, messages are lost (pub/sub
 * keeps nothing): when it is back and resubscribed, `onGap` handlers run so receivers can make up
 * for what they may have missed; the same when the publishing connection is back, for publishers.
 */
export class RedisBus implements Bus {
  private readonly channels = new Set<string>();
  private handler: ((channel: string, message: BusMessage) => void) | undefined;
  private readonly gapHandlers: ((side: "receive" | "publish") => void)[] = [];

  constructor(
    private readonly publisher: Redis,
    private readonly subscriber: Redis,
    private readonly keys: RedisKeys,
    private readonly onInvalid: (channel: string, reason: string) => void,
  ) {
    subscriber.on("message", (redisChannel: string, payload: string) => this.receive(redisChannel, payload));
    this.reportReconnects(subscriber, "receive");
    this.reportReconnects(publisher, "publish");
  }

  /** A connection that is ready again after it had been ready once: a gap on that side. */
  private reportReconnects(connection: Redis, side: "receive" | "publish"): void {
    let wasReady = connection.status === "ready";
    connection.on("ready", () => {
      if (wasReady) for (const handler of this.gapHandlers) handler(side);
      wasReady = true;
    });
  }

  async publish(channel: string, message: BusMessage): Promise<void> {
    await this.publisher.publish(this.keys.channel(channel), JSON.stringify(message));
  }

  async subscribe(channel: string): Promise<void> {
    if (this.channels.has(channel)) return;
    this.channels.add(channel);
    try {
      await this.subscriber.subscribe(this.keys.channel(channel));
    } catch (error) {
      this.channels.delete(channel);
      throw error;
    }
  }

  async unsubscribe(channel: string): Promise<void> {
    if (!this.channels.delete(channel)) return;
    await this.subscriber.unsubscribe(this.keys.channel(channel));
  }

  onMessage(handler: (channel: string, message: BusMessage) => void): void {
    this.handler = handler;
  }

  onGap(handler: (side: "receive" | "publish") => void): void {
    this.gapHandlers.push(handler);
  }

  /** The connections belong to whoever made them (see `RedisEngine`). */
  async close(): Promise<void> {
    this.channels.clear();
    this.handler = undefined;
  }

  private receive(redisChannel: string, payload: string): void {
    const channel = this.keys.channelName(redisChannel);
    if (channel === undefined || !this.channels.has(channel)) return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(payload);
    } catch {
      this.onInvalid(channel, "not JSON");
      return;
    }
    const decoded = decodeBusMessage(parsed);
    if (!decoded.ok) {
      this.onInvalid(channel, decoded.reason);
      return;
    }
    this.handler?.(channel, decoded.message);
  }
}
