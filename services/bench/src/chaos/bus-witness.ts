/**
 * The witness of a chaos run: a Redis connection of the harness subscribed (PSUBSCRIBE) to the
 * cluster's bus channels, which records every `resource.updated` the watcher publishes with the
 * cluster position it got: which emitted update (seq) has which position, and which publishes are
 * re-announcements (the resource itself, no seq). It reads what every broker reads, and nothing
 * of a broker; like every pub/sub subscriber it hears nothing while its connection is down (the
 * harness also learns positions from the clients' live deliveries, see coverage.ts).
 */
import { Redis } from "ioredis";
import { nowMicros } from "../core/clock.js";
import { BACKEND_ID, backendUri } from "../core/bench-uris.js";
import type { PublishedUpdate } from "./coverage.js";

const RESOURCE = backendUri(0).slice(0, -1); // bench://r/

export class BusWitness {
  readonly published: PublishedUpdate[] = [];
  /** When the witness's connection became ready (the first, then each reconnection), µs. */
  readonly connections: number[] = [];
  /** Messages on the bus it could not read as a `resource.updated` of the bench backend (other kinds excluded). */
  unreadable = 0;
  /** Positions that went backwards (a restarted Redis counting again from a lower number). */
  backwards = 0;
  /** The first of them: [position, the highest seen before, when (µs)]. */
  readonly backwardSamples: [number, number, number][] = [];
  private readonly seen = new Set<number>();
  private newest = 0;

  private constructor(
    private readonly redis: Redis,
    private readonly step: number,
  ) {
    redis.on("ready", () => this.connections.push(nowMicros()));
    redis.on("error", () => undefined);
    redis.on("pmessage", (_pattern: string, _channel: string, message: string) => this.take(message));
  }

  /** Subscribes to every bus channel under `keyPrefix`; resolves once subscribed. */
  static async start(redisUrl: string, keyPrefix: string, step: number): Promise<BusWitness> {
    const redis = new Redis(redisUrl, { maxRetriesPerRequest: null, retryStrategy: () => 200, lazyConnect: true });
    const witness = new BusWitness(redis, step);
    await redis.connect();
    await redis.psubscribe(`${keyPrefix.replace(/[*?[\]\\]/g, "\\$&")}ch:*`);
    return witness;
  }

  async stop(): Promise<void> {
    await this.redis.quit().catch(() => this.redis.disconnect());
  }

  private take(message: string): void {
    if (!message.includes('"resource.updated"')) return;
    let parsed: { kind?: unknown; backendId?: unknown; key?: unknown; uri?: unknown; position?: unknown };
    try {
      parsed = JSON.parse(message) as typeof parsed;
    } catch {
      this.unreadable++;
      return;
    }
    const { backendId, key, uri, position } = parsed;
    if (backendId !== BACKEND_ID || typeof key !== "string" || typeof uri !== "string" || typeof position !== "number" || !key.startsWith(RESOURCE)) {
      this.unreadable++;
      return;
    }
    const k = Number(key.slice(RESOURCE.length));
    // One update is published on the channel of every key it falls under: one record per position, from its resource's channel.
    if (!Number.isInteger(k) || this.seen.has(position)) return;
    this.seen.add(position);
    let seq = -1;
    if (uri !== key) {
      const [step, seqText] = uri.slice(key.length + 1).split(".");
      if (Number(step) !== this.step || seqText === undefined) {
        this.unreadable++;
        return;
      }
      seq = Number(seqText);
    }
    if (position < this.newest) {
      this.backwards++;
      if (this.backwardSamples.length < 20) this.backwardSamples.push([position, this.newest, nowMicros()]);
    }
    this.newest = Math.max(this.newest, position);
    this.published.push({ position, key: k, seq, atMicros: nowMicros() });
  }
}
