import { Cluster, Command } from "ioredis";
import { decodeBusMessage, encodeBusMessage, type Bus, type BusMessage, type GapSide } from "../bus.js";
import type { RedisKeys } from "./keys.js";
import type { RedisClient } from "./redis-client.js";

/**
 * The bus on Redis pub/sub, one Redis channel per bus channel. Publishing uses the shared command
 * connection; receiving needs a connection of its own (a subscribed connection runs no commands).
 * Messages are JSON, decoded on arrival (`decodeBusMessage`, as `busMessageSchema` says); what does not decode is reported
 * to `onInvalid` and dropped. While the subscriber connection is down, messages are lost (pub/sub
 * keeps nothing): when it is back and every wanted channel is subscribed again, `onGap` handlers
 * run so receivers can make up for what they may have missed; the same when the publishing
 * connection is back, for publishers. Both connections are pinged, so a silently dropped one is
 * noticed and reconnected.
 *
 * Redis hands a publisher its own messages back on every channel it also subscribes to, as to any
 * other subscriber: a member's sessions get its own resource updates the way every other member's
 * do, in the order Redis gave them (see `UpdateLog`).
 */
export class RedisBus implements Bus {
  private readonly channels = new Set<string>();
  /** SUBSCRIBEs in flight, by channel. */
  private readonly subscribing = new Map<string, Promise<void>>();
  private handler: ((channel: string, message: BusMessage) => void) | undefined;
  private readonly gapHandlers: ((side: GapSide) => void)[] = [];
  /** Set by `close`: nothing goes to Redis any more. */
  private closed = false;

  private readonly health: NodeJS.Timeout;
  /** On a cluster: checks every `SLOT_CHECK_MS` that the subscriber follows the slot (see the constructor). */
  private follow: NodeJS.Timeout | undefined;

  constructor(
    private readonly publisher: RedisClient,
    private readonly subscriber: RedisClient,
    private readonly keys: RedisKeys,
    private readonly onInvalid: (channel: string, reason: string) => void,
    /** How often both connections are pinged; one that does not answer within it is reconnected. */
    healthIntervalMs = 5_000,
  ) {
    subscriber.on(keys.sharded ? "smessageBuffer" : "messageBuffer", (redisChannel: Buffer, payload: Buffer) => this.receive(redisChannel, payload));
    let subscriberWasReady = subscriber.status === "ready";
    subscriber.on("ready", () => {
      if (subscriberWasReady) void this.resubscribe();
      subscriberWasReady = true;
    });
    let publisherWasReady = publisher.status === "ready";
    publisher.on("ready", () => {
      if (publisherWasReady) this.gap("publish");
      publisherWasReady = true;
    });
    let publisherUp = publisher.status === "ready";
    publisher.on("ready", () => (publisherUp = true));
    publisher.on("close", () => {
      if (publisherUp) this.gap("publish-lost");
      publisherUp = false;
    });
    // A half-open connection (a NAT or load balancer dropped it silently) would lose messages
    // without any error for as long as TCP keep-alive takes to notice: both are pinged instead.
    this.health = setInterval(() => {
      void checkConnection(subscriber, healthIntervalMs);
      void checkConnection(publisher, healthIntervalMs);
    }, healthIntervalMs);
    this.health.unref();
    if (subscriber instanceof Cluster) {
      // Sharded pub/sub on a cluster: the client moves a master's subscriber to the new master
      // after a failover and subscribes it again without a word; messages published meanwhile are
      // lost. Once it is subscribed again, receivers hear of the gap.
      subscriber.on("+subscriber", () => {
        if (this.channels.size > 0) void this.resubscribe();
      });
      // A slot moved to another master (resharding): the old one drops the channels of the slot
      // (an unsolicited SUNSUBSCRIBE, on which the client refreshes its slots), and the client does
      // not subscribe them on the new one. Seen at that refresh, they are subscribed there, then
      // the gap is announced.
      subscriber.on("refresh", () => {
        const now = this.slot === undefined ? undefined : subscriber.slots[this.slot]?.[0];
        if (now === undefined || now === this.owner) return;
        const moved = this.owner !== undefined;
        this.owner = now;
        if (moved && this.channels.size > 0) void this.resubscribe();
      });
      // That SUNSUBSCRIBE can come before every node knows the new owner, and the refresh then
      // finds the old one. The command connection learns the owner from the MOVED answer to a
      // command on the slot: one touches it every second, and a subscriber whose table says
      // otherwise refreshes it (no periodic refresh of the slots otherwise: see RedisEngine).
      if (publisher instanceof Cluster) {
        this.follow = setInterval(() => {
          if (this.slot === undefined || this.owner === undefined || publisher.status !== "ready") return;
          const owner = publisher.slots[this.slot]?.[0];
          if (owner !== undefined && owner !== this.owner) subscriber.refreshSlotsCache();
          publisher.exists(this.keys.cluster()).catch(() => undefined);
        }, SLOT_CHECK_MS);
        this.follow.unref();
      }
    }
    if (publisher instanceof Cluster) {
      // A node left (a master died, a failover): publishes may have failed meanwhile; once a
      // command gets through again, publishers send again what they may have lost.
      publisher.on("-node", () => {
        if (!publisherUp) return;
        publisherUp = false;
        this.gap("publish-lost");
        const retry = setInterval(() => {
          void publisher.ping().then(
            () => {
              if (publisherUp) return;
              clearInterval(retry);
              publisherUp = true;
              this.gap("publish");
            },
            () => undefined,
          );
        }, 250);
        retry.unref();
      });
    }
  }

  /**
   * Back after a drop: every channel this bus wants is subscribed again (also one whose first
   * SUBSCRIBE failed, which the client library would not know), then receivers hear of the gap.
   */
  private async resubscribe(): Promise<void> {
    try {
      if (this.channels.size > 0) await this.subscribeRedis([...this.channels].map((channel) => this.keys.channel(channel)));
    } catch {
      // Down again: the next "ready" tries again.
      return;
    }
    this.gap("receive");
  }

  private gap(side: GapSide): void {
    for (const handler of this.gapHandlers) handler(side);
  }

  /**
   * Each publish is a plain command: neither auto-pipelined (which made every publish under load
   * wait for the previous batch's replies, a Redis round trip) nor in a pipeline (pipelined
   * publishes left megabytes surviving each young-generation GC, so a busy watcher paused 3-8 ms
   * every few hundred updates; plain commands leave ~200 KB and pause it 1-2 ms). The publishes of
   * one tick (a burst of updates read off one backend chunk) still go out in one socket write: the
   * connection is corked until the tick ends. Order is kept: commands go out in order on one connection.
   */
  publish(channel: string, message: BusMessage): Promise<void> {
    const command = new Command(this.keys.sharded ? "spublish" : "publish", [this.keys.channel(channel), encodeBusMessage(message)]);
    corkUntilTickEnds(this.publisher);
    this.publisher.sendCommand(command);
    return command.promise.then(() => undefined);
  }

  /**
   * A channel stays wanted even when its SUBSCRIBE fails (Redis away): it is subscribed again once
   * the connection is back. A second call while the first SUBSCRIBE is in flight waits for it.
   */
  async subscribe(channel: string): Promise<void> {
    // Wanted and in flight: wait for it. Not wanted, though in flight (an UNSUBSCRIBE went out
    // after it): SUBSCRIBE again, after both on the connection.
    const pending = this.subscribing.get(channel);
    if (pending !== undefined && this.channels.has(channel)) return pending;
    if (this.channels.has(channel)) return;
    this.channels.add(channel);
    // The SUBSCRIBEs of one tick (a burst of adoptions brings hundreds) go out in one socket write.
    corkUntilTickEnds(this.subscriber);
    const subscribing = this.subscribeRedis([this.keys.channel(channel)]);
    this.subscribing.set(channel, subscribing);
    try {
      await subscribing;
    } finally {
      if (this.subscribing.get(channel) === subscribing) this.subscribing.delete(channel);
    }
  }

  /** Channels to unsubscribe when the batch's timer runs, and how to run it early. */
  private unsubscribing: { channels: string[]; done: Promise<void>; now: () => void } | undefined;

  /**
   * Unsubscribes go out together, as one UNSUBSCRIBE (SUNSUBSCRIBE on a cluster) of every channel
   * left within `UNSUBSCRIBE_BATCH_MS`: an interest table lets go of its channels one grace timer
   * at a time, and one command each was a socket write each, ~40 µs of a broker's CPU apiece on
   * loopback (4 % of it in the subscribe-cost bench's last-unsubscribe phase). Nothing waits for
   * an unsubscribe but its caller, and a message that still arrives meanwhile is dropped on receipt
   * (the channel is no longer wanted). A channel wanted again before the batch goes out is left
   * out of it: its SUBSCRIBE went out already, and stays the last word.
   */
  unsubscribe(channel: string): Promise<void> {
    if (!this.channels.delete(channel)) return Promise.resolve();
    if (this.unsubscribing === undefined) {
      const channels: string[] = [];
      let now = (): void => undefined;
      const done = new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, UNSUBSCRIBE_BATCH_MS);
        timer.unref();
        now = () => {
          clearTimeout(timer);
          resolve();
        };
      }).then(async () => {
        if (this.unsubscribing?.channels === channels) this.unsubscribing = undefined;
        const gone = channels.filter((name) => !this.channels.has(name)).map((name) => this.keys.channel(name));
        if (gone.length === 0 || this.closed) return;
        await (this.keys.sharded ? this.subscriber.sunsubscribe(...gone) : this.subscriber.unsubscribe(...gone));
      });
      this.unsubscribing = { channels, done, now };
    }
    this.unsubscribing.channels.push(channel);
    return this.unsubscribing.done;
  }

  /** The hash slot of every channel, on a cluster (known once a channel is subscribed). */
  private slot: number | undefined;
  /** The master that served the slot when last looked (a node key of the client). */
  private owner: string | undefined;

  /** SUBSCRIBE, or SSUBSCRIBE on a cluster (every channel of the bus is in its prefix's slot). */
  private async subscribeRedis(channels: string[]): Promise<void> {
    if (this.keys.sharded && this.slot === undefined && channels[0] !== undefined) {
      this.slot = Number(await (this.publisher as Cluster).cluster("KEYSLOT", channels[0]));
      this.owner = (this.subscriber as Cluster).slots[this.slot]?.[0];
    }
    await (this.keys.sharded ? this.subscriber.ssubscribe(...channels) : this.subscriber.subscribe(...channels));
  }

  onMessage(handler: (channel: string, message: BusMessage) => void): void {
    this.handler = handler;
  }

  onGap(handler: (side: GapSide) => void): void {
    this.gapHandlers.push(handler);
  }

  /** The connections belong to whoever made them (see `RedisEngine`). */
  async close(): Promise<void> {
    clearInterval(this.health);
    clearInterval(this.follow);
    this.closed = true;
    this.channels.clear();
    this.unsubscribing?.now();
    this.handler = undefined;
  }

  private receive(redisChannel: Buffer, payload: Buffer): void {
    const channel = this.keys.channelName(redisChannel.toString());
    if (channel === undefined || !this.channels.has(channel)) return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(payload.toString());
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

/** How often, on a cluster, the bus checks which master serves its slot (see `RedisBus`). */
const SLOT_CHECK_MS = 1_000;

/** How long unsubscribes gather before they go out as one command (see `RedisBus.unsubscribe`). */
const UNSUBSCRIBE_BATCH_MS = 50;

const corked = new WeakSet<RedisClient>();

/**
 * Corks `connection` until the current tick ends, so the commands of one tick go out in one socket
 * write (see `RedisBus.publish`); order is kept, as on any one connection.
 */
export function corkUntilTickEnds(connection: RedisClient): void {
  // A Redis Cluster client spreads commands over one connection per node: nothing to cork here.
  if (corked.has(connection) || connection.status !== "ready" || !("stream" in connection)) return;
  const stream = connection.stream;
  stream.cork();
  corked.add(connection);
  process.nextTick(() => {
    corked.delete(connection);
    stream.uncork();
  });
}

/** Pings a ready connection; one that does not answer within `timeoutMs` is dropped and reconnects. */
async function checkConnection(connection: RedisClient, timeoutMs: number): Promise<void> {
  if (connection.status !== "ready") return;
  let timer: NodeJS.Timeout | undefined;
  const answered = await Promise.race([
    connection.ping().then(
      () => true,
      () => false,
    ),
    new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs))),
  ]);
  clearTimeout(timer);
  if (!answered && connection.status === "ready") connection.disconnect(true);
}
